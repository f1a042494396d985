"""pvlab.falsifiers.fused_loss_precision: the fused loss keeps fp32 statistics under bf16 compute;
on exactly representable logits it equals the float64 cross-entropy to fp32 rounding. The
planted bf16 statistics and a second defect of the class are reported."""

from __future__ import annotations

import pytest
import torch

from pvlab.falsifiers import fused_loss_precision
from pvlab.falsifiers.mutants import registry


def holds(seen: dict) -> bool:
    """FALSIFY-FUSED-LOSS-PRECISION-001's prediction."""
    return (seen["loss_rel_error_with_gradients"] <= 1e-5 and seen["loss_rel_error_loss_only"] <= 1e-5
            and seen["exact_logits"] == 1 and seen["chunks"] >= 4)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_fused_loss_has_fp32_statistics(seed):
    seen = fused_loss_precision.fused_loss_statistics_in_fp32(device="cpu", seed=seed)
    assert holds(seen), seen


def test_bf16_statistics_are_reported():
    with registry()["fused_loss_statistics_in_bfloat16"]():
        seen = fused_loss_precision.fused_loss_statistics_in_fp32(device="cpu")
    assert not holds(seen) and seen["loss_rel_error_with_gradients"] > 1e-4


def test_a_loss_sum_rounded_to_bf16_is_reported(monkeypatch):
    """A second defect of the class: each chunk's loss sum returned in the compute dtype (the
    loss-only path), the statistics before it in fp32."""
    from pvlab.runtime import kernels

    original = kernels.chunk_loss_sum
    monkeypatch.setattr(kernels, "chunk_loss_sum",
                        lambda logits, targets, counted: original(logits, targets, counted).to(torch.bfloat16).float())
    seen = fused_loss_precision.fused_loss_statistics_in_fp32(device="cpu")
    assert not holds(seen) and seen["loss_rel_error_with_gradients"] <= 1e-5 < seen["loss_rel_error_loss_only"]
