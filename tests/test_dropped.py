"""pv.dropped: a FAIL or ERROR on a cell a falsifier no longer requires is listed, never hidden by
narrowing the claim; judged as a required cell is (refused, stale and SKIP records as there)."""

from __future__ import annotations

from pv.statusmarkdown import render_markdown
from pv.statusreport import build_report, summary
from pv.dropped import failures_outside_cells
from lifecycle_records import FakeTree, bound, checked, contract, falsifier, rec


def _narrowed(c, **kw):
    return contract(status=c.metadata.status.value, falsifiers=[falsifier(**kw)])


def test_attack_dropping_the_failing_device_lists_its_failure():
    wide = contract(falsifiers=[falsifier(devices=("cpu", "cuda"))])
    records = [rec(wide, "PASS", "cpu"), rec(wide, "FAIL", "cuda"), rec(wide, "FAIL", "cpu", mutant="m_one")]
    assert failures_outside_cells([wide], records) == []          # required: the status shows it
    narrow = _narrowed(wide, devices=("cpu",))
    found = failures_outside_cells([narrow], records)
    assert [(d.falsifier, d.device, d.record.verdict.value) for d in found] == [("FALSIFY-DEMO-001", "cuda", "FAIL")]
    assert found[0].where() == "cuda"
    errored = [rec(wide, "PASS", "cpu"), rec(wide, "ERROR", "cuda")]   # an ERROR is a failure too
    assert [d.record.verdict.value for d in failures_outside_cells([narrow], errored)] == ["ERROR"]


def test_a_failure_fixed_since_or_of_another_definition_is_not_listed():
    wide = contract(falsifiers=[falsifier(devices=("cpu", "cuda"))])
    narrow = _narrowed(wide, devices=("cpu",))
    fixed = [rec(wide, "PASS", "cpu"), rec(wide, "FAIL", "cuda"), rec(wide, "PASS", "cuda")]
    assert failures_outside_cells([narrow], fixed) == []
    other_definition = [rec(wide, "ERROR", "cuda", sha="0" * 64)]
    assert failures_outside_cells([narrow], other_definition) == []


def test_a_skip_after_the_failure_does_not_hide_it_and_changed_code_stales_it():
    wide = contract(falsifiers=[checked(devices=("cpu", "cuda"))])
    narrow = contract(falsifiers=[checked(devices=("cpu",))])
    records = [bound(rec(wide, "FAIL", "cuda"), checks="a1"), bound(rec(wide, "SKIP", "cuda"), checks="a1")]
    assert len(failures_outside_cells([narrow], records, FakeTree(checks="a1"))) == 1
    assert failures_outside_cells([narrow], records, FakeTree(checks="a2")) == []


def test_a_dropped_subject_is_listed_by_its_own_definition():
    wide = contract(falsifiers=[{**falsifier(), "subjects": ["tiny", "big"]}])
    f = wide.falsification_tests[0]
    failing = rec(wide, "FAIL", "cpu", sha=f.definition_sha256("big")).model_copy(update={"subject": "big"})
    passing = rec(wide, "PASS", "cpu", sha=f.definition_sha256("tiny")).model_copy(update={"subject": "tiny"})
    narrow = contract(falsifiers=[{**falsifier(), "subjects": ["tiny"]}])
    found = failures_outside_cells([narrow], [passing, failing])
    assert [(d.subject, d.where()) for d in found] == [("big", "cpu[big]")]


def test_the_dashboard_warns_and_counts_them():
    wide = contract(falsifiers=[falsifier(devices=("cpu", "cuda"))])
    narrow = _narrowed(wide, devices=("cpu",))
    records = [rec(wide, "PASS", "cpu"), rec(wide, "FAIL", "cuda")]

    class Loaded:
        contract = narrow
        display_path = "contracts/demo-v1.yaml"

    report = build_report([Loaded()], [], records, "evidence/ledger.jsonl", [])
    assert summary(report)["failures_outside_required_cells"] == 1
    text = render_markdown(report)
    assert "no falsifier requires any more hold a FAIL or ERROR" in text and "`FALSIFY-DEMO-001`" in text
