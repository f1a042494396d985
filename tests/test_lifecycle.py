"""Lifecycle status computed from evidence (pv.lifecycle): pure, so built from hand-made records."""

from __future__ import annotations

from pathlib import Path

import pytest

from pv.lifecycle import (
    DeviceState,
    FalsifierState,
    MutantState,
    compute,
    contract_status,
)
from pv.declared import declared_status_diagnostics, overclaim
from pv.loader import load_contract
from pv.schema import Contract, LifecycleStatus

from lifecycle_records import FakeTree, bound, checked, contract, falsifier, rec, subject_rec


def test_no_records_is_pending_and_draft():
    c = contract()
    s = contract_status(c, [])
    assert s.evidence is LifecycleStatus.DRAFT
    assert s.falsifiers[0].state is FalsifierState.PENDING
    assert s.falsifiers[0].devices[0].state is DeviceState.PENDING
    assert s.falsifiers[0].mutants[0].state is MutantState.NOT_RUN


def test_discharged_with_killed_mutant_is_active():
    c = contract()
    s = contract_status(c, [rec(c, "PASS"), rec(c, "FAIL", mutant="m_one")])
    assert s.falsifiers[0].state is FalsifierState.DISCHARGED
    assert s.falsifiers[0].mutants[0].state is MutantState.KILLED
    assert s.evidence is LifecycleStatus.ACTIVE_RUNTIME
    assert s.blockers == ()
    assert s.evidence_summary() == "1/1 falsifiers discharged on cpu; 1/1 mutants killed"


def test_stale_after_editing_the_falsifier():
    old = contract()
    records = [rec(old, "PASS"), rec(old, "FAIL", mutant="m_one")]
    assert contract_status(old, records).evidence is LifecycleStatus.ACTIVE_RUNTIME
    edited = contract(falsifiers=[falsifier(prediction="x < 0.9")])
    s = contract_status(edited, records)
    assert s.falsifiers[0].state is FalsifierState.STALE
    assert s.falsifiers[0].devices[0].state is DeviceState.STALE
    assert s.falsifiers[0].mutants[0].state is MutantState.NOT_RUN  # stale mutant runs do not count
    assert s.evidence is LifecycleStatus.DRAFT


def test_skip_never_discharges():
    c = contract(falsifiers=[falsifier(devices=("cpu", "cuda"))])
    s = contract_status(c, [rec(c, "PASS", "cpu"), rec(c, "SKIP", "cuda"), rec(c, "FAIL", "cuda", mutant="m_one")])
    f = s.falsifiers[0]
    assert f.device("cuda").state is DeviceState.SKIP
    assert f.state is FalsifierState.PARTIAL
    assert s.evidence is LifecycleStatus.DRAFT_PARTIAL_DISCHARGE
    # SKIP everywhere: no discharge, and no evidence at all
    only_skips = contract_status(c, [rec(c, "SKIP", "cpu"), rec(c, "SKIP", "cuda")])
    assert only_skips.falsifiers[0].state is FalsifierState.PENDING
    assert only_skips.evidence is LifecycleStatus.DRAFT


def test_skip_after_pass_hides_the_pass():
    c = contract()
    s = contract_status(c, [rec(c, "PASS"), rec(c, "SKIP")])
    assert s.falsifiers[0].devices[0].state is DeviceState.SKIP
    assert s.falsifiers[0].state is not FalsifierState.DISCHARGED


@pytest.mark.parametrize("red", ["FAIL", "ERROR"])
def test_attack_a_skip_appended_after_a_failure_never_hides_it(red):
    """Attack: a falsifier FAILs on cuda (a GPU machine's honest record); then `pv run --device
    cuda` on a laptop appends an honest SKIP (no GPU). "Latest wins" made the cuda cell SKIP, the
    falsifier merely PARTIAL and the contract DRAFT_PARTIAL_DISCHARGE, so a declared
    DRAFT_PARTIAL_DISCHARGE passed PV501: the failure vanished without anything running. A SKIP
    proves nothing: the failure it follows keeps deciding."""
    c = contract(status="DRAFT_PARTIAL_DISCHARGE", falsifiers=[falsifier(devices=("cpu", "cuda"))])
    records = [rec(c, "PASS", "cpu"), rec(c, red, "cuda"), rec(c, "SKIP", "cuda"), rec(c, "FAIL", "cuda", mutant="m_one")]
    s = contract_status(c, records)
    f = s.falsifiers[0]
    assert f.device("cuda").state is DeviceState(red)
    assert f.device("cuda").record is records[1]
    assert f.state in (FalsifierState.FALSIFIED, FalsifierState.ERROR)
    assert s.evidence is LifecycleStatus.DRAFT_RED
    assert overclaim(s) is not None


def test_a_skip_after_a_failure_that_a_pass_cleared_is_still_a_skip():
    c = contract(falsifiers=[falsifier(devices=("cpu", "cuda"))])
    s = contract_status(c, [rec(c, "FAIL", "cuda"), rec(c, "PASS", "cuda"), rec(c, "SKIP", "cuda")])
    assert s.falsifiers[0].device("cuda").state is DeviceState.SKIP


def test_a_skip_after_a_failure_on_code_changed_since_is_stale():
    """The failure is no longer the tree's (a re-run is owed); the SKIP cannot say whether the new
    code still fails: the cell is STALE (last FAIL), not a SKIP that reads as "nothing to see"."""
    c = contract(falsifiers=[checked()])
    records = [bound(rec(c, "FAIL"), checks="old"), bound(rec(c, "SKIP"), checks="new")]
    d = contract_status(c, records, FakeTree(checks="new")).falsifiers[0].devices[0]
    assert d.state is DeviceState.STALE and d.record is records[0] and d.stale_because == ("checks",)


def test_error_counts_as_red():
    c = contract()
    s = contract_status(c, [rec(c, "ERROR"), rec(c, "FAIL", mutant="m_one")])
    assert s.falsifiers[0].state is FalsifierState.ERROR
    assert s.evidence is LifecycleStatus.DRAFT_RED


def test_latest_wins_fail_after_pass_is_falsified():
    c = contract()
    s = contract_status(c, [rec(c, "PASS", time="2026-01-01T00:00:00Z"), rec(c, "FAIL", time="2026-01-02T00:00:00Z")])
    assert s.falsifiers[0].state is FalsifierState.FALSIFIED
    assert s.evidence is LifecycleStatus.DRAFT_RED
    # ... and a PASS appended after it clears it
    s = contract_status(c, [rec(c, "FAIL", time="2026-01-02T00:00:00Z"), rec(c, "PASS", time="2026-01-03T00:00:00Z")])
    assert s.falsifiers[0].state is FalsifierState.DISCHARGED


def test_the_ledger_order_decides_not_the_typed_time():
    # The attack: a PASS dated 2099 sits before a real FAIL; by time it would mask the FAIL.
    c = contract()
    s = contract_status(c, [rec(c, "PASS", time="2099-01-01T00:00:00Z"), rec(c, "FAIL", time="2026-01-02T00:00:00Z")])
    assert s.falsifiers[0].state is FalsifierState.FALSIFIED
    assert s.falsifiers[0].devices[0].record.time_utc == "2026-01-02T00:00:00Z"


def test_equal_times_tie_break_on_ledger_order():
    c = contract()
    t = "2026-01-01T00:00:00Z"
    assert contract_status(c, [rec(c, "PASS", time=t), rec(c, "FAIL", time=t)]).falsifiers[0].state is FalsifierState.FALSIFIED
    assert contract_status(c, [rec(c, "FAIL", time=t), rec(c, "PASS", time=t)]).falsifiers[0].state is FalsifierState.DISCHARGED


def test_fail_on_one_device_falsifies_despite_pass_elsewhere():
    c = contract(falsifiers=[falsifier(devices=("cpu", "cuda"))])
    s = contract_status(c, [rec(c, "PASS", "cpu"), rec(c, "FAIL", "cuda")])
    assert s.falsifiers[0].state is FalsifierState.FALSIFIED
    assert "FAIL on cuda" in s.falsifiers[0].explain()


def test_mutant_records_are_not_runtime_evidence():
    c = contract()
    s = contract_status(c, [rec(c, "FAIL", mutant="m_one")])
    assert s.falsifiers[0].state is FalsifierState.PENDING
    assert s.evidence is LifecycleStatus.DRAFT


def test_records_for_unrequired_devices_and_other_contracts_are_ignored():
    c = contract()
    s = contract_status(c, [rec(c, "FAIL", "cuda"), rec(c, "FAIL", cid="other")])
    assert s.falsifiers[0].state is FalsifierState.PENDING


def test_survived_mutant_blocks_active():
    c = contract()
    s = contract_status(c, [rec(c, "PASS"), rec(c, "PASS", mutant="m_one")])
    assert s.falsifiers[0].mutants[0].state is MutantState.SURVIVED
    assert s.evidence is LifecycleStatus.DRAFT_PARTIAL_DISCHARGE
    assert any("m_one SURVIVED" in b for b in s.blockers)


def test_mutant_latest_and_killed_on_its_device():
    c = contract(falsifiers=[falsifier(devices=("cpu", "cuda"), mutants=("cuda_bug", "m_err"))])
    s = contract_status(c, [
        rec(c, "PASS", "cpu"), rec(c, "PASS", "cuda"),
        rec(c, "PASS", "cpu", mutant="cuda_bug"),  # the mutant does not touch the cpu path
        rec(c, "FAIL", "cuda", mutant="cuda_bug"),
        rec(c, "FAIL", "cpu", mutant="m_err"), rec(c, "ERROR", "cpu", mutant="m_err"),  # latest wins
    ])
    states = {m.mutant: m.state for m in s.falsifiers[0].mutants}
    assert states == {"cuda_bug": MutantState.KILLED, "m_err": MutantState.ERROR}
    assert s.evidence is LifecycleStatus.DRAFT_PARTIAL_DISCHARGE


def test_unproven_falsifier_blocks_active():
    c = contract(falsifiers=[falsifier(mutants=())])
    s = contract_status(c, [rec(c, "PASS")])
    assert s.falsifiers[0].unproven and s.falsifiers[0].strength == "UNPROVEN"
    assert s.falsifiers[0].state is FalsifierState.DISCHARGED
    assert s.evidence is LifecycleStatus.DRAFT_PARTIAL_DISCHARGE
    assert any("UNPROVEN" in b for b in s.blockers)


def test_hand_set_statuses_are_kept():
    c = contract(status="RETIRED")
    s = contract_status(c, [rec(c, "FAIL")])
    assert s.evidence is LifecycleStatus.DRAFT_RED
    assert s.computed is LifecycleStatus.RETIRED
    assert overclaim(s) is None


def test_contract_version_plays_no_part_in_freshness():
    c = contract()
    records = [rec(c, "PASS"), rec(c, "FAIL", mutant="m_one")]
    bumped = Contract.model_validate({**c.model_dump(mode="json"),
                                      "metadata": {**c.metadata.model_dump(mode="json"), "version": "1.1.0"}})
    assert contract_status(bumped, records).evidence is LifecycleStatus.ACTIVE_RUNTIME


def test_compute_sorts_by_id():
    a, b = contract(cid="zeta"), contract(cid="alpha")
    assert [s.id for s in compute([a, b], [])] == ["alpha", "zeta"]


@pytest.mark.parametrize(
    ("declared", "verdicts", "flagged"),
    [
        ("DRAFT", [], False),
        ("ACTIVE_RUNTIME", [], True),  # no evidence at all
        ("DRAFT_PARTIAL_DISCHARGE", [], True),
        ("DRAFT_RED", [], False),  # claims less than nothing? it claims failure: not more
        ("DRAFT", ["FAIL"], True),  # red evidence must be declared red
        ("DRAFT_PARTIAL_DISCHARGE", ["ERROR"], True),
        ("DRAFT_RED", ["FAIL"], False),
        ("DRAFT", ["PASS"], False),  # lagging is allowed
        ("DRAFT_PARTIAL_DISCHARGE", ["PASS"], False),
        ("ACTIVE_RUNTIME", ["PASS"], True),  # mutant not run
        ("ACTIVE_RUNTIME", ["PASS", "KILL"], False),
        ("SUPERSEDED", ["FAIL"], False),
    ],
)
def test_overclaim(declared, verdicts, flagged):
    c = contract(status=declared)
    records = [rec(c, "FAIL", mutant="m_one") if v == "KILL" else rec(c, v) for v in verdicts]
    assert (overclaim(contract_status(c, records)) is not None) is flagged


CONTRACT_YAML = """\
# a comment
metadata:
  id: demo
  version: 1.0.0
  kind: pattern
  status: ACTIVE_RUNTIME   # claims too much
  description: demo
falsification_tests:
  - id: FALSIFY-DEMO-001
    rule: r
    prediction: x < 1
    devices: [cpu]
    if_fails: look
    mutants: [m_one]
"""


def test_declared_status_diagnostics_points_at_metadata_status(tmp_path: Path):
    path = tmp_path / "demo-v1.yaml"
    path.write_text(CONTRACT_YAML)
    loaded, problems = load_contract(path, "contracts/demo-v1.yaml")
    assert not problems
    c = loaded.contract
    diags = declared_status_diagnostics([loaded], [rec(c, "PASS")])
    assert len(diags) == 1
    d = diags[0]
    assert (d.code, d.path, d.line, d.col) == ("PV501", "contracts/demo-v1.yaml", 6, 11)
    assert "ACTIVE_RUNTIME" in d.message and "DRAFT_PARTIAL_DISCHARGE" in d.message
    assert "m_one NOT_RUN" in d.message
    assert "pv status --promote --allow-demote demo" in d.hint
    # with the mutant killed the claim is supported
    assert declared_status_diagnostics([loaded], [rec(c, "PASS"), rec(c, "FAIL", mutant="m_one")]) == []


# --- code binding: a record's code must be the tree's ------------------------------------------------


def test_a_pass_on_changed_code_is_stale_never_discharged():
    c = contract(falsifiers=[checked(devices=("cpu", "cuda"))])
    records = [bound(rec(c, "PASS"), checks="a1", kernels="k1"), bound(rec(c, "PASS", "cuda"), checks="a1", kernels="k1")]
    assert contract_status(c, records, FakeTree(checks="a1", kernels="k1")).falsifiers[0].state is FalsifierState.DISCHARGED
    s = contract_status(c, records, FakeTree(checks="a1", kernels="k2"))
    f = s.falsifiers[0]
    assert f.state is FalsifierState.STALE and s.evidence is LifecycleStatus.DRAFT
    assert [(d.device, d.state, d.stale_because) for d in f.devices] == [
        ("cpu", DeviceState.STALE, ("kernels",)), ("cuda", DeviceState.STALE, ("kernels",))]
    assert f.explain() == "stale on cpu (code changed since: kernels), cuda (code changed since: kernels): run it again"


def test_stale_on_one_device_is_not_partial():
    c = contract(falsifiers=[checked(devices=("cpu", "cuda"))])
    records = [bound(rec(c, "PASS"), checks="a1"), bound(rec(c, "PASS", "cuda"), checks="old")]
    f = contract_status(c, records, FakeTree(checks="a1")).falsifiers[0]
    assert f.state is FalsifierState.STALE and f.devices_in(DeviceState.PASS) == ["cpu"]


def test_a_fail_on_changed_code_is_stale_not_falsified():
    c = contract(falsifiers=[checked()])
    s = contract_status(c, [bound(rec(c, "FAIL"), checks="old")], FakeTree(checks="new"))
    assert s.falsifiers[0].state is FalsifierState.STALE
    assert s.falsifiers[0].devices[0].record.verdict.value == "FAIL"  # still shown as the last verdict


def test_records_before_code_binding_are_stale_with_that_reason():
    c = contract(falsifiers=[checked()])
    d = contract_status(c, [rec(c, "PASS")], FakeTree()).falsifiers[0].devices[0]
    assert d.state is DeviceState.STALE and d.stale_reason() == "recorded before code binding (no digest of the code it ran)"


def test_a_kill_on_changed_code_is_stale_not_killed():
    c = contract(falsifiers=[checked()])
    records = [bound(rec(c, "PASS"), checks="a1"), bound(rec(c, "FAIL", mutant="m_one"), checks="a1", mutants="m0")]
    assert contract_status(c, records, FakeTree(checks="a1", mutants="m0")).falsifiers[0].mutants[0].state is MutantState.KILLED
    assert contract_status(c, records, FakeTree(checks="a1", mutants="m1")).falsifiers[0].mutants[0].state is MutantState.STALE


def test_an_unbound_falsifier_stays_red_it_ran_no_code_to_go_stale():
    c = contract(falsifiers=[falsifier()])  # no check: the generated test always ERRORs
    s = contract_status(c, [rec(c, "ERROR")], FakeTree(anything="x"))
    assert s.falsifiers[0].state is FalsifierState.ERROR and s.evidence is LifecycleStatus.DRAFT_RED
    bound_c = contract(falsifiers=[checked()])
    assert contract_status(bound_c, [rec(bound_c, "ERROR")], FakeTree()).falsifiers[0].state is FalsifierState.STALE


# --- subjects: cells are subject x device ------------------------------------------------------


def test_a_record_for_an_unknown_contract_is_an_orphan_unless_some_contracts_did_not_load():
    from pv.lifecycle import orphans

    known = contract()
    stray = rec(known, "FAIL", cid="gone")
    [(index, record, why)] = orphans([known], [rec(known, "PASS"), stray])
    assert (index, record, why) == (1, stray, "no contract gone (FALSIFY-DEMO-001 belongs to demo)")
    assert orphans([known], [stray], incomplete=True) == []  # it may belong to a file that failed to load


def test_each_falsifier_state_is_explained_in_one_line():
    c = contract(falsifiers=[falsifier(devices=("cpu", "cuda"))])
    explain = lambda *records: contract_status(c, list(records)).falsifiers[0].explain()  # noqa: E731
    assert explain() == "no evidence yet"
    assert explain(rec(c, "PASS"), rec(c, "PASS", device="cuda")) == "passed on cpu, cuda"
    assert explain(rec(c, "PASS")) == "passed on cpu; not on cuda (PENDING)"
    assert explain(rec(c, "PASS"), rec(c, "FAIL", device="cuda")) == "FAIL on cuda"


def test_an_overclaim_over_red_evidence_names_each_red_falsifier_and_why():
    c = contract(status="ACTIVE_RUNTIME", falsifiers=[falsifier(), falsifier("FALSIFY-DEMO-002")])
    s = contract_status(c, [rec(c, "FAIL"), rec(c, "PASS", fid="FALSIFY-DEMO-002")])
    assert overclaim(s) == "the evidence is red (FALSIFY-DEMO-001 FAIL on cpu)"


def test_a_mutants_state_names_the_record_that_decided_it():
    c = contract()
    kill = rec(c, "FAIL", mutant="m_one")
    s = contract_status(c, [rec(c, "PASS"), kill])
    assert s.falsifiers[0].mutants[0].record == kill


def test_adhoc_cells_of_one_path_sort_by_falsifier_not_by_ledger_order():
    from pv.lifecycle import adhoc_cells

    c = contract(falsifiers=[dict(falsifier(), subjects=["small"]), dict(falsifier("FALSIFY-DEMO-002"), subjects=["s"])])
    second = rec(c, "PASS", fid="FALSIFY-DEMO-002").model_copy(update={"subject": "path:/u/ckpt", "subject_digest": "a"})
    first = rec(c, "PASS").model_copy(update={"subject": "path:/u/ckpt", "subject_digest": "a"})
    assert [r.falsifier.id for r in adhoc_cells([c], [second, first])] == ["FALSIFY-DEMO-001", "FALSIFY-DEMO-002"]


def test_the_summary_names_the_falsifiers_no_mutant_proves():
    c = contract(falsifiers=[falsifier(), falsifier("FALSIFY-DEMO-002", mutants=())])
    summary = contract_status(c, [rec(c, "PASS"), rec(c, "PASS", fid="FALSIFY-DEMO-002")]).evidence_summary()
    assert summary.endswith("; UNPROVEN (no mutant declared): FALSIFY-DEMO-002")
    assert "UNPROVEN" not in contract_status(contract(), []).evidence_summary()


def test_a_refused_record_is_stale_for_the_reason_it_was_refused():
    from pv.lifecycle import NOT_COUNTED, DeviceEvidence

    refused = DeviceEvidence("cpu", DeviceState.STALE, stale_because=(NOT_COUNTED + "its test is not the generated one",))
    assert refused.stale_reason() == "its test is not the generated one"
    both = DeviceEvidence("cpu", DeviceState.STALE, stale_because=(NOT_COUNTED + "a", "checks.m"))
    assert both.stale_reason() == "code changed since: " + NOT_COUNTED + "a, checks.m"


def test_an_adhoc_cell_is_on_its_records_device_for_its_path_subject():
    from pv.lifecycle import adhoc_cells

    c = contract(falsifiers=[dict(falsifier(devices=("cpu", "cuda")), subjects=["small"])])
    [row] = adhoc_cells([c], [subject_rec(c, "PASS", "path:/u/ckpt", device="cuda", digest="a" * 64)])
    assert (row.evidence.device, row.evidence.subject, row.evidence.state) == ("cuda", "path:/u/ckpt", DeviceState.PASS)


def test_a_contract_that_did_not_load_gets_no_status_diagnostic(tmp_path: Path):
    path = tmp_path / "broken-v1.yaml"
    path.write_text(CONTRACT_YAML.replace("kind: pattern", "kind: [not, a, kind]"))
    loaded, problems = load_contract(path, "contracts/broken-v1.yaml")
    assert problems and loaded is not None and loaded.contract is None  # the schema refused it
    assert declared_status_diagnostics([loaded, None], []) == []


class _Refusing:
    """The `code` pv.lifecycle is given, refusing the records it is told to (as pv.identity's
    EvidenceCheck refuses a record whose sibling test is no longer rendered); code always the tree's."""

    def __init__(self, *refused):
        self.refused = {r.record_id for r in refused}

    def refuses(self, record, falsifier) -> str | None:
        return "a sibling test that ran is not rendered from the current contract" if record.record_id in self.refused else None

    def record_changes(self, record) -> tuple[str, ...]:
        return ()


@pytest.mark.parametrize("later", ["FAIL", "ERROR"])
def test_attack_a_later_failure_that_no_longer_counts_never_revives_the_pass_before_it(later):
    """Attack: a PASS, then an honest FAIL of the same definition on the same code (another
    machine); then a contract edit that refuses the FAIL but not the PASS (a sibling falsifier
    that ran beside the FAIL removed). "The latest record that counts decides" brought the older
    PASS back: DISCHARGED, though the latest run failed. The cell is STALE (a re-run is owed)."""
    c = contract(status="ACTIVE_RUNTIME")
    records = [rec(c, "PASS"), rec(c, later), rec(c, "FAIL", mutant="m_one")]
    s = contract_status(c, records, _Refusing(records[1]))
    d = s.falsifiers[0].devices[0]
    assert d.state is DeviceState.STALE and d.record is records[1]
    assert "does not count" in d.stale_reason() and later in d.stale_reason() and "sibling" in d.stale_reason()
    assert s.evidence is not LifecycleStatus.ACTIVE_RUNTIME and overclaim(s) is not None
    # re-run, it counts again; a PASS appended that does not count keeps an honest FAIL deciding
    assert contract_status(c, [*records, rec(c, "PASS")], _Refusing(records[1])).falsifiers[0].state is FalsifierState.DISCHARGED
    fail_then_refused_pass = [rec(c, "FAIL"), rec(c, "PASS")]
    assert contract_status(c, fail_then_refused_pass, _Refusing(fail_then_refused_pass[1])).falsifiers[0].state is \
        FalsifierState.FALSIFIED


def test_attack_a_later_survival_that_no_longer_counts_never_revives_the_kill_before_it():
    """The same under a planted bug: a kill, then an honest survival (the bug not caught) that a
    contract edit made not count: the bug is not KILLED on the strength of the older run."""
    c = contract()
    records = [rec(c, "PASS"), rec(c, "FAIL", mutant="m_one"), rec(c, "PASS", mutant="m_one")]
    m = contract_status(c, records, _Refusing(records[2])).falsifiers[0].mutants[0]
    assert m.state is MutantState.STALE and m.devices[0].record is records[2]
    assert "does not count" in m.devices[0].stale_reason()


def test_attack_a_kill_of_a_bug_planted_in_check_code_shows_why_it_does_not_count():
    """Red team 2026-12-03: a FAIL under a bug planted only in the adapter (pv.identity refuses
    it) left the bug NOT_RUN, as if `pv strength` had never run it; it is STALE with the reason.
    Other refusals of the only record under a bug keep NOT_RUN, as before."""
    from pv.identity import PLANTED_IN_CHECKS

    class _PlantedInChecks(_Refusing):
        def refuses(self, record, falsifier):
            return (f"{PLANTED_IN_CHECKS} (mylib_checks.adapter:M.learning_rate: check_packages)"
                    if record.record_id in self.refused else None)

    c = contract()
    records = [rec(c, "PASS"), rec(c, "FAIL", mutant="m_one")]
    s = contract_status(c, records, _PlantedInChecks(records[1]))
    m = s.falsifiers[0].mutants[0]
    assert m.state is MutantState.STALE and m.devices[0].record is records[1]
    assert PLANTED_IN_CHECKS in m.devices[0].stale_reason()
    # the contract's blocker line says why the bug's kill does not count, not only "STALE"
    assert m.stale_reasons() == {"cpu": m.devices[0].stale_reason()}
    assert s.blockers == (f"FALSIFY-DEMO-001: mutants not killed: m_one STALE (cpu: {m.devices[0].stale_reason()})",)
    assert contract_status(c, records, _Refusing(records[1])).falsifiers[0].mutants[0].state is MutantState.NOT_RUN


def test_a_stale_bugs_blocker_line_names_at_most_three_changed_modules():
    """A timing record binds every module it can run: its stale reason would name dozens."""
    c = contract(falsifiers=[checked()])
    old = {f"m{i}": "old" for i in range(5)}
    records = [bound(rec(c, "PASS"), **{k: "new" for k in old}), bound(rec(c, "FAIL", mutant="m_one"), **old)]
    s = contract_status(c, records, FakeTree(**{k: "new" for k in old}))
    m = s.falsifiers[0].mutants[0]
    assert m.state is MutantState.STALE
    assert m.stale_reasons() == {"cpu": "code changed since: m0, m1, m2, m3, m4"}
    assert m.stale_reasons(most=3) == {"cpu": "code changed since: m0, m1, m2 and 2 more"}
    assert s.blockers == ("FALSIFY-DEMO-001: mutants not killed: m_one STALE (cpu: code changed since: m0, m1, m2 "
                          "and 2 more)",)
