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


def _in_both_cross_entropies(name: str, *, before=None, after=None):
    """Plant `name` in runtime.kernels' reference cross-entropy and its fused chunked one alike:
    `before(scores, targets) -> (scores, targets)` changes what each receives (scores are the
    logits of the one, the hidden states of the other; positions are dim -2 in both), and
    `after(loss, targets)` changes the mean loss each returns (targets as received)."""
    from pvlab.runtime import kernels

    reference, chunked = kernels.cross_entropy_reference, kernels.chunked_linear_cross_entropy
    before = before or (lambda scores, targets: (scores, targets))
    after = after or (lambda loss, targets: loss)

    def cross_entropy_reference(logits, targets):
        return after(reference(*before(logits, targets)), targets)

    def chunked_linear_cross_entropy(hidden, weight, targets, **kwargs):
        changed_hidden, changed_targets = before(hidden, targets)
        return after(chunked(changed_hidden, weight, changed_targets, **kwargs), targets)

    return plant(name, swap(kernels, "cross_entropy_reference", cross_entropy_reference),
                 swap(kernels, "chunked_linear_cross_entropy", chunked_linear_cross_entropy))


@mutant("cross_entropy_off_by_one")
def cross_entropy_off_by_one():
    """The loss shifts targets a second time: the logits at position t are scored against the
    token at t+2 (both the reference cross-entropy and the fast path's fused chunked one).

    Imitates the seed defect "cross-entropy off by one position" (a double shift between batch
    construction and the loss). Seams: runtime.kernels.cross_entropy_reference and
    runtime.kernels.chunked_linear_cross_entropy."""
    with _in_both_cross_entropies("cross_entropy_off_by_one", before=_shift_one_more):
        yield


@mutant("cross_entropy_counts_padding")
def cross_entropy_counts_padding():
    """Padding targets (IGNORE_INDEX) are scored as token 0 and counted in the mean, in both the
    reference and the fused chunked cross-entropy.

    Imitates the padding-mask defect of losses that clamp ignored targets for the gather but
    forget to exclude them. Seams: runtime.kernels.cross_entropy_reference and
    runtime.kernels.chunked_linear_cross_entropy."""
    with _in_both_cross_entropies("cross_entropy_counts_padding",
                                  before=lambda scores, targets: (scores, targets.clamp(min=0))):
        yield


@mutant("cross_entropy_mean_over_batch_not_tokens")
def cross_entropy_mean_over_batch_not_tokens():
    """The loss sums the token losses of each sequence and averages over the batch only (divides by
    B instead of by the number of target tokens): every loss is T times too large.

    Imitates the mis-normalised loss the eval-methodology contract names (`loss.sum() / batch_size`
    for `loss.mean()`). Seams: runtime.kernels.cross_entropy_reference and
    runtime.kernels.chunked_linear_cross_entropy."""
    from pvlab.runtime import kernels

    def per_batch(mean, targets):
        counted = (targets != kernels.IGNORE_INDEX).sum().clamp(min=1)
        batch = targets.shape[0] if targets.dim() > 1 else 1
        return mean * counted / batch

    with _in_both_cross_entropies("cross_entropy_mean_over_batch_not_tokens", after=per_batch):
        yield



@mutant("chunked_cross_entropy_drops_last_chunk")
def chunked_cross_entropy_drops_last_chunk():
    """The fused chunked cross-entropy scores only whole chunks: the tokens of a last, partial
    chunk are never scored.

    Imitates the loop-bound defect of chunked losses (`range(n // chunk)` for ceil(n / chunk)).
    Seam: runtime.kernels.chunked_linear_cross_entropy."""
    from pvlab.runtime import kernels

    original = kernels.chunked_linear_cross_entropy

    def chunked_linear_cross_entropy(hidden, weight, targets, *, chunk_tokens=None, **kwargs):
        chunk = chunk_tokens or kernels.default_loss_chunk_tokens(weight.shape[0])
        whole = targets.numel() // chunk * chunk
        if whole == 0:
            return original(hidden, weight, targets, chunk_tokens=chunk_tokens, **kwargs)
        return original(hidden.reshape(-1, hidden.shape[-1])[:whole], weight, targets.reshape(-1)[:whole],
                        chunk_tokens=chunk, **kwargs)

    with plant("chunked_cross_entropy_drops_last_chunk",
               swap(kernels, "chunked_linear_cross_entropy", chunked_linear_cross_entropy)):
        yield


@mutant("chunked_cross_entropy_gradient_doubled")
def chunked_cross_entropy_gradient_doubled():
    """The fused chunked cross-entropy's backward returns twice the gradient of the hidden states
    (the forward value is right): training steps twice as large as the loss says.

    Imitates a hand-written backward that accumulates a chunk's gradient twice (or forgets to
    divide by the token count once). Seam: runtime.kernels.chunked_linear_cross_entropy."""
    import torch

    from pvlab.runtime import kernels

    original = kernels.chunked_linear_cross_entropy

    class DoubledGradient(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, gradient):
            return 2 * gradient

    def chunked_linear_cross_entropy(hidden, weight, targets, **kwargs):
        return original(DoubledGradient.apply(hidden), weight, targets, **kwargs)

    with plant("chunked_cross_entropy_gradient_doubled",
               swap(kernels, "chunked_linear_cross_entropy", chunked_linear_cross_entropy)):
        yield


@mutant("chunked_cross_entropy_without_max_subtraction")
def chunked_cross_entropy_without_max_subtraction():
    """The fused cross-entropy computes log(sum(exp(logits))) directly, without subtracting the
    row maximum: large logits overflow to inf (an infinite or NaN loss).

    Imitates the naive log-sum-exp of a hand-written fused loss. Seam:
    runtime.kernels.chunked_linear_cross_entropy."""
    import torch

    from pvlab.runtime import kernels

    def chunked_linear_cross_entropy(hidden, weight, targets, *, chunk_tokens=None, compute_dtype=torch.bfloat16):
        logits = hidden.reshape(-1, hidden.shape[-1]).to(compute_dtype) @ weight.to(compute_dtype).t()
        flat = targets.reshape(-1)
        keep = flat != kernels.IGNORE_INDEX
        logits = logits.float()[keep]
        log_sum_exp = torch.log(torch.exp(logits).sum(-1))
        return (log_sum_exp - logits.gather(1, flat[keep][:, None]).squeeze(1)).mean()

    with plant("chunked_cross_entropy_without_max_subtraction",
               swap(kernels, "chunked_linear_cross_entropy", chunked_linear_cross_entropy)):
        yield


# ---- sixth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Sixth blind batch"; probes in tests/falsifiers/sixth_mutant_probes.py)


@mutant("fast_eval_loss_scores_padding")
def fast_eval_loss_scores_padding():
    """The fast path's loss-only pass (the fused chunked cross-entropy under no_grad: eval_batch,
    evaluate and every eval on the fast path) scores the padding positions too, as predictions of
    token 0, and still divides by the number of real targets: the eval loss of a padded batch
    is too high (unpadded batches and training are unaffected; the gradient pass masks
    correctly), so fast-path eval disagrees with the reference path exactly where batches are
    ragged.

    Imitates the loss-only chunk step written separately from the gradient step and without
    its `* counted` mask. Seam: runtime.kernels.chunk_loss_sum (wrapped: every row counted)."""
    import torch

    from pvlab.runtime import kernels

    original = kernels.chunk_loss_sum

    def chunk_loss_sum(logits, targets, counted):
        return original(logits, targets, torch.ones_like(counted))   # the defect: padding rows summed

    with plant("fast_eval_loss_scores_padding", swap(kernels, "chunk_loss_sum", chunk_loss_sum)):
        yield


# ---- tenth blind batch (docs/independent-mutants.md, "Tenth batch") ------------------------------


@mutant("fused_loss_statistics_in_bfloat16")
def fused_loss_statistics_in_bfloat16():
    """The fused loss keeps its per-chunk statistics in the compute dtype: on the fast path the
    log-sum-exp, the target logit, the loss sum, the softmax and the 1/n row scale are all bf16
    (8 bits of mantissa) instead of fp32. The loss is off by a few parts per thousand, the logit
    gradient likewise; the reference path (fp32 logits) is untouched.

    Imitates a custom cross-entropy kernel that forgets to upcast its bf16 logits. Seam:
    runtime.kernels.chunk_loss_sum and chunk_loss_and_logit_gradient."""
    from pvlab.runtime import kernels

    original_sum, original_gradient = kernels.chunk_loss_sum, kernels.chunk_loss_and_logit_gradient

    def chunk_loss_sum(logits, targets, counted):
        return original_sum(logits, targets, counted.to(logits.dtype)).to(counted.dtype)   # the defect

    def chunk_loss_and_logit_gradient(logits, targets, counted, row_scale, gradient_dtype):
        loss_sum, gradient = original_gradient(logits, targets, counted.to(logits.dtype), row_scale.to(logits.dtype),
                                               gradient_dtype)                              # the defect
        return loss_sum.to(counted.dtype), gradient

    with plant("fused_loss_statistics_in_bfloat16", swap(kernels, "chunk_loss_sum", chunk_loss_sum),
               swap(kernels, "chunk_loss_and_logit_gradient", chunk_loss_and_logit_gradient)):
        yield
