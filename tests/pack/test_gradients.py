"""pvpack.checks.gradients: the step's gradient is the derivative of the loss on pvlab's runtime
and on transformers (tiny-trained, CPU), and backward defects planted in transformers' own code
(the forward left exact) are reported: a gradient scaled twice, a tensor whose gradient never
arrives, a norm whose backward treats its statistic as a constant."""

from __future__ import annotations

import pytest
import torch

from pvpack.adapters import transformers as adapter
from pvpack.checks import gradients

CALL = dict(device="cpu", subject="tiny-trained", path="reference", rows=2, step=1e-2, seed=0, max_tensors=64)


def holds(seen: dict) -> bool:
    """FALSIFY-GRAD-CORRECT-001's prediction."""
    return seen["worst_rel_err"] <= 0.02 and seen["missing_gradients"] == 0 and seen["tensors_checked"] >= 1


def test_directions_are_unit_and_follow_the_gradient():
    grads = {"a": torch.tensor([[3.0, 4.0]], dtype=torch.float64), "b": torch.zeros(3, dtype=torch.float64)}
    directions = gradients._directions(grads, ["a", "b"], seed=0)
    assert all(abs(float(d.norm()) - 1.0) < 1e-12 for d in directions.values())
    assert float((directions["a"] * grads["a"]).sum()) > 0      # leans along the gradient
    assert float(directions["b"].norm()) > 0                     # a zero gradient still gets a direction


def test_gradients_match_on_transformers():
    seen = gradients.gradient_matches_finite_differences(runtime="transformers", **CALL)
    assert holds(seen), seen
    assert seen["tensors_checked"] == 26 and seen["step_loss_rel_diff"] < 1e-6


class _Doubled(torch.autograd.Function):
    """Identity forward, twice the gradient backward (a loss scale applied and never undone)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


def test_a_gradient_scaled_twice_is_reported(monkeypatch):
    original = adapter.token_loss
    monkeypatch.setattr(adapter, "token_loss", lambda logits, targets: _Doubled.apply(original(logits, targets)))
    seen = gradients.gradient_matches_finite_differences(runtime="transformers", **CALL)
    assert not holds(seen) and seen["median_rel_err"] > 0.4, seen


def test_a_gradient_that_never_arrives_is_reported(monkeypatch):
    """One layer's gate projection gets a zero gradient (a hook, a stale copy): it still trains
    nothing, and the loss curve hides it."""
    original = adapter.TransformersModel.train_step

    def train_step(self, batch):
        handle = self.model.model.layers[0].mlp.gate_proj.weight.register_hook(torch.zeros_like)
        try:
            return original(self, batch)
        finally:
            handle.remove()

    monkeypatch.setattr(adapter.TransformersModel, "train_step", train_step)
    seen = gradients.gradient_matches_finite_differences(runtime="transformers", **CALL)
    assert not holds(seen) and seen["worst_rel_err"] > 0.1, seen   # its slope is small: the floor (1 % of the largest) bounds the error


def test_a_norm_whose_backward_treats_its_statistic_as_constant_is_reported(monkeypatch):
    """RMSNorm with its mean square detached: the forward is bit-identical, the backward drops
    the statistic's own derivative (a hand-written norm kernel's classic)."""
    from transformers.models.qwen2 import modeling_qwen2

    def forward(self, hidden_states):
        h = hidden_states.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True).detach()
        return self.weight * (h * torch.rsqrt(variance + self.variance_epsilon)).to(hidden_states.dtype)

    monkeypatch.setattr(modeling_qwen2.Qwen2RMSNorm, "forward", forward)
    seen = gradients.gradient_matches_finite_differences(runtime="transformers", **CALL)
    assert not holds(seen), seen


def test_a_step_that_is_not_the_loss_is_refused(monkeypatch):
    """Where the step's reported loss is not loss() at the same weights (dropout, another loss),
    the check refuses to judge: an ERROR, never a pass or a FAIL."""
    original = adapter.TransformersModel.train_step
    monkeypatch.setattr(adapter.TransformersModel, "train_step", lambda self, batch: 1.5 * original(self, batch))
    with pytest.raises(RuntimeError, match="not the function differenced"):
        gradients.gradient_matches_finite_differences(runtime="transformers", **CALL)


def test_padded_rows_pass_on_pvlab_and_the_padding_is_real():
    """Rows of 8..32 scored targets (padding after): the reference path still matches, and the
    batch the check judged really had padding (its step loss differs from the unpadded one's)."""
    padded = gradients.gradient_matches_finite_differences(runtime="pvlab", **{**CALL, "min_len": 8, "max_len": 32})
    plain = gradients.gradient_matches_finite_differences(runtime="pvlab", **CALL)
    assert holds(padded), padded
    assert padded["largest_difference"] != plain["largest_difference"]
