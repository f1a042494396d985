"""pvpack.checks.clipping: global-norm clipping holds on pvlab's runtime and on transformers
(tiny-trained, CPU), and clipping defects planted in the transformers adapter's own `clip` are
reported (pvlab's are the contract's declared planted bugs, killed by `pv strength`)."""

from __future__ import annotations

import math

import pytest
import torch

from pvpack.adapters import transformers as adapter
from pvpack.checks import clipping

CALL = dict(device="cpu", subject="tiny-trained", path="reference", clip_fraction=0.25, headroom=4.0, lr=1e-3, seed=0)


def holds(seen: dict) -> bool:
    """FALSIFY-GRAD-CLIP-001's prediction."""
    return (seen["raw_norm"] > 0 and seen["names_differ"] == 0 and seen["tensors"] >= 1
            and seen["clipped_max_rel_diff"] <= 1e-4 and 0.9999 <= seen["clipped_norm_ratio"] <= 1.0001
            and seen["tensor_ratio_spread"] <= 1e-4 and seen["unclipped_max_rel_diff"] <= 1e-4)


@pytest.mark.parametrize("runtime", ["pvlab", "transformers"])
def test_global_clipping_passes(runtime):
    seen = clipping.clipping_is_global(runtime=runtime, **CALL)
    assert holds(seen), seen
    assert seen["unclipped_max_rel_diff"] == 0.0 and seen["tensor_ratio_spread"] < 1e-6


def _grads(parameters):
    return [p.grad for p in parameters if p.grad is not None]


def per_tensor(parameters, max_norm):
    """Each tensor clipped to max_norm on its own (clip_grad_norm_ called per parameter)."""
    if max_norm > 0:
        for p in parameters:
            if p.grad is not None:
                torch.nn.utils.clip_grad_norm_([p], max_norm)


def not_capped(parameters, max_norm):
    """The factor max_norm / norm applied without min(1, ...): a small gradient scaled up."""
    if max_norm > 0:
        grads = _grads(parameters)
        norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
        for g in grads:
            g.mul_(max_norm / (norm + 1e-6))


def squared_norm(parameters, max_norm):
    """The global norm left squared (the sum of squares, no square root)."""
    if max_norm > 0:
        grads = _grads(parameters)
        norm = sum(float(g.pow(2).sum()) for g in grads)
        factor = min(1.0, max_norm / (norm + 1e-6))
        for g in grads:
            g.mul_(factor)


def zero_is_zero(parameters, max_norm):
    """grad_clip 0, documented as off, clips to a norm of 0."""
    torch.nn.utils.clip_grad_norm_(list(parameters), max(max_norm, 0.0))


@pytest.mark.parametrize("defect, sign", [(per_tensor, "tensor_ratio_spread"), (not_capped, "unclipped_max_rel_diff"),
                                          (squared_norm, "clipped_norm_ratio"), (zero_is_zero, "raw_norm")])
def test_a_clipping_defect_in_transformers_is_reported(monkeypatch, defect, sign):
    monkeypatch.setattr(adapter, "clip", defect)
    seen = clipping.clipping_is_global(runtime="transformers", **CALL)
    assert not holds(seen), seen
    healthy = {"tensor_ratio_spread": 0.0, "unclipped_max_rel_diff": 0.0, "clipped_norm_ratio": 1.0, "raw_norm": None}
    if sign == "raw_norm":
        assert seen["raw_norm"] == 0.0 and math.isinf(seen["clipped_max_rel_diff"])
    else:
        assert abs(seen[sign] - healthy[sign]) > 1e-2, seen  # the observation the contract's if_fails names
