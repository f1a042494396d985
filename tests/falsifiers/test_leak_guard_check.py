"""pvlab.falsifiers.leak_guard (FALSIFY-HELDOUT-ISOLATION-002): holds on the runtime, false under
leak_check_compares_text_with_digests, and reports a second defect of the class: a guard that
refuses only a leak of more than one document."""

from __future__ import annotations

import importlib

from falsifier_helpers import assert_holds_and_killed, observe

CONTRACT, FALSIFIER, BUG = "heldout-isolation", "FALSIFY-HELDOUT-ISOLATION-002", "leak_check_compares_text_with_digests"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_it_reports_a_guard_that_lets_one_shared_document_through(monkeypatch):
    data = importlib.import_module("pvlab.runtime.data")
    original = data.verify_disjoint

    def verify_disjoint(train, held_out):
        if len(data.overlapping_documents(train, held_out)) > 1:   # "one duplicate is noise"
            original(train, held_out)

    monkeypatch.setattr(data, "verify_disjoint", verify_disjoint)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    assert observations["missed_leaks"] == 2 and observations["overlap_mismatches"] == 0
