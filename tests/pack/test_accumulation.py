"""pvpack.checks.accumulation: a step in micro-batches against one step over the whole batch, on
pvlab's runtime and on transformers (the tiny-trained subject, CPU, seconds), and the defects of
the class reported on transformers' own accumulation loop (pvpack.adapters.transformers)."""

from __future__ import annotations

import pytest
import torch

from pvpack.checks import accumulation

REFERENCE = dict(device="cpu", subject="tiny-trained", path="reference", micro_batches=3, rows=7, min_len=3,
                 max_len=40, seed=0)


def holds(seen: dict) -> bool:
    """FALSIFY-GRAD-ACCUM-PACK-001's prediction."""
    return (seen["grad_max_abs_diff"] <= seen["grad_tol"] and seen["loss_abs_diff"] <= seen["loss_tol"]
            and seen["whole_loss_abs_diff"] <= seen["loss_tol"] and seen["grad_nonfinite"] == 0
            and seen["grad_names_differ"] == 0 and seen["micro_batches"] == 3
            and seen["min_micro_tokens"] < seen["max_micro_tokens"])


@pytest.mark.parametrize("runtime", ["pvlab", "transformers"])
def test_an_accumulated_step_is_the_whole_batch_step(runtime):
    seen = accumulation.accumulated_step_matches_full_batch(runtime=runtime, **REFERENCE)
    assert holds(seen), seen
    assert seen["grad_max_abs_diff"] > 0 or seen["grad_max_abs_ref"] > 0   # gradients were compared


def test_the_public_defect_in_transformers_own_loop_is_reported(monkeypatch):
    """Each micro-batch's mean loss weighted 1/3 (transformers' Trainer before PR #34191), planted
    in the adapter's accumulation loop: the gradient moves by several times its largest entry."""
    from pvpack.adapters import transformers as adapter

    monkeypatch.setattr(adapter, "micro_weight", lambda micro_tokens, step_tokens: 1 / 3)
    seen = accumulation.accumulated_step_matches_full_batch(runtime="transformers", **REFERENCE)
    assert not holds(seen) and seen["grad_max_abs_diff"] > seen["grad_max_abs_ref"]


def test_a_dropped_micro_batch_is_reported(monkeypatch):
    """A second defect of the class: the loop skips a short micro-batch (an early `continue` on a
    small one), and the step's loss and gradient lose its tokens."""
    from pvpack.adapters import transformers as adapter

    monkeypatch.setattr(adapter, "micro_weight",
                        lambda micro_tokens, step_tokens: 0.0 if micro_tokens < 40 else micro_tokens / step_tokens)
    seen = accumulation.accumulated_step_matches_full_batch(runtime="transformers", **REFERENCE)
    assert seen["min_micro_tokens"] < 40 and not holds(seen)
    assert seen["loss_abs_diff"] > seen["loss_tol"]


def test_the_pvlab_defect_is_reported_too(monkeypatch):
    from pvlab.runtime import trainer

    monkeypatch.setattr(trainer, "micro_batch_weight", lambda tokens, step_tokens, count: 1.0 / count)
    assert not holds(accumulation.accumulated_step_matches_full_batch(runtime="pvlab", **REFERENCE))


def test_a_step_with_dropout_is_not_judged(monkeypatch):
    """Dropout in the step: two whole-batch steps differ by their draws, so a micro-batched step
    would too, defect or not. The check says so (an ERROR), never FAILs the runtime for it."""
    from pvpack.adapters import transformers as adapter

    original = adapter.TransformersModel._forward

    def forward(self, inputs):
        out = original(self, inputs)
        return torch.nn.functional.dropout(out, 0.1, training=self.model.training)

    monkeypatch.setattr(adapter.TransformersModel, "_forward", forward)
    with pytest.raises(ValueError, match="not deterministic"):
        accumulation.accumulated_step_matches_full_batch(runtime="transformers", **REFERENCE)
