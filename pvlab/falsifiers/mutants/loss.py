"""Planted bugs of runtime.kernels' cross-entropies (reference and fused chunked).

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

from pv.mutation import mutant

from .planting import plant, swap


def _shift_one_more(hidden_or_logits, targets):
    """Position t's scores are matched with target t+1 (drops the last position / first target)."""
    length = targets.shape[-1]
    if length < 2:
        return hidden_or_logits, targets
    return hidden_or_logits.narrow(-2, 0, length - 1), targets.narrow(-1, 1, length - 1)


@mutant("cross_entropy_off_by_one")
def cross_entropy_off_by_one():
    """The loss shifts targets a second time: the logits at position t are scored against the
    token at t+2 (both the reference cross-entropy and the fast path's fused chunked one).

    Imitates the seed defect "cross-entropy off by one position" (a double shift between batch
    construction and the loss). Seams: runtime.kernels.cross_entropy_reference and
    runtime.kernels.chunked_linear_cross_entropy."""
    from pvlab.runtime import kernels

    reference, chunked = kernels.cross_entropy_reference, kernels.chunked_linear_cross_entropy

    def cross_entropy_reference(logits, targets):
        return reference(*_shift_one_more(logits, targets))

    def chunked_linear_cross_entropy(hidden, weight, targets, **kwargs):
        shifted_hidden, shifted_targets = _shift_one_more(hidden, targets)
        return chunked(shifted_hidden, weight, shifted_targets, **kwargs)

    with plant("cross_entropy_off_by_one",
               swap(kernels, "cross_entropy_reference", cross_entropy_reference),
               swap(kernels, "chunked_linear_cross_entropy", chunked_linear_cross_entropy)):
        yield


@mutant("cross_entropy_counts_padding")
def cross_entropy_counts_padding():
    """Padding targets (IGNORE_INDEX) are scored as token 0 and counted in the mean, in both the
    reference and the fused chunked cross-entropy.

    Imitates the padding-mask defect of losses that clamp ignored targets for the gather but
    forget to exclude them. Seams: runtime.kernels.cross_entropy_reference and
    runtime.kernels.chunked_linear_cross_entropy."""
    from pvlab.runtime import kernels

    reference, chunked = kernels.cross_entropy_reference, kernels.chunked_linear_cross_entropy

    def cross_entropy_reference(logits, targets):
        return reference(logits, targets.clamp(min=0))

    def chunked_linear_cross_entropy(hidden, weight, targets, **kwargs):
        return chunked(hidden, weight, targets.clamp(min=0), **kwargs)

    with plant("cross_entropy_counts_padding",
               swap(kernels, "cross_entropy_reference", cross_entropy_reference),
               swap(kernels, "chunked_linear_cross_entropy", chunked_linear_cross_entropy)):
        yield


@mutant("cross_entropy_mean_over_batch_not_tokens")
def cross_entropy_mean_over_batch_not_tokens():
    """The loss sums the token losses of each sequence and averages over the batch only (divides by
    B instead of by the number of target tokens): every loss is T times too large.

    Imitates the mis-normalised loss the eval-methodology contract names (`loss.sum() / batch_size`
    for `loss.mean()`). Seams: runtime.kernels.cross_entropy_reference and
    runtime.kernels.chunked_linear_cross_entropy."""
    from pvlab.runtime import kernels

    reference, chunked = kernels.cross_entropy_reference, kernels.chunked_linear_cross_entropy

    def per_batch(mean, targets):
        counted = (targets != kernels.IGNORE_INDEX).sum().clamp(min=1)
        batch = targets.shape[0] if targets.dim() > 1 else 1
        return mean * counted / batch

    def cross_entropy_reference(logits, targets):
        return per_batch(reference(logits, targets), targets)

    def chunked_linear_cross_entropy(hidden, weight, targets, **kwargs):
        return per_batch(chunked(hidden, weight, targets, **kwargs), targets)

    with plant("cross_entropy_mean_over_batch_not_tokens",
               swap(kernels, "cross_entropy_reference", cross_entropy_reference),
               swap(kernels, "chunked_linear_cross_entropy", chunked_linear_cross_entropy)):
        yield

