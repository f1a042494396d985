"""A causal language model's logits at a position depend on that position and the ones before it,
never on the tokens after it, in any runtime.

The check feeds a batch twice: as it is, and with every token from a cut position on replaced by
other tokens. Before the cut the two sets of logits must agree; at the cut itself they must
differ for most rows (else the replaced tokens never reached the model and the comparison
proves nothing). A missing causal mask, a mask one key too wide (`triu(diagonal=2)` where 1 is
meant), attention or a position computation that reads the whole row (a mean over the sequence,
rotary tables from the row's length) all move the logits before the cut.

The oracle is the property itself, written in the check: no second implementation is needed,
and none of the runtime's code judges its own output.

Assumes: a decoder-only causal LM whose `logits` of one (B, T) batch are one forward (the same
shapes both times, so a deterministic runtime gives bit-identical numbers before the cut; the
tolerance only absorbs a kernel that is not bit-deterministic across calls).
"""

from __future__ import annotations

import torch

from ..protocol import LOAD, LOGITS
from ._base import load, subject_of, uses
from ._controls import path_dtype, tolerance_of
from .evaluation import default_path

_TOLERANCE = {"float32": (1e-5, 1e-6), "bfloat16": (1e-2, 1e-3)}   # (rtol, atol) on the largest logit


def cut_points(length: int, cuts: int) -> list[int]:
    """`cuts` positions spread over 1 .. length - 1 (position 0 is never a cut: nothing precedes it)."""
    if length < 2 or cuts < 1:
        raise ValueError(f"a causality check needs rows of at least 2 tokens and a cut, got {length} and {cuts}")
    points = torch.linspace(1, length - 1, min(cuts, length - 1)).round().long().tolist()
    return sorted(set(points))


def replaced_after(inputs: torch.Tensor, cut: int, vocab: int, generator: torch.Generator) -> torch.Tensor:
    """`inputs` with every token at or after `cut` replaced by a different token (in-vocabulary)."""
    changed = inputs.clone()
    tail = changed[:, cut:]
    shift = torch.randint(1, vocab, tail.shape, generator=generator)
    changed[:, cut:] = (tail + shift) % vocab     # never the same token: shift is 1 .. vocab - 1
    return changed


@uses(LOAD, LOGITS)
def future_tokens_change_nothing_before(*, runtime, device: str, subject: str, path: str | None = None,
                                        cuts: int = 4, rows: int = 4, seed: int = 0,
                                        tolerance: dict | None = None) -> dict:
    """Logits of `rows` held-out rows, then of the same rows with the tokens from each of `cuts`
    cut positions on replaced.

    Observations: max_abs_diff_before (largest change of a logit at a position before its cut,
    over every cut and row), max_abs_ref (largest logit), tol (atol + rtol * max_abs_ref),
    leaked_positions (positions before a cut, over cuts and rows, with a change above tol),
    first_leak_offset (the smallest distance back from a cut at which one leaked, 0 when none:
    1 is a mask one key too wide), changed_at_cut (fraction of (cut, row) pairs whose logits at
    the cut changed by more than tol: the replaced tokens reached the model), cuts, rows, length,
    rtol, atol."""
    who = subject_of(subject)
    path = default_path(runtime, device, path)
    rtol, atol = tolerance_of(tolerance, path_dtype(path), _TOLERANCE)
    batch = who.heldout(1)[0]
    inputs = batch.inputs[:rows]
    length = int(inputs.shape[1])
    points = cut_points(length, cuts)
    generator = torch.Generator().manual_seed(seed)
    model = load(runtime, who, device, path)
    try:
        base = model.logits(inputs).to(torch.float64)
        changed = {cut: model.logits(replaced_after(inputs, cut, who.vocab_size, generator)).to(torch.float64)
                   for cut in points}
    finally:
        model.close()
    max_ref = float(base.abs().max())
    tol = atol + rtol * max_ref
    worst, leaked, first_offset, reached, pairs = 0.0, 0, 0, 0, 0
    for cut, other in changed.items():
        moved = (other - base).abs().amax(dim=-1)            # (rows, T): each position's largest change
        before = moved[:, :cut]
        worst = max(worst, float(before.max()))
        leaks = before > tol
        leaked += int(leaks.sum())
        if bool(leaks.any()):
            offsets = cut - torch.nonzero(leaks)[:, 1]
            nearest = int(offsets.min())
            first_offset = nearest if first_offset == 0 else min(first_offset, nearest)
        reached += int((moved[:, cut] > tol).sum())
        pairs += int(moved.shape[0])
    return {"max_abs_diff_before": worst, "max_abs_ref": max_ref, "tol": tol, "leaked_positions": leaked,
            "first_leak_offset": first_offset, "changed_at_cut": reached / pairs, "cuts": len(points),
            "rows": int(inputs.shape[0]), "length": length, "rtol": rtol, "atol": atol}
