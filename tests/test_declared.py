"""Declared vs computed (pv.declared): PV501's shortcut must never clear what the whole status flags.

`cannot_overclaim` decides from as few judged records as it can; these tests hold it to the whole
computation (`overclaim(contract_status(...))`) on random ledgers, and check that it really
judges fewer records (else it would be a shortcut in name only).
"""

from __future__ import annotations

import itertools
import random

import pytest

from pv.declared import cannot_overclaim, declared_status_diagnostics, overclaim
from pv.ledger import make_record
from pv.lifecycle import contract_status, group_records
from pv.schema import Contract

_clock = itertools.count(1)
STATUSES = ("DRAFT", "DRAFT_RED", "DRAFT_PARTIAL_DISCHARGE", "ACTIVE_RUNTIME", "RETIRED", "SUPERSEDED")


def contract(status: str, *, subjects: bool = False) -> Contract:
    def falsifier(n: int) -> dict:
        out = {"id": f"FALSIFY-DEMO-00{n}", "rule": "r", "prediction": "x < 1", "devices": ["cpu", "cuda"],
               "if_fails": "look", "mutants": ["m_one"], "check": "checks.m:f"}
        if subjects and n == 1:
            out["subjects"] = ["tiny", "big"]
        return out

    return Contract.model_validate({
        "metadata": {"id": "demo", "version": "1.0.0", "kind": "pattern", "status": status, "description": "demo"},
        "falsification_tests": [falsifier(1), falsifier(2)],
    })


def record(c: Contract, rng: random.Random, subject_param: str = "subject"):
    f = rng.choice(c.falsification_tests)
    subject = rng.choice(f.subjects) if f.subjects else None
    sha = f.definition_sha256() if subject is None else f.definition_sha256(subject, subject_param)
    n = next(_clock)
    return make_record(
        contract=c.metadata.id, contract_version="1.0.0", falsifier=f.id,
        falsifier_sha256=sha if rng.random() < 0.85 else "0" * 64,  # now and then an older definition
        device=rng.choice(("cpu", "cuda")), subject=subject,
        mutant="m_one" if rng.random() < 0.3 else None,
        verdict=rng.choice(("PASS", "PASS", "PASS", "FAIL", "ERROR", "SKIP")),
        observations={"x": 0.5}, prediction=f.prediction, margin=0.5, duration_s=0.1,
        time_utc=f"2026-01-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z",
    )


class Judge:
    """Stands in for pv.identity.EvidenceCheck: a fixed set of records ran other code, another
    is refused; counts what it is asked."""

    def __init__(self, changed: set[str], refused: set[str]):
        self.changed, self.refused_ids = changed, refused
        self.asked_changes: list[str] = []

    def record_changes(self, r):
        self.asked_changes.append(r.record_id)
        return ("checks.m",) if r.record_id in self.changed else ()

    def refuses(self, r, falsifier):
        return "not the generated test" if r.record_id in self.refused_ids else None


@pytest.mark.parametrize("seed", range(300))
def test_the_shortcut_never_clears_an_overclaim(seed: int):
    rng = random.Random(seed)
    c = contract(rng.choice(STATUSES), subjects=rng.random() < 0.3)
    records = [record(c, rng) for _ in range(rng.randrange(0, 14))]
    judge = Judge({r.record_id for r in records if rng.random() < 0.3},
                  {r.record_id for r in records if rng.random() < 0.15})
    groups = group_records(records)
    whole = overclaim(contract_status(c, groups, judge))
    if cannot_overclaim(c, groups, judge):
        assert whole is None, (c.metadata.status, whole)
    # and PV501 says what the whole status says, shortcut or not
    flagged = bool(declared_status_diagnostics([_Loaded(c)], groups, judge))
    assert flagged is (whole is not None)


class _Loaded:
    """The little of pv.loader.LoadedContract that PV501 reads."""

    display_path = "contracts/demo-v1.yaml"

    def __init__(self, c: Contract):
        self.contract = c

    def position(self, _key):
        return 5, 11


@pytest.mark.parametrize("declared", ["DRAFT", "DRAFT_PARTIAL_DISCHARGE", "DRAFT_RED"])
def test_the_shortcut_clears_honest_claims_and_judges_less(declared: str):
    """Many fresh PASSes and kills: the whole status judges every deciding record's code; the
    shortcut judges none (DRAFT, DRAFT_RED) or one (DRAFT_PARTIAL_DISCHARGE)."""
    c = contract(declared)
    records = [make_record(contract="demo", contract_version="1.0.0", falsifier=f.id,
                           falsifier_sha256=f.definition_sha256(), device=device, mutant=mutant,
                           verdict="FAIL" if mutant else "PASS", observations={"x": 0.5}, prediction="x < 1",
                           margin=0.5, duration_s=0.1, time_utc="2026-01-01T00:00:00Z")
               for f in c.falsification_tests for device in ("cpu", "cuda") for mutant in (None, "m_one")]
    groups = group_records(records)
    whole, short = Judge(set(), set()), Judge(set(), set())
    assert overclaim(contract_status(c, groups, whole)) is None
    assert cannot_overclaim(c, groups, short)
    assert len(whole.asked_changes) == 8  # four cells and four kills
    assert len(short.asked_changes) == (1 if declared == "DRAFT_PARTIAL_DISCHARGE" else 0)


def test_a_fresh_fail_is_never_cleared_and_a_stale_one_is():
    c = contract("DRAFT_PARTIAL_DISCHARGE")
    f = c.falsification_tests[0]
    common = dict(contract="demo", contract_version="1.0.0", falsifier=f.id, falsifier_sha256=f.definition_sha256(),
                  observations={"x": 0.5}, prediction="x < 1", margin=0.5, duration_s=0.1,
                  time_utc="2026-01-01T00:00:00Z")
    passed = make_record(device="cpu", verdict="PASS", **common)
    failed = make_record(device="cuda", verdict="FAIL", **common)
    groups = group_records([passed, failed])
    assert not cannot_overclaim(c, groups, Judge(set(), set()))
    assert "the evidence is red" in declared_status_diagnostics([_Loaded(c)], groups, Judge(set(), set()))[0].message
    # the FAIL ran code that has changed since: stale, not red; the PASS is fresh
    assert cannot_overclaim(c, groups, Judge({failed.record_id}, set()))
    # a refused PASS decides nothing: the FAIL before it is not hidden by it
    later = make_record(device="cuda", verdict="PASS", **common)
    groups = group_records([passed, failed, later])
    assert cannot_overclaim(c, groups, Judge(set(), set()))
    assert not cannot_overclaim(c, groups, Judge(set(), {later.record_id}))


def test_active_runtime_is_always_judged_whole():
    c = contract("ACTIVE_RUNTIME")
    assert not cannot_overclaim(c, {}, Judge(set(), set()))


def test_a_pass_overruled_by_a_later_failure_that_does_not_count_is_no_fresh_evidence():
    """PASS, then a FAIL refused (e.g. its sibling falsifier since removed) on the same code: the
    cell is STALE, so a DRAFT_PARTIAL_DISCHARGE resting on that PASS alone overclaims."""
    c = contract("DRAFT_PARTIAL_DISCHARGE")
    f = c.falsification_tests[0]
    common = dict(contract="demo", contract_version="1.0.0", falsifier=f.id, falsifier_sha256=f.definition_sha256(),
                  device="cpu", observations={"x": 0.5}, prediction="x < 1", margin=0.5, duration_s=0.1,
                  time_utc="2026-01-01T00:00:00Z")
    passed, failed = make_record(verdict="PASS", **common), make_record(verdict="FAIL", **common)
    groups = group_records([passed, failed])
    judge = Judge(set(), {failed.record_id})
    assert overclaim(contract_status(c, groups, judge)) is not None
    assert not cannot_overclaim(c, groups, judge)
    assert declared_status_diagnostics([_Loaded(c)], groups, judge)
