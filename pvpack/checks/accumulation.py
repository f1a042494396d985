"""Gradient accumulation is a memory optimisation, not a different objective, in any runtime.

One training step over a batch split into micro-batches (TrainSettings.micro_batches = k) must
give the loss and every gradient of one step over the whole batch. The batch is built to expose
the public defect (transformers before PR #34191: each micro-batch's loss averaged over its own
tokens, then the micro-batches averaged): rows whose scored lengths differ widely, so that the
micro-batches hold different numbers of scored tokens.

The oracles: the same runtime's step over the whole batch without accumulation (independent of
the runtime's accumulation code, its micro-batch weights and split), and the loss recomputed in
float64 from the model's logits before the step (`independent_loss`: the definition, written in
the pack, independent of the runtime's loss code).

Assumes: a training step draws no random numbers (no dropout): the check steps the whole batch
twice under different random-number states and, where the two differ, says so (an ERROR: a
micro-batched step would differ by its draw, not by a defect). The runtime splits a batch into
micro-batches of whole rows (any split: the check
needs none in particular, though the design observations assume consecutive blocks of
ceil(rows / k) rows, the split every adapter here makes) and its gradients() hold the
accumulated gradient of the step (clipping off, so nothing rescales it).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ..protocol import GRADIENT_ACCUMULATION, GRADIENTS, IGNORE_INDEX, LOAD, LOGITS, TRAIN_STEP, TrainSettings
from ._base import independent_loss, load, subject_of, uses
from ._batches import ragged
from ._controls import path_dtype, stepped, tolerance_of
from .evaluation import default_path

_TOLERANCE = {"float32": (1e-5, 1e-7), "bfloat16": (3e-2, 1e-5)}   # as the contract measured them


def _flat(gradients: dict[str, torch.Tensor], names: list[str]) -> torch.Tensor:
    return torch.cat([gradients[n].to(torch.float64).flatten() for n in names])


@uses(LOAD, LOGITS, TRAIN_STEP, GRADIENTS, GRADIENT_ACCUMULATION)
def accumulated_step_matches_full_batch(*, runtime, device: str, subject: str, path: str | None = None,
                                        micro_batches: int = 3, rows: int = 7, min_len: int = 3, max_len: int = 40,
                                        seed: int = 0, tolerance: dict | None = None) -> dict:
    """Two models of the subject's weights, each trained one step on the same ragged batch (lr
    1e-3, no weight decay, no clipping): one over the whole batch, one in `micro_batches`
    micro-batches. Their gradients and reported losses are compared, and both losses with the
    float64 loss of the logits before the step.

    Observations: grad_max_abs_diff, grad_max_abs_ref (the whole-batch gradient's largest
    entry), grad_tol (atol + rtol * grad_max_abs_ref), grad_nonfinite, grad_names_differ (names
    in one gradient set and not the other); loss, whole_loss, reference_loss (float64 from the
    logits), loss_abs_diff (the accumulated step's loss against reference_loss), whole_loss_abs_diff,
    loss_tol; rtol, atol (of the path's dtype: float32 on the reference path, bfloat16 on a fast
    one); micro_batches, rows, scored_tokens, min_micro_tokens / max_micro_tokens (the design,
    for blocks of ceil(rows / k) rows: unequal counts are what the defect needs)."""
    who = subject_of(subject)
    path = default_path(runtime, device, path)
    rtol, atol = tolerance_of(tolerance, path_dtype(path), _TOLERANCE)
    batch = ragged(who.train(1)[0], rows, min_len, max_len, seed)
    settings = TrainSettings(lr=1e-3, weight_decay=0.0, grad_clip=0.0, seed=seed)

    whole = load(runtime, who, device, path, train=settings)
    reference_loss = independent_loss(whole, [batch])
    whole_loss, expected = stepped(whole, batch, rng_seed=1)
    again_loss, again = stepped(load(runtime, who, device, path, train=settings), batch, rng_seed=2)
    loss, actual = stepped(load(runtime, who, device, path,
                                 train=dataclasses.replace(settings, micro_batches=micro_batches)), batch, rng_seed=1)

    names = sorted(set(expected) & set(actual))
    if not names:
        raise ValueError(f"the runtime's gradients() after a train_step named no parameter ({len(expected)} and "
                         f"{len(actual)} names)")
    a, e = _flat(actual, names), _flat(expected, names)
    finite = torch.isfinite(a) & torch.isfinite(e)
    grad_ref = float(e[finite].abs().max()) if bool(finite.any()) else math.nan
    # A step that draws random numbers (dropout) gives two whole-batch steps different gradients:
    # a step in micro-batches then differs by the draw, not by a defect, and is not judged.
    drawn = float((_flat(again, names) - e).abs().max()) if set(again) >= set(names) else math.inf
    if not drawn <= atol + rtol * grad_ref or abs(again_loss - whole_loss) > atol + rtol * abs(whole_loss):
        raise ValueError(f"the runtime's train_step is not deterministic: two whole-batch steps from the same "
                         f"weights under different random-number states differ by {drawn:.3g} in a gradient "
                         f"(bound {atol + rtol * grad_ref:.3g}); dropout, or other randomness in the step. "
                         "Accumulation is compared step against step: run it on a subject whose config turns "
                         "dropout off")
    size = math.ceil(rows / micro_batches)
    scored = (batch.targets != IGNORE_INDEX).sum(dim=1)
    micro_tokens = [int(scored[i:i + size].sum()) for i in range(0, rows, size)]
    return {
        "grad_max_abs_diff": float((a - e)[finite].abs().max()) if bool(finite.any()) else math.nan,
        "grad_max_abs_ref": grad_ref, "grad_tol": atol + rtol * grad_ref,
        "grad_nonfinite": int((~finite).sum()), "grad_names_differ": len(set(expected) ^ set(actual)),
        "loss": loss, "whole_loss": whole_loss, "reference_loss": reference_loss,
        "loss_abs_diff": abs(loss - reference_loss), "whole_loss_abs_diff": abs(whole_loss - reference_loss),
        "loss_tol": atol + rtol * abs(reference_loss), "rtol": rtol, "atol": atol,
        "micro_batches": micro_batches, "rows": rows, "scored_tokens": int(scored.sum()),
        "min_micro_tokens": min(micro_tokens), "max_micro_tokens": max(micro_tokens),
    }
