"""pvlab.falsifiers.bias_initialisation (FALSIFY-BIAS-INIT-001): holds on the runtime, false under
bias_draw_reseeded_per_tensor, and reports biases drawn with the wrong spread."""

from __future__ import annotations

import importlib

import torch

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers.mutants import registry

CONTRACT, FALSIFIER, BUG = "bias-initialisation", "FALSIFY-BIAS-INIT-001", "bias_draw_reseeded_per_tensor"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_it_sees_the_copied_biases_as_equal_pairs():
    observations, _ = observe(CONTRACT, FALSIFIER)
    assert observations["bias_tensors"] == 26 and observations["equal_pairs"] == 0
    assert observations["max_abs_correlation"] < observations["correlation_bound"] < 0.6
    with registry()[BUG]():
        observations, _ = observe(CONTRACT, FALSIFIER)
    # still drawn, deterministic and seed-dependent: only the independence checks see it
    assert observations["undrawn"] == 0 and observations["nondeterministic"] == 0
    assert observations["seed_insensitive"] == 0 and observations["std_errors"] == 0
    assert observations["equal_pairs"] > 0 and observations["max_abs_correlation"] > 0.999


def test_it_reports_biases_drawn_with_the_wrong_spread(monkeypatch):
    """Another defect: independent draws, one generator, but the std applied twice (std^2 = 0.25
    where the recipe says 0.5)."""
    pretrain = importlib.import_module("pvlab.runtime.pretrain")

    def squared_std(model, std, seed):
        generator = torch.Generator(device="cpu").manual_seed(seed + 1)
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith(".bias"):
                    parameter.copy_(torch.randn(parameter.shape, generator=generator) * std * std)

    monkeypatch.setattr(pretrain, "draw_biases", squared_std)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    # a ratio of 0.5 is at the edge of the 128-value tensors' bound [0.50, 1.43]; every longer one is out
    assert observations["std_errors"] >= 20
    assert abs(observations["pooled_std_ratio"] - 0.5) < 0.05 < observations["pooled_std_low"] - 0.5
    assert observations["equal_pairs"] == 0 and observations["correlated_pairs"] == 0
