"""pv.outcome.Outcome: the one type from the check to the ledger record."""

from __future__ import annotations

import pytest

from pv import harness
from pv.outcome import Outcome


def test_an_outcome_becomes_its_record_in_one_step():
    outcome = Outcome(falsifier="FALSIFY-DEMO-001", device="cpu", prediction="x < 1", verdict="PASS",
                      observations={"x": 0.5, "bad": float("nan")}, margin=0.5, duration_s=0.1234567,
                      code_digests={"checks": "a" * 24})
    outcome.identify({"contract": "demo", "contract_version": "1.0.0", "sha256": "0" * 64, "device": "cpu"},
                     "generated_tests/test_demo.py::test_falsify_demo_001[cpu]")
    record = outcome.to_record(run_id="r", time_utc="2026-11-22T00:00:00Z", git_commit="c" * 40,
                               git_commit_source="git", git_dirty=False)
    assert (record.contract, record.falsifier_sha256, record.verdict.value) == ("demo", "0" * 64, "PASS")
    assert record.code_digests == {"checks": "a" * 24} and record.duration_s == 0.123457
    assert record.observations == {"x": 0.5, "bad": "nan"}  # JSON has no NaN: kept as text
    assert Outcome.from_json({**outcome.to_json(), "event": "outcome"}) == outcome


def test_the_harness_hands_each_outcome_to_the_sink_once_and_keeps_it_otherwise():
    seen = []
    with harness.outcomes_to(seen.append):
        harness.falsify(lambda *, device: {"x": 0.5}, {}, "x < 1", "cpu", falsifier="F")
        with pytest.raises(harness.Falsified):
            harness.falsify(lambda *, device: {"x": 2.0}, {}, "x < 1", "cpu", falsifier="G")
    assert [(o.falsifier, o.verdict) for o in seen] == [("F", "PASS"), ("G", "FAIL")]
    assert harness.take_outcome() is None  # delivered, not also kept
    harness.falsify(lambda *, device: {"x": 0.5}, {}, "x < 1", "cpu", falsifier="H")  # no sink: kept
    assert harness.take_outcome().falsifier == "H"


def test_a_subject_cell_takes_its_own_definition_hash_and_an_adhoc_subject_the_plain_one():
    marker = {"contract": "demo", "contract_version": "1.0.0", "sha256": "plain",
              "subject_sha256": {"small": "of-small"}, "runtime": "pvlab"}
    named = Outcome(falsifier="FALSIFY-DEMO-001", device="cpu", prediction="x < 1", subject="small")
    named.identify(marker, "tests/x.py::t")
    assert named.falsifier_sha256 == "of-small" and named.runtime == "pvlab" and named.contract == "demo"
    adhoc = Outcome(falsifier="FALSIFY-DEMO-001", device="cpu", prediction="x < 1", subject="path:/u/ckpt")
    adhoc.identify({**marker, "runtime": None}, "tests/x.py::t")
    assert adhoc.falsifier_sha256 == "plain"


def test_an_outcome_takes_what_its_marker_says_and_marks_what_nobody_said():
    provenance = dict(run_id="r", time_utc="2026-11-22T00:00:00Z", git_commit="c" * 40, git_commit_source="git",
                      git_dirty=False)
    outcome = Outcome(falsifier="FALSIFY-DEMO-001", device="cpu", prediction="", verdict="PASS",
                      observations={"x": 0.5}, margin=0.5, duration_s=0.1)
    outcome.identify({"contract": "demo", "contract_version": "1.2.0", "sha256": "0" * 64, "prediction": "x < 1"},
                     "generated_tests/test_demo.py::test_falsify_demo_001[cpu]")
    assert outcome.prediction == "x < 1"  # the check did not say: the generated test's marker does
    record = outcome.to_record(**provenance)
    assert (record.contract, record.contract_version, record.prediction) == ("demo", "1.2.0", "x < 1")
    unidentified = Outcome(falsifier="FALSIFY-DEMO-001", device="cpu", prediction="x < 1", verdict="PASS",
                           observations={"x": 0.5}, margin=0.5, duration_s=0.1)  # a bare falsify() call
    record = unidentified.to_record(**provenance)
    assert (record.contract, record.contract_version, record.falsifier_sha256) == ("?", "?", "?")


def test_the_marker_names_the_device_and_the_node_when_it_carries_them():
    outcome = Outcome(falsifier="FALSIFY-DEMO-001", device="cpu", prediction="x < 1")
    outcome.identify({"contract": "demo", "device": "cuda"}, "generated_tests/test_demo.py::test_f[cuda]")
    assert (outcome.device, outcome.nodeid) == ("cuda", "generated_tests/test_demo.py::test_f[cuda]")
    record = outcome.to_record(run_id="r", time_utc="2026-11-22T00:00:00Z", git_commit="c" * 40,
                               git_commit_source="git", git_dirty=False)
    assert record.device == "cuda"
    unmarked = Outcome(falsifier="FALSIFY-DEMO-001", device="cpu", prediction="x < 1")
    unmarked.identify({"contract": "demo"}, "tests/x.py::t")  # a marker without a device: the check's stays
    assert (unmarked.device, unmarked.nodeid) == ("cpu", "tests/x.py::t")


def test_the_check_names_its_falsifier_and_the_marker_fills_it_in_only_when_it_did_not():
    named = Outcome(falsifier="FALSIFY-DEMO-001", device="cpu", prediction="x < 1")
    named.identify({"falsifier": "FALSIFY-OTHER-009"}, "tests/x.py::t")
    assert named.falsifier == "FALSIFY-DEMO-001"
    unnamed = Outcome(falsifier=None, device="cpu", prediction="x < 1")  # a bare falsify() call
    unnamed.identify({"falsifier": "FALSIFY-DEMO-002"}, "tests/x.py::t")
    assert unnamed.falsifier == "FALSIFY-DEMO-002"


def test_the_node_id_travels_with_the_outcome_to_pv_run():
    outcome = Outcome(falsifier="FALSIFY-DEMO-001", device="cpu", prediction="x < 1")
    outcome.identify({"contract": "demo"}, "generated_tests/test_demo.py::test_f[cpu]")
    sent = outcome.to_json()
    assert sent["nodeid"] == "generated_tests/test_demo.py::test_f[cpu]"
    assert Outcome.from_json(sent).nodeid == "generated_tests/test_demo.py::test_f[cpu]"
