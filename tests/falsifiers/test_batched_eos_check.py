"""pvlab.falsifiers.batched_eos (FALSIFY-BATCHED-EOS-001): holds on the runtime, false under
batch_generation_stops_at_first_eos, and reports another stopping defect (eos ignored in a batch)."""

from __future__ import annotations

import importlib

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers.mutants import registry

CONTRACT, FALSIFIER, BUG = "batched-eos", "FALSIFY-BATCHED-EOS-001", "batch_generation_stops_at_first_eos"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_under_the_planted_bug_the_rows_still_running_are_cut_short():
    observations, _ = observe(CONTRACT, FALSIFIER)
    assert (observations["rows_stopping_early"], observations["rows_running_full"]) == (2, 1)
    assert observations["first_stop"] < observations["last_stop"]
    with registry()[BUG]():
        observations, judgement = observe(CONTRACT, FALSIFIER)
    # the late row and the row that never stops both end where the early row ended
    assert observations["row_mismatches"] == 2 and observations["stop_mismatches"] == 1
    assert not judgement.holds


def test_eos_ignored_in_a_batch_is_reported(monkeypatch):
    generate = importlib.import_module("pvlab.runtime.generate")
    original = generate.generate_batch

    def ignores_eos(model, prompts, **kwargs):
        return original(model, prompts, **{**kwargs, "eos_token_id": None})

    monkeypatch.setattr(generate, "generate_batch", ignores_eos)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    # the two rows that stop alone run on to max_new_tokens in the batch, past their eos
    assert observations["row_mismatches"] == 2 and observations["stop_mismatches"] == 2
    assert observations["shape_errors"] == 2 and not judgement.holds
