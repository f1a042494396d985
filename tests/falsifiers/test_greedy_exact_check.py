"""pvlab.falsifiers.greedy_exact (FALSIFY-SAMPLING-LAW-004): holds on the runtime, false under
greedy_pick_in_bfloat16, and reports two more defects of the class: ties broken to the last maximum,
and a pick from fp16 logits."""

from __future__ import annotations

import importlib

import torch

from falsifier_helpers import assert_holds_and_killed, observe

CONTRACT, FALSIFIER, BUG = "sampling-law", "FALSIFY-SAMPLING-LAW-004", "greedy_pick_in_bfloat16"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_it_reports_a_pick_that_breaks_ties_to_the_last_index(monkeypatch):
    """Another defect: the last maximum instead of the first (an argmax of the flipped row).
    Only the exact-tie rows tell it apart; the near-tie rows and the decodes do not."""
    kernels = importlib.import_module("pvlab.runtime.kernels")

    def last_maximum(logits):
        flipped = torch.flip(logits, dims=[-1])
        return logits.shape[-1] - 1 - torch.argmax(flipped, dim=-1)

    monkeypatch.setattr(kernels, "greedy_pick", last_maximum)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    assert observations["tie_mismatches"] == 4 and observations["decode_mismatches"] == 0


def test_it_reports_a_pick_from_half_precision_logits(monkeypatch):
    kernels = importlib.import_module("pvlab.runtime.kernels")
    monkeypatch.setattr(kernels, "greedy_pick", lambda logits: torch.argmax(logits.half(), dim=-1))
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds and observations["tie_mismatches"] > 0
