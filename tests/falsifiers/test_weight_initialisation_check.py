"""pvlab.falsifiers.weight_initialisation (FALSIFY-WEIGHT-INIT-001): holds on the runtime, false
under init_std_from_hidden_size, and reports an init that ignores the config's range or leaves
the norms at zero."""

from __future__ import annotations

import importlib

import torch

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers.mutants import registry

CONTRACT, FALSIFIER, BUG = "weight-initialisation", "FALSIFY-WEIGHT-INIT-001", "init_std_from_hidden_size"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_it_sees_the_width_scaled_spread():
    observations, _ = observe(CONTRACT, FALSIFIER)
    assert observations["matrices"] == 31 and abs(observations["worst_std_ratio"] - 1) < 0.1
    with registry()[BUG]():
        observations, _ = observe(CONTRACT, FALSIFIER)
    # 1/sqrt(64) = 0.125 against 0.05 and 0.013: every matrix out of its bound
    assert observations["std_errors"] == 31 and observations["worst_std_ratio"] > 5
    assert observations["norms_not_one"] == observations["biases_not_zero"] == observations["equal_pairs"] == 0


def test_it_reports_an_init_that_ignores_the_configs_range(monkeypatch):
    """Another defect: the transformers default 0.02 hard-coded, whatever initializer_range says."""
    model = importlib.import_module("pvlab.runtime.model")

    def fixed_std(built, seed):
        generator = torch.Generator(device="cpu").manual_seed(seed)
        with torch.no_grad():
            for name, parameter in built.named_parameters():
                if name.endswith("norm.weight"):
                    parameter.fill_(1.0)
                elif name.endswith(".bias"):
                    parameter.zero_()
                else:
                    parameter.copy_(torch.empty(parameter.shape).normal_(0.0, 0.02, generator=generator))

    monkeypatch.setattr(model, "init_weights", fixed_std)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    assert observations["std_errors"] == 31


def test_it_reports_norms_left_at_zero(monkeypatch):
    model = importlib.import_module("pvlab.runtime.model")
    original = model.init_weights

    def zero_norms(built, seed):
        original(built, seed)
        with torch.no_grad():
            for name, parameter in built.named_parameters():
                if name.endswith("norm.weight"):
                    parameter.zero_()

    monkeypatch.setattr(model, "init_weights", zero_norms)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds and observations["norms_not_one"] > 0 and observations["std_errors"] == 0
