"""pvpack.checks.loss_precision: on the fast path, loss and evaluate are the float64 cross-entropy
of the path's own logits to fp32 rounding, on pvlab's runtime and on transformers (tiny-trained,
CPU); a loss computed in bf16, in either runtime, is reported."""

from __future__ import annotations

import pytest
import torch

from pvlab.falsifiers.mutants import registry
from pvpack.checks import loss_precision

FAST = dict(device="cpu", subject="tiny-trained", path="fast", batches=2)


def holds(seen: dict) -> bool:
    """FALSIFY-FUSED-LOSS-PRECISION-002's prediction."""
    return (seen["loss_rel_diff"] <= 1e-5 and seen["eval_rel_diff"] <= 1e-5 and seen["batches"] == 2
            and seen["scored_tokens"] > 0)


@pytest.mark.parametrize("runtime", ["pvlab", "transformers"])
def test_the_fast_loss_is_the_loss_of_the_fast_logits(runtime):
    seen = loss_precision.reported_loss_is_loss_of_logits(runtime=runtime, **FAST)
    assert holds(seen), seen


@pytest.mark.parametrize("runtime, bug", [("pvlab", "fused_loss_statistics_in_bfloat16"),
                                          ("transformers", "hf_fast_path_loss_in_bfloat16")])
def test_a_loss_computed_in_bf16_is_reported(runtime, bug):
    with registry()[bug]():
        seen = loss_precision.reported_loss_is_loss_of_logits(runtime=runtime, **FAST)
    assert not holds(seen) and seen["loss_rel_diff"] > 1e-3, seen


def test_a_log_softmax_in_bf16_is_reported(monkeypatch):
    """A second defect of the class: the adapter's loss upcasts the logits, but only after a
    log-softmax taken in their own dtype (bf16 on the fast path)."""
    from pvpack.adapters import transformers as adapter

    def token_loss(logits, targets):
        log_probs = torch.log_softmax(logits, dim=-1).float()
        return torch.nn.functional.nll_loss(log_probs.reshape(-1, log_probs.shape[-1]), targets.reshape(-1),
                                            ignore_index=adapter.IGNORE_INDEX)

    monkeypatch.setattr(adapter, "token_loss", token_loss)
    seen = loss_precision.reported_loss_is_loss_of_logits(runtime="transformers", **FAST)
    assert not holds(seen), seen
