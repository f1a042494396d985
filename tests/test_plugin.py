"""pv's pytest plugin: every falsifier outcome becomes one complete ledger record.

The generated tests run in a pytest subprocess inside a throw-away workspace, as `pv run` does.
"""

from __future__ import annotations

import json

import pytest

from pv.loader import load_contract
from pv_workspace import falsifier, make_workspace


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    ws = make_workspace(tmp_path_factory.mktemp("plugin"))
    ws.add_contract("demo", [
        falsifier("FALSIFY-DEMO-001", devices=("cpu", "cuda"), params={"seed": 7}, mutants=["drops_bias"]),
        falsifier("FALSIFY-DEMO-002", prediction="val_loss < 1"),
        falsifier("FALSIFY-DEMO-003", prediction="x > 1", check="basic:boom"),
        falsifier("FALSIFY-DEMO-004", prediction="x > 1", check=None),
        falsifier("FALSIFY-DEMO-005", prediction="x > 1", check="basic:not_a_dict"),
        falsifier("FALSIFY-DEMO-006", prediction="no_such_name > 1"),
        falsifier("FALSIFY-DEMO-007", prediction="x > 1", check="basic:needs_gpu"),
        falsifier("FALSIFY-DEMO-008", prediction="rtol == 0.01 and bf16_rtol == 0.016", check="basic:tol",
                  tolerance={"source": "chosen for the test", "float32": {"rtol": 0.01, "atol": 0.0}}),
        falsifier("FALSIFY-DEMO-009", prediction="not got_tolerance", check="basic:no_tol"),
    ])
    ws.generate()
    return ws


EXPECTED = {
    ("FALSIFY-DEMO-001", "cpu"): "PASS",
    ("FALSIFY-DEMO-001", "cuda"): "SKIP",
    ("FALSIFY-DEMO-002", "cpu"): "FAIL",
    ("FALSIFY-DEMO-003", "cpu"): "ERROR",
    ("FALSIFY-DEMO-004", "cpu"): "ERROR",
    ("FALSIFY-DEMO-005", "cpu"): "ERROR",
    ("FALSIFY-DEMO-006", "cpu"): "ERROR",
    ("FALSIFY-DEMO-007", "cpu"): "SKIP",
    ("FALSIFY-DEMO-008", "cpu"): "PASS",
    ("FALSIFY-DEMO-009", "cpu"): "PASS",
}


@pytest.fixture(scope="module")
def full_run(ws):
    ledger = ws.root / "full.jsonl"
    report = ws.root / "full-report.jsonl"
    proc = ws.pytest("generated_tests", "-rA", "--pv-ledger", str(ledger), "--pv-report", str(report),
                     "--pv-run-id", "run-full")
    from pv import ledger as ledger_mod

    contents = ledger_mod.read(ledger)
    assert not contents.problems
    events = [json.loads(line) for line in report.read_text().splitlines()]
    return proc, contents.records, events


def test_every_outcome_maps_to_the_right_verdict(full_run):
    proc, records, _ = full_run
    assert proc.returncode == 1, proc.stdout
    got = {(r.falsifier, r.device): r.verdict.value for r in records}
    assert got == EXPECTED
    by = {(r.falsifier, r.device): r for r in records}
    assert "ZeroDivisionError" in by["FALSIFY-DEMO-003", "cpu"].message
    assert "unbound falsifier FALSIFY-DEMO-004" in by["FALSIFY-DEMO-004", "cpu"].message
    assert "not a mapping of named observations" in by["FALSIFY-DEMO-005", "cpu"].message
    assert "no observation named 'no_such_name'" in by["FALSIFY-DEMO-006", "cpu"].message
    assert "no accelerator" in by["FALSIFY-DEMO-007", "cpu"].message
    assert "device absent" in by["FALSIFY-DEMO-001", "cuda"].message


def test_pytest_itself_shows_errors_and_skips_never_passes(full_run):
    proc, _, _ = full_run
    out = proc.stdout
    assert "ERROR generated_tests/test_demo.py::test_falsify_demo_004[cpu]" in out  # unbound: ERROR
    assert "ERROR generated_tests/test_demo.py::test_falsify_demo_003[cpu]" in out  # check raised: ERROR
    assert "FALSIFIED generated_tests/test_demo.py::test_falsify_demo_002[cpu]" in out
    assert "PASSED generated_tests/test_demo.py::test_falsify_demo_001[cuda]" not in out
    assert "SKIPPED" in out and "not evidence" in out
    assert "3 passed, 1 falsified, 4 errored" in out
    assert "2 skipped — not evidence" in out


def test_records_carry_every_field(ws, full_run):
    _, records, _ = full_run
    loaded, _ = load_contract(ws.contracts / "demo-v1.yaml")
    definition = loaded.contract.falsifier("FALSIFY-DEMO-001")
    r = next(r for r in records if (r.falsifier, r.device) == ("FALSIFY-DEMO-001", "cpu"))
    assert r.contract == "demo" and r.contract_version == "1.0.0"
    assert r.falsifier_sha256 == definition.definition_sha256()
    assert r.observations == {"val_loss": 2.0, "vocab_size": 1024}
    assert r.prediction == "val_loss < 0.7 * ln(vocab_size)"
    assert r.margin == pytest.approx(0.7 * 6.931471805599453 - 2.0)
    assert r.seed == 7 and r.mutant is None and r.run_id == "run-full"
    assert r.device_name and r.host and r.duration_s >= 0
    assert r.versions["python"] and r.versions["pv"] and "torch" in r.versions and "cuda" in r.versions
    assert r.time_utc.endswith("Z")
    assert r.git_commit is None and r.git_dirty is None  # the workspace is not a git repo
    fail = next(r for r in records if r.falsifier == "FALSIFY-DEMO-002")
    assert fail.margin == pytest.approx(-1.0)
    assert "observed: val_loss=2, vocab_size=1024" in fail.message
    assert "bound:    val_loss < 1  ->  2 < 1" in fail.message and "margin:   -1" in fail.message
    assert "if it fails: look at FALSIFY-DEMO-002" in fail.message
    assert len({r.record_id for r in records}) == len(records)


def test_report_streams_one_line_per_test(full_run):
    _, records, events = full_run
    assert events[0]["event"] == "start" and events[-1]["event"] == "finish"
    outcomes = [e for e in events if e["event"] == "outcome"]
    assert {e["record_id"] for e in outcomes} == {r.record_id for r in records}
    assert events[-1]["counts"] == {"PASS": 3, "FAIL": 1, "ERROR": 4, "SKIP": 2}


def test_device_filter_and_no_ledger(ws):
    proc = ws.pytest("generated_tests", "--pv-device", "cuda", "--pv-no-ledger", "--pv-report", "r.jsonl")
    assert proc.returncode == 0, proc.stdout
    assert "1 skipped, 9 deselected" in proc.stdout
    assert not ws.ledger.exists()
    outcome = [json.loads(x) for x in (ws.root / "r.jsonl").read_text().splitlines()][1]
    assert outcome["verdict"] == "SKIP" and outcome["record_id"] is None


def test_mutant_is_killed_and_recorded(ws):
    ledger = ws.root / "mutant.jsonl"
    proc = ws.pytest("generated_tests", "-k", "demo_001 or demo_008", "--pv-device", "cpu",
                     "--pv-mutant", "drops_bias", "--pv-ledger", str(ledger))
    assert proc.returncode == 1
    from pv import ledger as ledger_mod

    records = {r.falsifier: r for r in ledger_mod.read(ledger).records}
    assert records["FALSIFY-DEMO-001"].verdict.value == "FAIL"  # killed
    assert records["FALSIFY-DEMO-001"].observations["val_loss"] == 18.55
    assert "mutant:   drops_bias (killed)" in records["FALSIFY-DEMO-001"].message
    assert records["FALSIFY-DEMO-008"].verdict.value == "PASS"  # survived
    assert {r.mutant for r in records.values()} == {"drops_bias"}


def test_unknown_mutant_is_a_usage_error_with_suggestion(ws):
    proc = ws.pytest("generated_tests", "--pv-mutant", "drop_bias", "--pv-no-ledger")
    assert proc.returncode == 4
    assert "unknown mutant 'drop_bias'; did you mean 'drops_bias'?" in proc.stderr


def test_xdist_workers_each_append_their_records(ws):
    ledger = ws.root / "xdist.jsonl"
    proc = ws.pytest("generated_tests", "-n", "2", "--pv-ledger", str(ledger), "--pv-report", "x.jsonl")
    assert proc.returncode == 1, proc.stdout
    from pv import ledger as ledger_mod

    contents = ledger_mod.read(ledger)
    assert not contents.problems
    assert {(r.falsifier, r.device): r.verdict.value for r in contents.records} == EXPECTED
    assert len({r.run_id for r in contents.records}) == 1  # the controller's run id reached the workers
    events = [json.loads(x) for x in (ws.root / "x.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "outcome" for e in events) == len(EXPECTED)


def test_torn_ledger_is_warned_about_and_not_corrupted(ws):
    ledger = ws.root / "torn.jsonl"
    proc = ws.pytest("generated_tests", "-k", "demo_001 and cpu", "--pv-ledger", str(ledger))
    assert proc.returncode == 0
    good = ledger.read_bytes()
    ledger.write_bytes(good + b'{"schema_version": 1, "record_id": "abc", "contr')  # a crash mid-write
    proc = ws.pytest("generated_tests", "-k", "demo_001 and cpu", "--pv-ledger", str(ledger))
    assert proc.returncode == 0
    assert "bad line(s): line 2: torn last line" in proc.stdout
    data = ledger.read_bytes()
    assert data.startswith(good)  # earlier records untouched
    from pv import ledger as ledger_mod

    contents = ledger_mod.read(ledger)
    assert [p.line for p in contents.problems] == [2]  # the fragment stays one reported line
    assert len(contents.records) == 2


def test_other_tests_are_left_alone(tmp_path):
    ws = make_workspace(tmp_path)
    (ws.root / "test_plain.py").write_text("def test_ok():\n    assert True\n")
    proc = ws.pytest("test_plain.py")
    assert proc.returncode == 0 and "1 passed" in proc.stdout
    assert not ws.ledger.exists() and "pv falsifiers" not in proc.stdout


def test_records_are_bound_to_the_code_the_check_ran(full_run, ws):
    _, records, events = full_run
    by = {(r.falsifier, r.device): r for r in records}
    package = ws.package
    passed = by["FALSIFY-DEMO-001", "cpu"]
    ran = passed.executed_code
    # the function the check ran, and the module-level code of its module and package
    assert set(ran[f"{package}.basic"]) == {"<module>", "loss"}
    assert set(ran[package]) == {"<module>"}
    assert passed.code_digests is None and not passed.binding_problems
    assert passed.code_origins[f"{package}.basic"] == f"{package}/basic.py"
    from pv.codebind import TreeDigests

    assert TreeDigests(ws.root).record_changes(passed) == ()
    errored = by["FALSIFY-DEMO-003", "cpu"]  # an ERROR is evidence about the code it ran too
    assert set(errored.executed_code[f"{package}.basic"]) == {"<module>", "boom"}
    # a SKIP before the check ran: bound to what the test module imports (the module rule)
    assert set(by["FALSIFY-DEMO-001", "cuda"].code_digests) == {package, f"{package}.basic"}
    assert by["FALSIFY-DEMO-004", "cpu"].code_digests is None  # unbound: it ran no code
    assert by["FALSIFY-DEMO-004", "cpu"].executed_code is None
    # the outcome streamed to `pv run` is the same one the record was made from
    streamed = {(e["falsifier"], e["device"]): e for e in events if e.get("event") == "outcome"}
    assert streamed["FALSIFY-DEMO-001", "cpu"]["record_id"] == passed.record_id
    assert streamed["FALSIFY-DEMO-001", "cpu"]["executed_code"] == ran


def test_an_explicit_commit_is_recorded_with_its_source(ws):
    ledger = ws.root / "commit.jsonl"
    proc = ws.pytest("generated_tests", "-k", "demo_002", "--pv-ledger", str(ledger),
                     env=ws.env(PV_FORCE_NO_CUDA="1", PV_GIT_COMMIT="d" * 40, PV_GIT_DIRTY="0"))
    from pv import ledger as ledger_mod

    (record,) = ledger_mod.read(ledger).records
    assert proc.returncode == 1  # FALSIFY-DEMO-002 fails by design
    assert (record.git_commit, record.git_commit_source) == ("d" * 40, "PV_GIT_COMMIT")


def test_under_a_mutant_the_record_is_bound_to_the_mutant_code_too(ws):
    ledger = ws.root / "mutant-binding.jsonl"
    ws.pytest("generated_tests/test_demo.py::test_falsify_demo_001[cpu]", "--pv-ledger", str(ledger),
              "--pv-mutant", "drops_bias")
    from pv import ledger as ledger_mod

    records = ledger_mod.read(ledger).records
    assert [(r.falsifier, r.device) for r in records] == [("FALSIFY-DEMO-001", "cpu")]
    record = records[0]
    assert record.verdict.value == "FAIL" and record.mutant == "drops_bias"
    # the planted bug's own function ran, so the record is bound to it
    assert "drops_bias" in " ".join(record.executed_code.get(f"{ws.package}.mutants", ()))


def test_a_check_past_its_time_limit_is_stopped_and_recorded_as_error(tmp_path):
    hung = make_workspace(tmp_path)
    hung.add_contract("slow", [falsifier("FALSIFY-SLOW-001", prediction="x > 1", check="basic:hang")])
    hung.generate()
    ledger = hung.root / "slow.jsonl"
    proc = hung.pytest("generated_tests", "--pv-ledger", str(ledger),
                       env=hung.env(PV_FORCE_NO_CUDA="1", PV_CHECK_TIMEOUT="1"))
    from pv import ledger as ledger_mod

    (record,) = ledger_mod.read(ledger).records
    assert proc.returncode == 1
    assert record.verdict == "ERROR" and "ran past its 1 s limit" in record.message
    assert record.duration_s < 30  # stopped, not waited out


def test_the_time_limit_is_restored_after_each_test():
    import signal

    from pv.plugin import _time_limit

    before = signal.getsignal(signal.SIGALRM)
    with _time_limit(5, "t"):
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0 and signal.getsignal(signal.SIGALRM) is before
    with _time_limit(0, "t"):  # 0: no limit
        assert signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_an_error_in_a_fixture_is_recorded_on_the_tests_device_and_decides(tmp_path, monkeypatch):
    """A fixture that breaks before the check runs: the ERROR carries the test's real device
    (it was "?", so the earlier PASS kept deciding the cpu cell)."""
    from pv_workspace import cli

    ws = make_workspace(tmp_path, mutants=False)
    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001")])
    ws.generate()
    assert ws.pytest("generated_tests").returncode == 0
    (ws.generated / "conftest.py").write_text(
        "import pytest\n\n\n@pytest.fixture(autouse=True)\ndef broken():\n    raise RuntimeError('fixture broke')\n")
    assert ws.pytest("generated_tests").returncode == 1
    records = ws.records()
    assert [(r.verdict.value, r.device) for r in records] == [("PASS", "cpu"), ("ERROR", "cpu")]
    assert "fixture broke" in records[1].message
    ws.enter(monkeypatch)
    data = json.loads(cli("status")("--format", "json").stdout)
    assert data["contracts"][0]["falsifiers"][0]["state"] == "ERROR"
