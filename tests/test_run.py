"""`pv run`: selection, regeneration, streamed progress, the verdict table and exit codes."""

from __future__ import annotations

import pytest

from pv import ledger
from pv_workspace import assert_contains, cli, falsifier, make_workspace


@pytest.fixture
def ws(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path)
    ws.add_contract("demo", [
        falsifier("FALSIFY-DEMO-001", devices=("cpu", "cuda"), mutants=["drops_bias"]),
        falsifier("FALSIFY-DEMO-002", prediction="val_loss < 1"),
    ])
    ws.add_contract("more", [
        falsifier("FALSIFY-MORE-001", prediction="x > 1", check="basic:boom"),
        falsifier("FALSIFY-MORE-002", devices=("cuda",)),
    ])
    return ws.enter(monkeypatch)


pv = cli("run")


def test_unknown_id_is_a_usage_error_with_near_matches(ws):
    result = pv("FALSIFY-DEMO-01")
    assert result.exit_code == 2
    assert "unknown falsifier 'FALSIFY-DEMO-01'; did you mean FALSIFY-DEMO-001" in result.output
    result = pv("--contract", "dem")
    assert result.exit_code == 2 and "unknown contract 'dem'; did you mean demo?" in result.output
    assert pv().exit_code == 2  # nothing named
    result = pv("FALSIFY-MORE-002", "--device", "cpu")
    assert result.exit_code == 2 and "not declared for --device cpu: FALSIFY-MORE-002 (declares cuda)" in result.output
    assert not ws.ledger.exists()


def test_a_passing_run_records_and_exits_zero(ws):
    result = pv("FALSIFY-DEMO-001", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert_contains(result.output, [
        "generated tests are out of date; regenerating:",
        "created  generated_tests/test_demo.py",
        "[1/1] FALSIFY-DEMO-001  cpu   PASS",
        "1 passed, 0 falsified, 0 errored",
        "1 record(s) appended to evidence/ledger.jsonl",
    ])
    records = ws.records()
    assert [(r.falsifier, r.device, r.verdict.value) for r in records] == [("FALSIFY-DEMO-001", "cpu", "PASS")]
    again = pv("FALSIFY-DEMO-001", "--device", "cpu", "--no-ledger")
    assert "out of date" not in again.output and "dry run: no ledger records written" in again.output
    assert len(ws.records()) == 1


def test_a_pass_that_cannot_be_recorded_is_not_ok(ws):
    """A ledger pv cannot write (here a path through a file; a read-only directory is the same)
    turns a PASS into no evidence: exit 1 and say why, never "0 record(s) appended" and exit 0."""
    result = pv("FALSIFY-DEMO-001", "--device", "cpu", "--ledger", "pyproject.toml/ledger.jsonl")
    assert result.exit_code == 1, result.output
    assert "1 outcome(s) could not be recorded in" in result.output
    assert "could not write the ledger record" in result.output


def test_falsified_or_errored_exits_one_with_a_table(ws):
    result = pv("--all")
    assert result.exit_code == 1
    out = result.output
    progress = [line for line in out.splitlines() if line.startswith("[")]
    assert len(progress) == 5 and progress[-1].startswith("[5/5]")
    table = out[out.index("FALSIFIER"):]
    rows = {tuple(line.split()[:3]) for line in table.splitlines()[1:6]}
    assert rows == {("FALSIFY-DEMO-001", "cpu", "PASS"), ("FALSIFY-DEMO-001", "cuda", "SKIP"),
                    ("FALSIFY-DEMO-002", "cpu", "FAIL"), ("FALSIFY-MORE-001", "cpu", "ERROR"),
                    ("FALSIFY-MORE-002", "cuda", "SKIP")}
    assert "val_loss=2, vocab_size=1024" in table
    assert "bound:    val_loss < 1  ->  2 < 1" in out  # the failure is explained
    assert "check raised ZeroDivisionError" in out
    assert "1 passed, 1 falsified, 1 errored" in out
    assert "2 skipped — not evidence" in out
    assert len(ws.records()) == 5


def test_skip_alone_exits_zero_but_says_it_is_not_evidence(ws):
    result = pv("--contract", "more", "--device", "cuda")
    assert result.exit_code == 0, result.output
    assert "[1/1] FALSIFY-MORE-002  cuda  SKIP" in result.output
    assert "0 passed, 0 falsified, 0 errored" in result.output
    assert "1 skipped — not evidence" in result.output
    assert [r.verdict.value for r in ws.records()] == ["SKIP"]


def test_repeat_mutant_keyword_and_passthrough(ws):
    result = pv("FALSIFY-DEMO-001", "FALSIFY-DEMO-002", "--device", "cpu", "--repeat", "2", "--mutant", "drops_bias",
                "--ledger", "gpu.jsonl", "-k", "demo_001", "--", "-p", "no:randomly")
    assert result.exit_code == 1, result.output
    assert "[2/4]" in result.output and "FAIL (killed)" in result.output
    assert "under mutant drops_bias: 2 killed (FAIL), 0 survived (PASS)" in result.output
    records = ledger.read(ws.root / "gpu.jsonl").records
    assert [(r.falsifier, r.mutant, r.verdict.value) for r in records] == [("FALSIFY-DEMO-001", "drops_bias", "FAIL")] * 2
    assert len({r.run_id for r in records}) == 1
    assert not ws.ledger.exists()


def test_unknown_mutant_is_a_usage_error(ws):
    result = pv("FALSIFY-DEMO-001", "--mutant", "drop_bias")
    assert result.exit_code == 2 and "did you mean 'drops_bias'?" in result.output


def test_invalid_contracts_stop_the_run(ws):
    (ws.contracts / "broken-v1.yaml").write_text("metadata: [\n")
    result = pv("--all")
    assert result.exit_code == 1
    assert "contracts/broken-v1.yaml:" in result.output and "nothing was run" in result.output
    assert not ws.ledger.exists()


def test_broken_pytest_is_reported_not_hidden(ws):
    ws.generate()
    path = ws.generated / "test_demo.py"
    hand_edited = path.read_text().replace("from pv.harness import", "raise SystemExit('collection boom')\nfrom pv.harness import")
    assert hand_edited != path.read_text()
    path.write_text(hand_edited)
    # the hand edit is detected as drift and regenerated: the run still works
    result = pv("FALSIFY-DEMO-002")
    assert "updated  generated_tests/test_demo.py" in result.output
    assert result.exit_code == 1 and "1 falsified" in result.output


def test_pytest_that_cannot_start_is_shown_and_exits_one(ws):
    (ws.root / "conftest.py").write_text("raise RuntimeError('conftest boom')\n")
    result = pv("FALSIFY-DEMO-001", "--device", "cpu")
    assert result.exit_code == 1
    assert "conftest boom" in result.output
    assert "1 selected test(s) reported no verdict" in result.output
    assert not ws.ledger.exists()


def test_plugin_is_loaded_explicitly_when_pytest_would_not_autoload_it(ws, monkeypatch):
    """As on the GPU machine, where pv runs from a source tree without its entry point."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = pv("FALSIFY-DEMO-001", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "[1/1] FALSIFY-DEMO-001  cpu   PASS" in result.output


def test_a_workspace_nested_in_another_project_uses_its_own_settings(tmp_path, monkeypatch):
    outer = tmp_path / "outer"
    outer.mkdir()
    (outer / "pyproject.toml").write_text(
        '[tool.pv]\nmutants_module = "no_such_module"\nledger = "outer-ledger.jsonl"\n\n'
        '[tool.pytest.ini_options]\naddopts = "-ra"\n')
    ws = make_workspace(outer)
    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001", mutants=["drops_bias"])])
    monkeypatch.chdir(ws.root)
    result = pv("FALSIFY-DEMO-001", "--mutant", "drops_bias")
    assert result.exit_code == 1, result.output  # killed, and no "reported no verdict"
    assert "1 killed (FAIL)" in result.output and "no verdict" not in result.output
    assert [r.mutant for r in ws.records()] == ["drops_bias"]
    assert not (outer / "outer-ledger.jsonl").exists()


def test_stale_reruns_exactly_the_rows_whose_code_changed(ws):
    assert pv("FALSIFY-DEMO-001", "FALSIFY-DEMO-002", "--device", "cpu").exit_code == 1  # DEMO-002 FAILs
    result = pv("--stale", "--device", "cpu")
    assert result.exit_code == 0 and "nothing is stale on cpu" in result.output
    basic = ws.root / ws.package / "basic.py"
    basic.write_text(basic.read_text().replace('"""observations: val_loss, vocab_size"""',
                                               '"""Observations: val_loss, vocab_size (reworded)."""'))
    assert "nothing is stale" in pv("--stale", "--device", "cpu").output  # a docstring is no code change
    basic.write_text(basic.read_text().replace("loss = 18.55", "loss = 18.5"))
    result = pv("--stale", "--device", "cpu", "--no-ledger")
    assert "running 2 falsifier test(s) on cpu" in result.output, result.output
    assert "FALSIFY-DEMO-001  cpu" in result.output and "FALSIFY-DEMO-002  cpu" in result.output
    assert "FALSIFY-MORE" not in result.output  # never run, so PENDING, not stale
    result = pv("--stale", "--device", "cpu", "FALSIFY-DEMO-001")
    assert result.exit_code == 0 and "running 1 falsifier test(s) on cpu" in result.output
    result = pv("--stale", "--device", "cpu")
    assert "running 1 falsifier test(s)" in result.output and "FALSIFY-DEMO-002  cpu" in result.output
    assert "nothing is stale on cpu" in pv("--stale", "--device", "cpu").output
    assert pv("--stale", "--all").exit_code == 2


def test_git_commit_flag_wins_and_is_checked(ws):
    assert pv("FALSIFY-DEMO-001", "--device", "cpu", "--git-commit", "not-a-sha").exit_code == 2
    assert pv("FALSIFY-DEMO-001", "--device", "cpu", "--git-commit", "e" * 40).exit_code == 0
    (record,) = ws.records()
    assert (record.git_commit, record.git_commit_source) == ("e" * 40, "PV_GIT_COMMIT")


def test_stale_with_a_separate_ledger_reads_the_committed_evidence_too(ws, tmp_path):
    # The GPU machine: the committed ledger holds the old records; new ones go to a separate file.
    assert pv("FALSIFY-DEMO-001", "--device", "cpu").exit_code == 0
    basic = ws.root / ws.package / "basic.py"
    basic.write_text(basic.read_text().replace("loss = 18.55", "loss = 18.5"))
    other = tmp_path / "gpu-ledger.jsonl"
    result = pv("--stale", "--device", "cpu", "--ledger", str(other))
    assert result.exit_code == 0 and "running 1 falsifier test(s) on cpu" in result.output, result.output
    assert "nothing is stale on cpu" in pv("--stale", "--device", "cpu", "--ledger", str(other)).output
