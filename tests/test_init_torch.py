"""`pv init --template torch`: a torch project scaffold whose check uses pv's own helpers
(pv.testing.torch_helpers, no pv-lab), scaffolded into tmp_path and run end to end with the
console scripts: its falsifier PASSes on cpu and its planted bug is killed."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from test_examples import BIN, Project

pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (BIN / "pv").exists(),
                                reason="needs git and the pv console script in this venv")


def test_torch_scaffold_passes_and_kills_its_planted_bug(tmp_path: Path):
    root = tmp_path / "my-model"
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "my-model"\nversion = "0.1.0"\n')
    (tmp_path / "home").mkdir()
    project = Project(root, tmp_path / "home")

    init = project.run("pv", "init", "--template", "torch")
    assert "created  my_model_checks/rmsnorm.py" in init.stdout, init.stdout
    checks = (root / "my_model_checks" / "checks.py").read_text()
    assert "from pv.testing.torch_helpers import" in checks and "pvlab" not in checks and "_util" not in checks
    validate = project.run("pv", "validate")
    assert "1 contracts, 1 falsifiers: 0 errors, 0 warnings" in validate.stdout, validate.stdout

    run = project.run("pv", "run", "--all", "--device", "cpu", "--format", "json")
    [outcome] = json.loads(run.stdout)["outcomes"]
    assert (outcome["falsifier"], outcome["verdict"]) == ("FALSIFY-DEMO-RMSNORM-001", "PASS")
    assert 0 < outcome["observations"]["max_abs_diff"] <= 1e-5 and outcome["observations"]["nonfinite"] == 0

    strength = project.run("pv", "strength", "--device", "cpu")
    assert "rms_norm_mean_over_rows" in strength.stdout and "KILLED" in strength.stdout, strength.stdout
    records = [json.loads(line) for line in (root / "evidence" / "ledger.jsonl").read_text().splitlines()]
    killed = [r for r in records if r["mutant"] == "rms_norm_mean_over_rows"]
    assert [r["verdict"] for r in killed] == ["FAIL"] and killed[0]["observations"]["max_abs_diff"] > 0.1


def test_validate_never_imports_torch_for_the_torch_scaffold(tmp_path: Path):
    root = tmp_path / "proj"
    root.mkdir()
    (tmp_path / "home").mkdir()
    project = Project(root, tmp_path / "home")
    project.run("pv", "init", "--template", "torch")
    probe = ("import sys\nfrom pv.cli import main\n"
             "try:\n    main(['validate'])\nexcept SystemExit as e:\n    print('exit', e.code)\n"
             "print('torch imported:', 'torch' in sys.modules)")
    done = project.run(sys.executable, "-c", probe)
    assert "exit 0" in done.stdout and "torch imported: False" in done.stdout, done.stdout + done.stderr


def test_torch_helpers_skip_an_absent_device_and_measure_in_float64():
    import torch

    from pv.harness import DeviceUnavailable
    from pv.testing import torch_helpers as th

    if not torch.cuda.is_available():
        with pytest.raises(DeviceUnavailable):
            th.torch_device("cuda")
    assert th.torch_device("cpu") == torch.device("cpu")
    a = th.randn((4, 3), seed=7)
    assert torch.equal(a, th.randn((4, 3), seed=7)) and not torch.equal(a, th.randn((4, 3), seed=8))
    stats = th.compared(a + 1e-3, a, rtol=0.0, atol=1e-3)
    assert stats["max_abs_diff"] == pytest.approx(1e-3, rel=1e-4) and stats["allclose_ratio"] == pytest.approx(1, rel=1e-3)
    bad = a.clone()
    bad[0, 0] = float("nan")
    assert th.diff_stats(bad, a)["nonfinite"] == 1
    assert th.rtol_atol({"float32": {"rtol": 1.0, "atol": 2.0}}, "float32") == (1.0, 2.0)
    with pytest.raises(ValueError, match="unknown dtype"):
        th.torch_dtype("float8")
