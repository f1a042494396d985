"""Planted bugs in nanotrainer, each the kind a GPT trainer really ships with. Each patches one
function of nanotrainer on entry and restores it on exit; `pv strength` runs the pack's
falsifiers under the bugs they declare and expects them to FAIL (killed).

The adapter calls nanotrainer through its modules (`model.fused_qkv`, `train.lr_at`, ...) at
call time, so one swap here reaches every caller."""

from __future__ import annotations

import contextlib

from pv.mutation import mutant

import nanotrainer.model
import nanotrainer.train


@contextlib.contextmanager
def _swapped(owner, name: str, new):
    original = getattr(owner, name)
    setattr(owner, name, new)
    try:
        yield
    finally:
        setattr(owner, name, original)


@mutant("nano_fused_qkv_drops_bias")
def nano_fused_qkv_drops_bias():
    """The fast path's fused QKV matmul concatenates the weights but forgets the biases: the
    reference path (three nn.Linear) keeps them. Imitates the CUDA forward that dropped Qwen's
    Q/K/V biases. Seam: nanotrainer.model.fused_qkv (fast path only)."""
    import torch
    import torch.nn.functional as F

    def fused_qkv(x, attn):
        return F.linear(x, torch.cat([attn.q.weight, attn.k.weight, attn.v.weight]))

    with _swapped(nanotrainer.model, "fused_qkv", fused_qkv):
        yield


@mutant("nano_fast_attention_not_causal")
def nano_fast_attention_not_causal():
    """The fast path calls scaled_dot_product_attention without is_causal: every position sees
    the future, the reference path's explicit mask does not. Imitates a fast path that diverges
    from the reference. Seam: nanotrainer.model.fast_attention."""
    import torch.nn.functional as F

    def fast_attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    with _swapped(nanotrainer.model, "fast_attention", fast_attention):
        yield


@mutant("nano_evaluate_averages_batch_means")
def nano_evaluate_averages_batch_means():
    """evaluate() averages each batch's mean loss: a short or padded batch weighs as much as a
    full one. Imitates `sum(losses) / len(losses)` for a token-weighted mean.
    Seam: nanotrainer.train.evaluate."""
    import torch

    @torch.no_grad()
    def evaluate(model, batches):
        model.eval()
        losses = [model.loss(ids, labels).item() for ids, labels in batches]
        return sum(losses) / len(losses)

    with _swapped(nanotrainer.train, "evaluate", evaluate):
        yield


@mutant("nano_warmup_never_warms")
def nano_warmup_never_warms():
    """Warmup written with integer division, lr * (step // warmup_steps): the learning rate is 0
    for every warmup step and then jumps to the peak. Imitates a warmup that never warms.
    Seam: nanotrainer.train.lr_at."""
    original = nanotrainer.train.lr_at

    def lr_at(step, tc):
        if step < tc.warmup_steps:
            return tc.lr * (step // tc.warmup_steps)
        return original(step, tc)

    with _swapped(nanotrainer.train, "lr_at", lr_at):
        yield
