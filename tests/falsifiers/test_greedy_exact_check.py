"""pvlab.falsifiers.greedy_exact (FALSIFY-SAMPLING-LAW-004): holds on the runtime, false under
greedy_pick_in_bfloat16, and reports a second defect of the class: generate picking the argmax of
the previous step's logits."""

from __future__ import annotations

import importlib

import torch

from falsifier_helpers import assert_holds_and_killed, observe

CONTRACT, FALSIFIER, BUG = "sampling-law", "FALSIFY-SAMPLING-LAW-004", "greedy_pick_in_bfloat16"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_it_reports_a_pick_that_breaks_ties_to_the_last_index(monkeypatch):
    """Another defect: the last maximum instead of the first (argmax of the flipped row)."""
    kernels = importlib.import_module("pvlab.runtime.kernels")

    def last_maximum(logits):
        flipped = torch.flip(logits, dims=[-1])
        return logits.shape[-1] - 1 - torch.argmax(flipped, dim=-1)

    monkeypatch.setattr(kernels, "greedy_pick", last_maximum)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    # near-ties are not ties: only a decode step with an exact tie could tell; the check must
    # still hold here (no false FAIL from a tie rule the rows never exercise) ...
    assert judgement.holds, observations
    # ... and a pick from rounded logits is caught on the rows alone
    monkeypatch.setattr(kernels, "greedy_pick", lambda logits: torch.argmax(logits.half(), dim=-1))
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds and observations["tie_mismatches"] > 0
