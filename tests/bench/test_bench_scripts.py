"""bench/: the speed scripts run end to end on the CPU (tiny sizes) and refuse what they cannot measure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=600)


def test_bench_loss_prints_every_variant_against_the_reference():
    result = run("bench_loss.py", "--tokens", "64", "--hidden", "16", "--vocab", "128", "--device", "cpu",
                 "--chunks", "16,64", "--compile", "off", "--min-window-s", "0.05", "--max-spread", "100")
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| train") or line.startswith("| eval")]
    assert len(rows) == 2 * 3                       # reference + two chunk sizes, train and eval
    assert all(line.rstrip().endswith("x |") for line in rows)


def test_bench_vs_hf_prints_every_configuration_in_one_table(tmp_path):
    """Every peer and runtime configuration gets a row: measured, or 'not available' with why
    (Liger on a CPU), never silently left out; ratios are against the strongest peer."""
    out = tmp_path / "bench.json"
    result = run("bench_vs_hf.py", "--config", "tiny", "--batch", "2", "--seq", "16", "--device", "cpu",
                 "--min-window-s", "0.05", "--max-spread", "100", "--peers", "eager,liger",
                 "--runtime", "eager,eager+fused", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "| transformers, eager | " in result.stdout
    assert "| transformers + Liger kernels | not available: " in result.stdout
    assert "| runtime, eager | " in result.stdout and "| runtime, eager, fused projections | " in result.stdout
    assert "runtime, eager, fused projections / strongest transformers: train" in result.stdout
    data = json.loads(out.read_text())
    assert set(data["peers"]) == {"eager", "liger"} and set(data["runtime"]) == {"eager", "eager+fused"}
    assert data["strongest"]["train"] == "eager"


def test_bench_vs_hf_refuses_an_unknown_configuration():
    result = run("bench_vs_hf.py", "--device", "cpu", "--runtime", "model+turbo")
    assert result.returncode == 2 and "unknown option" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_profile_step_refuses_without_a_gpu():
    result = run("profile_step.py")
    assert result.returncode == 2
    assert "needs a CUDA device" in result.stderr
    assert "Traceback" not in result.stderr


def test_bench_validate_generates_a_clean_set(tmp_path, monkeypatch):
    """The figure measures a clean run: the generated contracts have no findings (exit 0)."""
    sys.path.insert(0, str(BENCH))
    try:
        import bench_validate
    finally:
        sys.path.remove(str(BENCH))
    root = bench_validate.make_workspace(tmp_path, 12)
    result = subprocess.run(bench_validate.PV, cwd=root, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "12 contracts" in result.stdout and "0 errors, 0 warnings" in result.stdout
