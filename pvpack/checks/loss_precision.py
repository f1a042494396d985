"""On every path, the loss a runtime reports is the cross-entropy of the logits it computes.

A fast path rounds its products to bf16, so its logits differ from the reference path's by
bf16 rounding, and every check that compares the fast path's loss with the reference loss (or
with float64 of the reference logits) needs a bf16 bound: a bound loose enough to hold a loss
that was itself computed in bf16 (the log-softmax of bf16 logits taken in bf16, a missing
`.float()` before the cross-entropy), which errs by a few parts per thousand more.

This check takes the rounding of the logits out of the comparison instead of widening the bound:
the oracle is the next-token cross-entropy, in float64 in the pack (`next_token_nll`), of the
logits the runtime returns on the same path for the same batch. Those logits carry the path's
product rounding; computing the loss from them adds only the loss's own arithmetic, which the
runtime keeps in fp32 (the runtime's loss (`loss`) and eval loop (`evaluate`) may run another
product of the same operands — a chunked fused loss — so the bound admits a little of the
products' own reordering, measured).

Observations: loss_rel_diff / eval_rel_diff (the worst, over the held-out batches, of |runtime -
float64| / float64 for `loss` and for `evaluate`), batches, scored_tokens.
"""

from __future__ import annotations

from ..protocol import EVALUATE, LOAD, LOGITS, LOSS
from ._base import load, next_token_nll, subject_of, uses
from .evaluation import default_path


@uses(LOAD, LOGITS, LOSS, EVALUATE)
def reported_loss_is_loss_of_logits(*, runtime, device: str, subject: str, path: str | None = None,
                                    batches: int = 2) -> dict:
    """Each held-out batch's `loss` and `evaluate` on `path` against float64 cross-entropy of the
    logits the same model returns on that path for that batch."""
    who = subject_of(subject)
    path = default_path(runtime, device, path)
    model = load(runtime, who, device, path)
    worst_loss = worst_eval = 0.0
    scored = 0
    try:
        held_out = who.heldout(batches)
        for batch in held_out:
            total, count = next_token_nll(model.logits(batch.inputs), batch.targets)
            expected = total / count
            scored += count
            worst_loss = max(worst_loss, abs(model.loss(batch) - expected) / expected)
            worst_eval = max(worst_eval, abs(model.evaluate([batch]) - expected) / expected)
    finally:
        model.close()
    return {"loss_rel_diff": worst_loss, "eval_rel_diff": worst_eval, "batches": len(held_out),
            "scored_tokens": scored}
