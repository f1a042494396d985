"""Subjects: a falsifier runs on named subjects (its cells are subject x device), and on a
user's checkpoint given by path (`pv run --subject-path DIR`), which never counts toward a
contract. Mirrors pv/subjects.py and the subject parts of schema, codegen, plugin, lifecycle,
status and run (each of those files' own tests keep their own concerns)."""

from __future__ import annotations

import json
import struct

import pytest
from click.testing import CliRunner

from pv import subjects
from pv.cli import main
from pv.schema import FalsificationTest
from pv_workspace import falsifier, make_workspace

# A check taking the subject as `model`; the workspace names that parameter [tool.pv] subject_param.
SUBJECT_CHECKS = '''\
import os


def model_loss(*, device, model, scale=1.0):
    """observations: val_loss, vocab_size; a path subject reads its loss from the directory."""
    if os.path.isdir(model):
        with open(os.path.join(model, "loss.txt"), encoding="utf-8") as handle:
            return {"val_loss": float(handle.read()), "vocab_size": 1024}
    return {"val_loss": {"good": 1.0, "bad": 50.0}[model] * scale, "vocab_size": 1024}


def no_model(*, device):
    return {"val_loss": 1.0, "vocab_size": 1024}
'''


@pytest.fixture
def ws(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path, extra_pyproject='subject_param = "model"\n')
    (ws.root / ws.package / "subj.py").write_text(SUBJECT_CHECKS, encoding="utf-8")
    ws.add_contract("subj", [
        falsifier("FALSIFY-SUBJ-001", check="subj:model_loss", subjects=["good", "bad"], params={"scale": 1.0},
                  mutants=["drops_bias"]),
        falsifier("FALSIFY-SUBJ-002", check="basic:loss"),  # no subjects: as before
    ])
    monkeypatch.chdir(ws.root)
    ws.generate()
    return ws


def pv(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def checkpoint(directory, loss="1.0", config=None, header=None):
    """A minimal HF-style checkpoint directory: config.json + a safetensors file."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config or {"model_type": "qwen2"}), encoding="utf-8")
    head = json.dumps(header or {"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + b"\0\0\0\0")
    (directory / "loss.txt").write_text(loss, encoding="utf-8")
    return directory


# How to make a bad checkpoint path, and what the error says about it.
BAD_PATHS = [
    (lambda p: None, "no such directory"),
    (lambda p: p.write_text("x"), "not a directory"),
    (lambda p: p.mkdir(), "has no config.json"),
]


# --- pv.subjects -------------------------------------------------------------------------------


def test_a_path_subject_is_the_absolute_directory_and_a_digest(tmp_path):
    found = subjects.path_subject(checkpoint(tmp_path / "ckpt"))
    assert found.name == f"path:{(tmp_path / 'ckpt').resolve()}"
    assert subjects.param_value(found.name) == str((tmp_path / "ckpt").resolve())
    assert subjects.param_value("tiny-trained") == "tiny-trained"
    assert len(found.digest) == 64


def test_a_different_checkpoint_at_the_same_path_has_another_digest(tmp_path):
    first = subjects.path_subject(checkpoint(tmp_path / "c")).digest
    assert subjects.path_subject(tmp_path / "c").digest == first  # same bytes, same subject
    checkpoint(tmp_path / "c", config={"model_type": "llama"})
    second = subjects.path_subject(tmp_path / "c").digest
    checkpoint(tmp_path / "c", header={"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})
    third = subjects.path_subject(tmp_path / "c").digest
    assert len({first, second, third}) == 3


@pytest.mark.parametrize("make, what", BAD_PATHS)
def test_bad_checkpoint_paths_name_the_path_and_what_is_missing(tmp_path, make, what):
    target = tmp_path / "ckpt"
    make(target)
    with pytest.raises(subjects.SubjectError, match=what) as caught:
        subjects.path_subject(target)
    assert str(target) in str(caught.value)


def test_a_truncated_safetensors_header_is_an_error(tmp_path):
    directory = checkpoint(tmp_path / "c")
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", 10_000) + b"{}")
    with pytest.raises(subjects.SubjectError, match="truncated"):
        subjects.path_subject(directory)


# --- schema ------------------------------------------------------------------------------------


def base(**extra):
    data = {"id": "FALSIFY-X-001", "rule": "r", "prediction": "a < 1", "check": "p.m:f", "devices": ["cpu"],
            "if_fails": "x"}
    return FalsificationTest.model_validate({**data, **extra})


def test_subject_names_are_plain_slugs_listed_once():
    assert base(subjects=["tiny-trained", "qwen2-0.5b-stdlib"]).subjects == ["tiny-trained", "qwen2-0.5b-stdlib"]
    for bad in (["Tiny"], ["a b"], ["../x"], ["path:/x"], ["a", "a"], []):
        with pytest.raises(ValueError):
            base(subjects=bad)


def test_the_subject_list_is_not_in_the_hash_but_a_cell_hash_is_the_hand_written_one():
    one, two = base(subjects=["a"]), base(subjects=["b", "a"])
    assert one.definition_sha256() == two.definition_sha256() == base().definition_sha256()
    # moving `checkpoint: a` from params to subjects keeps the evidence fresh
    assert one.definition_sha256("a", "checkpoint") == base(params={"checkpoint": "a"}).definition_sha256()
    assert one.definition_sha256("a", "checkpoint") != one.definition_sha256("b", "checkpoint")
    assert two.cells() == [("b", "cpu"), ("a", "cpu")] and base().cells() == [(None, "cpu")]


# --- validate ----------------------------------------------------------------------------------


def test_validate_refuses_a_subject_param_also_set_in_params(ws):
    ws.add_contract("dup", [falsifier("FALSIFY-DUP-001", check="subj:model_loss", subjects=["good"],
                                      params={"model": "bad"})])
    result = pv("validate", "contracts/dup-v1.yaml")
    assert result.exit_code == 1
    assert "PV318" in result.output and "params sets 'model'" in result.output
    assert "list its value under `subjects:`" in result.output


def test_validate_says_when_the_check_does_not_take_the_subject_param(ws):
    ws.add_contract("nop", [falsifier("FALSIFY-NOP-001", check="subj:no_model", subjects=["good"])])
    result = pv("validate", "contracts/nop-v1.yaml")
    assert result.exit_code == 1 and "PV313" in result.output and "'model'" in result.output


def test_subject_param_must_be_a_parameter_name(tmp_path):
    from pv.config import ConfigError, load_workspace

    bad = make_workspace(tmp_path, extra_pyproject='subject_param = "not a name"\n')
    with pytest.raises(ConfigError, match="subject_param"):
        load_workspace(bad.root)


# --- generated tests and the plugin ------------------------------------------------------------


def test_generated_tests_run_once_per_device_and_subject(ws):
    result = ws.pytest("generated_tests/test_subj.py", "--collect-only", "-q")
    ids = sorted(line for line in result.stdout.splitlines() if "::" in line)  # pytest-randomly shuffles them
    assert ids == sorted(["generated_tests/test_subj.py::test_falsify_subj_001[cpu-good]",
                          "generated_tests/test_subj.py::test_falsify_subj_001[cpu-bad]",
                          "generated_tests/test_subj.py::test_falsify_subj_002[cpu]"])


def test_each_cell_records_its_subject_and_its_own_definition_hash(ws):
    ws.pytest("generated_tests/test_subj.py")
    records = {(r.falsifier, r.subject): r for r in ws.records()}
    f = ws.workspace()
    assert records[("FALSIFY-SUBJ-001", "good")].verdict.value == "PASS"
    assert records[("FALSIFY-SUBJ-001", "bad")].verdict.value == "FAIL"  # the check got model="bad"
    assert records[("FALSIFY-SUBJ-002", None)].verdict.value == "PASS"
    from pv.loader import load_contract

    test = load_contract(ws.contracts / "subj-v1.yaml")[0].contract.falsification_tests[0]
    assert records[("FALSIFY-SUBJ-001", "bad")].falsifier_sha256 == test.definition_sha256("bad", f.subject_param)


def test_the_plugin_subject_option_keeps_only_that_subjects_tests(ws):
    result = ws.pytest("generated_tests/test_subj.py", "--pv-subject", "good", "--pv-no-ledger", "-q")
    assert "1 passed, 2 deselected" in result.stdout, result.stdout


def test_the_plugin_runs_a_path_subject_instead_of_the_declared_ones(ws, tmp_path):
    ckpt = checkpoint(tmp_path / "mine", loss="2.0")
    result = ws.pytest("generated_tests/test_subj.py", "--pv-subject", f"path:{ckpt}")
    assert result.returncode == 0, result.stdout
    (record,) = ws.records()
    assert record.subject == f"path:{ckpt.resolve()}" and record.verdict.value == "PASS"
    assert record.subject_digest == subjects.path_subject(ckpt).digest
    assert record.observations["val_loss"] == 2.0  # read from the directory: the check got the path


def test_the_plugin_refuses_a_bad_checkpoint_path(ws, tmp_path):
    result = ws.pytest("generated_tests/test_subj.py", "--pv-subject", f"path:{tmp_path / 'nowhere'}")
    assert result.returncode == 4 and "no such directory" in result.stderr


# --- pv run ------------------------------------------------------------------------------------


def test_run_subject_runs_only_that_subjects_cells(ws):
    result = pv("run", "--contract", "subj", "--subject", "good")
    assert result.exit_code == 0, result.output
    assert [(r.falsifier, r.subject) for r in ws.records()] == [("FALSIFY-SUBJ-001", "good")]


def test_run_unknown_subject_is_a_usage_error_with_a_suggestion(ws):
    result = pv("run", "--contract", "subj", "--subject", "goood")
    assert result.exit_code == 2 and "not a subject" in result.output and "good" in result.output
    result = pv("run", "FALSIFY-SUBJ-002", "--subject", "good")
    assert result.exit_code == 2 and "FALSIFY-SUBJ-002" in result.output


def test_run_skip_subject_leaves_that_subjects_cells_out_and_keeps_the_rest(ws):
    result = pv("run", "--contract", "subj", "--skip-subject", "bad")
    assert result.exit_code == 0, result.output  # the "bad" cell would have FAILed
    assert sorted((r.falsifier, r.subject or "") for r in ws.records()) == [
        ("FALSIFY-SUBJ-001", "good"), ("FALSIFY-SUBJ-002", "")]


def test_run_skip_subject_must_name_a_declared_subject(ws):
    result = pv("run", "--all", "--skip-subject", "goood")
    assert result.exit_code == 2 and "no falsifier declares it" in result.output and "good" in result.output
    assert not ws.ledger.exists()


def test_run_stale_honours_skip_subject_and_subject(ws):
    """--stale narrows like a plain selection: a skipped subject's stale cell stays stale, unrun
    (on a CPU machine the GPU-built subject's cells must not be attempted and SKIPped)."""
    assert pv("run", "--contract", "subj").exit_code == 1           # the "bad" cell FAILs
    checks = ws.root / ws.package / "subj.py"
    checks.write_text(checks.read_text().replace('"bad": 50.0', '"bad": 40.0'), encoding="utf-8")
    before = len(ws.records())
    result = pv("run", "--stale", "--skip-subject", "bad")
    assert result.exit_code == 0 and "running 1 falsifier test(s)" in result.output, result.output
    assert [(r.falsifier, r.subject) for r in ws.records()[before:]] == [("FALSIFY-SUBJ-001", "good")]
    result = pv("run", "--stale", "--subject", "good")
    assert "nothing is stale" in result.output, result.output
    result = pv("run", "--stale", "--no-ledger")
    assert "running 1 falsifier test(s)" in result.output and "bad" in result.output, result.output


def test_strength_skip_subject_runs_the_mutant_on_the_other_cells_only(ws, monkeypatch):
    from pv import mutation

    monkeypatch.setattr(mutation, "REGISTRY", {})  # this workspace's planted bugs only
    result = pv("strength", "FALSIFY-SUBJ-001", "--skip-subject", "bad", "--no-ledger", "--format", "json")
    payload = json.loads(result.output[result.output.index("{"):])
    (cell,) = payload["cells"]
    assert cell["mutant"] == "drops_bias" and set(cell["devices"]) == {"cpu[good]"}, cell


@pytest.mark.parametrize("make, what", BAD_PATHS)
def test_run_subject_path_bad_input_exits_2_naming_the_path(ws, tmp_path, make, what):
    target = tmp_path / "ckpt"
    make(target)
    result = pv("run", "--contract", "subj", "--subject-path", str(target))
    assert result.exit_code == 2 and what in result.output and str(target) in result.output
    assert not ws.ledger.exists()


def test_run_subject_path_refuses_falsifiers_without_subjects(ws, tmp_path):
    result = pv("run", "FALSIFY-SUBJ-002", "--subject-path", str(checkpoint(tmp_path / "c")))
    assert result.exit_code == 2 and "declare(s) no `subjects:`" in result.output


def test_point_pv_at_your_checkpoint_in_two_commands(ws, tmp_path):
    """The user's view: run on their checkpoint, then see it on the dashboard, apart from the
    contract's own cells, which stay PENDING."""
    ckpt = checkpoint(tmp_path / "my ckpt", loss="3.0")
    result = pv("run", "--subject-path", str(ckpt), "--contract", "subj")
    assert result.exit_code == 0, result.output
    assert "1 passed" in result.output
    shown = pv("status")
    assert shown.exit_code == 0 and "1 row(s) on your checkpoints (not counted)" in shown.output
    text = ws.root.joinpath("docs/STATUS.md").read_text(encoding="utf-8")
    section = text.split("## Your checkpoints")[1].split("## Kill matrix")[0]
    assert f"path:{ckpt.resolve()}" in section and "FALSIFY-SUBJ-001" in section and "| PASS |" in section
    assert subjects.path_subject(ckpt).digest[:12] in section
    status = json.loads(pv("status", "--format", "json").output)
    cells = status["contracts"][0]["falsifiers"][0]["devices"]
    assert {k: v["state"] for k, v in cells.items()} == {"cpu[good]": "PENDING", "cpu[bad]": "PENDING"}
    # a different checkpoint at the same path is another row
    checkpoint(tmp_path / "my ckpt", loss="9.0", config={"model_type": "other"})
    assert pv("run", "--subject-path", str(ckpt), "--contract", "subj").exit_code == 1
    rows = json.loads(pv("status", "--format", "json").output)["checkpoints"]
    assert sorted(r["state"] for r in rows) == ["FAIL", "PASS"] and len({r["subject_digest"] for r in rows}) == 2


def test_stale_selection_names_the_subject(ws):
    assert pv("run", "--contract", "subj", "--subject", "good").exit_code == 0
    text = ws.contracts.joinpath("subj-v1.yaml").read_text(encoding="utf-8")
    ws.contracts.joinpath("subj-v1.yaml").write_text(text.replace("scale: 1.0", "scale: 0.5"), encoding="utf-8")
    ws.generate()
    result = pv("status", "--format", "json")
    stale = json.loads(result.output)["summary"]["stale"]
    assert stale == [{"falsifier": "FALSIFY-SUBJ-001", "subject": "good", "device": "cpu",
                      "why": ["definition changed"]}]
    result = pv("run", "--stale", "--no-ledger")
    assert "running 1 falsifier test(s)" in result.output and "cpu[good]" in result.output


def test_the_dashboard_has_a_row_per_subject_and_device(ws):
    assert pv("run", "--contract", "subj", "--subject", "good").exit_code == 0
    text = pv("status", "--stdout").output
    assert "| `FALSIFY-SUBJ-001` | PARTIAL | `good` | cpu | PASS |" in text
    assert "|   |   | `bad` | cpu | PENDING |" in text
    assert "| `FALSIFY-SUBJ-002` | PENDING | — | cpu | PENDING |" in text
    assert "discharged_per_device" not in text and "| cpu | 0/2 |" in text  # SUBJ-001 needs both subjects


def test_strength_runs_every_subject_cell_under_the_mutant(ws):
    result = pv("strength", "FALSIFY-SUBJ-001", "--no-ledger")
    assert "FALSIFY-SUBJ-001  cpu[good]" in result.output and "FALSIFY-SUBJ-001  cpu[bad]" in result.output
    assert "(cpu[bad] FAIL, cpu[good] PASS)" in result.output
