"""pvlab.falsifiers.sampling_independence (FALSIFY-SAMPLING-LAW-003): holds on the runtime, false
under sampling_generator_reseeded_each_step, and reports rows of a batch that share their draws."""

from __future__ import annotations

import importlib
import math

import torch

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers.mutants import registry
from pvlab.falsifiers.sampling_independence import _azuma, _repeats

CONTRACT, FALSIFIER, BUG = "sampling-law", "FALSIFY-SAMPLING-LAW-003", "sampling_generator_reseeded_each_step"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_a_reseeded_generator_repeats_tokens_and_rows_stay_apart():
    observations, _ = observe(CONTRACT, FALSIFIER)
    assert observations["draws"] == observations["expected_draws"] == 120 * 5
    assert observations["max_excess"] < 0.2
    with registry()[BUG]():
        observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    # nearly every token repeats the one before; the rows of one step still draw apart
    assert observations["single_repeats"] >= 100 and observations["single_excess"] > 1
    assert observations["coincidence_excess"] < 1


def test_it_reports_rows_that_share_their_draws(monkeypatch):
    """Another defect of the class: one random number per step shared by every row of a batch
    (a generator per request reused for each row's draw), each row still following its law."""
    kernels = importlib.import_module("pvlab.runtime.kernels")
    original = kernels.sample_pick

    def shared_draw(logits, temperature, generator, top_k=None):
        state = generator.get_state()
        picked = []
        for row in logits:
            generator.set_state(state)
            picked.append(original(row[None], temperature, generator, top_k))
        return torch.cat(picked)

    monkeypatch.setattr(kernels, "sample_pick", shared_draw)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    assert observations["coincidence_excess"] > 1 and observations["batch_coincidences"] > 300


def test_the_statistics_and_the_bound():
    law = [[0.5, 0.25, 0.25]] * 4
    assert _repeats([0, 0, 1, 1], law) == (2, 0.5 + 0.5 + 0.25)
    # 2 exp(-2 a^2 / n) = delta
    a = _azuma(100, 1e-6)
    assert math.isclose(2 * math.exp(-2 * a * a / 100), 1e-6, rel_tol=1e-12)
