"""pvpack.checks.optimizer: each step replayed as the textbook AdamW in float64, on pvlab's
runtime and on transformers (tiny-trained, CPU), and defects of the class reported on
transformers' own optimizer (pvpack.adapters.transformers builds torch.optim.AdamW)."""

from __future__ import annotations

import pytest
import torch

from pvpack.checks import optimizer

CALL = dict(device="cpu", subject="tiny-trained", steps=3, lr=1e-3, min_lr=1e-4, warmup_steps=2, total_steps=10,
            weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8, rtol=2e-3)


def holds(seen: dict) -> bool:
    """FALSIFY-ADAMW-UPDATE-001's prediction."""
    return (seen["update_max_abs_diff"] <= seen["tol"] and seen["mismatched_parameters"] == 0
            and seen["matrices_decayed"] == seen["matrices"] and seen["matrices"] >= 1 and seen["steps"] == 3)


def test_pvlab_decays_matrices_only_and_is_adamw():
    seen = optimizer.adamw_update_matches_textbook(runtime="pvlab", **CALL)
    assert holds(seen), seen
    assert seen["vectors"] > 0 and seen["vectors_decayed"] == 0 and seen["vectors_kept"] > 0   # its policy, found
    assert seen["first_lr"] == pytest.approx(5e-4) and seen["last_lr"] == pytest.approx(1e-3)


def test_transformers_decays_every_parameter_and_is_adamw():
    seen = optimizer.adamw_update_matches_textbook(runtime="transformers", **CALL)
    assert holds(seen), seen
    assert seen["vectors_kept"] == 0 and seen["vectors_decayed"] > 0


def _hf_optimizer(monkeypatch, build):
    """Replace torch.optim.AdamW where the transformers adapter builds its optimizer."""
    from pvpack.adapters import transformers as adapter

    monkeypatch.setattr(adapter.torch.optim, "AdamW", build)


def test_coupled_weight_decay_is_reported(monkeypatch):
    """Adam with L2 (the decay added to the gradient) instead of AdamW: no matrix is found decayed,
    and from the second step the moments of g + wd p explain nothing."""
    _hf_optimizer(monkeypatch, lambda params, **kw: torch.optim.Adam(params, **kw))
    seen = optimizer.adamw_update_matches_textbook(runtime="transformers", **CALL)
    assert not holds(seen) and seen["matrices_decayed"] < seen["matrices"]


def test_eps_inside_the_square_root_is_reported(monkeypatch):
    """A second moment of another shape: eps 1e-3 instead of the documented 1e-8."""
    original = torch.optim.AdamW
    _hf_optimizer(monkeypatch, lambda params, **kw: original(params, **{**kw, "eps": 1e-3}))
    seen = optimizer.adamw_update_matches_textbook(runtime="transformers", **CALL)
    assert not holds(seen) and seen["mismatched_parameters"] > 0


def test_a_learning_rate_off_the_schedule_is_reported(monkeypatch):
    """The warmup ignored: every step at the peak rate (the first step is twice its size)."""
    from pvpack.adapters import transformers as adapter

    monkeypatch.setattr(adapter, "schedule", lambda step, settings: settings.lr)
    seen = optimizer.adamw_update_matches_textbook(runtime="transformers", **CALL)
    assert not holds(seen) and seen["update_max_abs_diff_step"] >= 1
