"""Planted bugs that break a training or decoding equivalence the field has already paid for:
gradient accumulation, sequence packing, tied embeddings, left-padded batched generation, the
compiled training path and fused attention backends (contracts gradient-accumulation,
sequence-packing, tied-embeddings, batched-generation, compiled-training, attention-backends).

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

import contextlib

from pv.mutation import mutant

from .planting import plant, swap


@mutant("accumulation_averages_micro_batch_means")
def accumulation_averages_micro_batch_means():
    """Gradient accumulation weights every micro-batch's mean loss by 1 / (number of
    micro-batches) instead of by its share of the step's target tokens: tokens of short or
    heavily padded micro-batches count for more than tokens of long ones.

    Imitates the gradient-accumulation defect transformers fixed in October 2024 (PR #34191):
    the loss was averaged per micro-batch and then over the accumulation steps, so accumulated
    training did not match one big batch. Seam: runtime.trainer.micro_batch_weight."""
    from pvlab.runtime import trainer

    def micro_batch_weight(micro_batch_tokens, step_tokens, num_micro_batches):
        return 1.0 / num_micro_batches

    with plant("accumulation_averages_micro_batch_means", swap(trainer, "micro_batch_weight", micro_batch_weight)):
        yield


@mutant("packing_attends_across_documents")
def packing_attends_across_documents():
    """Packed rows get the plain causal mask: every document attends to the documents packed
    before it in the same row.

    Imitates naive sequence packing without document masks ("cross-contamination"; fixed e.g. in
    torchtune PR #875 and LLaMA-Factory PR #4224). Seam: runtime.kernels.document_causal_mask."""
    from pvlab.runtime import kernels

    def document_causal_mask(document_ids):
        length = document_ids.shape[-1]
        causal = kernels.causal_mask(length, length, document_ids.device)               # (T, T)
        return causal[None, None].expand(document_ids.shape[0], 1, length, length)

    with plant("packing_attends_across_documents", swap(kernels, "document_causal_mask", document_causal_mask)):
        yield


@mutant("packing_positions_do_not_restart")
def packing_positions_do_not_restart():
    """Packed rows keep counting positions across document boundaries: the second document of a
    row is rotated as if it continued the first (the mask still separates them).

    Imitates packing that masks documents but leaves position ids running (torchtune PR #875
    added the restart alongside the mask). Seam: runtime.kernels.document_positions."""
    import torch

    from pvlab.runtime import kernels

    def document_positions(document_ids):
        batch, length = document_ids.shape
        return torch.arange(length, device=document_ids.device).expand(batch, length)

    with plant("packing_positions_do_not_restart", swap(kernels, "document_positions", document_positions)):
        yield


@mutant("tied_head_untied_on_load")
def tied_head_untied_on_load():
    """Loading a checkpoint whose config ties the embeddings gives the head its own copy of the
    embedding: equal values, two tensors, which then train apart while the config still says
    tied (and the next save drops the trained head as redundant).

    Imitates configs that say tied while the tensors are separate after a resume (NVIDIA NeMo
    Automodel PR #2511 / issue #2571: a resumed run silently replaced the trained head). Seam:
    runtime.checkpoint.load (runtime.load and Trainer.resume both go through it)."""
    import torch

    from pvlab.runtime import checkpoint

    original = checkpoint.load

    def load(*args, **kwargs):
        model = original(*args, **kwargs)
        if model.config.tie_word_embeddings:
            model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())
        return model

    with plant("tied_head_untied_on_load", swap(checkpoint, "load", load)):
        yield


@mutant("untied_head_tied_on_load")
def untied_head_tied_on_load():
    """Loading a checkpoint whose config does *not* tie the embeddings makes the head share the
    input embedding anyway: the trained lm_head.weight of the file is discarded.

    Imitates re-tying code that looked at a list of "tied weight keys" instead of the config's
    tie_word_embeddings (NVIDIA NeMo Automodel issue #2941, fixed in PR #2942: untied Nemotron
    checkpoints lost their trained head). Seam: runtime.checkpoint.load."""
    from pvlab.runtime import checkpoint

    original = checkpoint.load

    def load(*args, **kwargs):
        model = original(*args, **kwargs)
        if not model.config.tie_word_embeddings:
            model.lm_head.weight = model.model.embed_tokens.weight
        return model

    with plant("untied_head_tied_on_load", swap(checkpoint, "load", load)):
        yield


@mutant("positions_ignore_attention_mask")
def positions_ignore_attention_mask():
    """In a left-padded batch the newest token of every row takes its position from the cache
    index shared by the batch (S - 1), not from its row's count of real tokens; the earlier
    positions still come from the mask. Rows without padding are unaffected, every padded row's
    newest token is rotated as if the padding were text.

    Imitates batched generation whose decode-step position ids came from the shared cache
    position instead of the attention mask (unsloth issue #3699, fixed in PR #4100: "the longest
    sequence generates correctly", shorter ones produce garbage). Seam:
    runtime.kernels.positions_from_attention_mask."""
    from pvlab.runtime import kernels

    original = kernels.positions_from_attention_mask

    def positions_from_attention_mask(attention_mask):
        positions = original(attention_mask).clone()                                    # (B, S)
        positions[:, -1] = attention_mask.shape[-1] - 1
        return positions

    with plant("positions_ignore_attention_mask",
               swap(kernels, "positions_from_attention_mask", positions_from_attention_mask)):
        yield


@mutant("compiled_layer_branch_scaled")
def compiled_layer_branch_scaled():
    """The compiled decoder layers add their attention + MLP branch to the residual stream
    scaled by 1 + 2^-5 (a compiled whole decoder body returns its hidden states so scaled): a constant folded wrong inside compiled code, an arithmetic change that
    exists only on the compiled path (eager is untouched) and moves forward and backward alike.

    Imitates a compiler that silently changes the arithmetic of a training step (pytorch issue
    #185382: inductor computing an Adam-style addcdiv/addcmul update wrongly; issue #136121:
    fused backward numerics differing from eager). A dtype round trip would not do: inductor
    removes it as a no-op. Seam: runtime.trainer.compile_module."""
    import torch

    from pvlab.runtime import trainer

    def compile_module(module):
        call = module._call_impl

        def scaled(x, *args, **kwargs):
            out = call(x, *args, **kwargs)
            if out.shape != x.shape:  # the whole decoder body (ids in, hidden states out): scale what it returns
                return out * (1 + 2 ** -5)
            return x + (out - x) * (1 + 2 ** -5)

        module._compiled_call_impl = torch.compile(scaled)

    with plant("compiled_layer_branch_scaled", swap(trainer, "compile_module", compile_module)):
        yield


@mutant("fused_attention_backward_transposed")
def fused_attention_backward_transposed():
    """Under any SDPA backend but math, attention's backward returns dK and dV with the head and
    sequence axes swapped ((B, H, S, D) read as (B, S, H, D)); the forward is exact. With as
    many heads as positions the shapes still match.

    Imitates fused-attention backwards that corrupt gradient layouts (diffusers issue #14338:
    the cuDNN attention backward transposed K/V twice and Q once; pytorch PR #141147: cuDNN's
    assumption that the output gradient has the output's strides). Seams:
    runtime.kernels.sdpa_backend (to know the backend) and runtime.kernels.attention_fast."""
    import torch

    from pvlab.runtime import kernels

    original_backend, original_attention = kernels.sdpa_backend, kernels.attention_fast
    fused: list[bool] = []

    @contextlib.contextmanager
    def sdpa_backend(name):
        with original_backend(name):
            fused.append(name not in (None, "math"))
            try:
                yield
            finally:
                fused.pop()

    class TransposedBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            ctx.save_for_backward(q, k, v)
            return original_attention(q, k, v)

        @staticmethod
        def backward(ctx, grad):
            q, k, v = (t.detach().requires_grad_() for t in ctx.saved_tensors)
            with torch.enable_grad():
                dq, dk, dv = torch.autograd.grad(original_attention(q, k, v), (q, k, v), grad)
            if dk.shape[1] == dk.shape[2]:
                dk, dv = dk.transpose(1, 2), dv.transpose(1, 2)
            else:  # shapes differ: the same mix-up, garbled into the available shape
                dk, dv = dk.flip(2), dv.flip(2)
            return dq, dk, dv

    def attention_fast(q, k, v, mask=None):
        if mask is None and fused and fused[-1] and torch.is_grad_enabled():
            return TransposedBackward.apply(q, k, v)
        return original_attention(q, k, v) if mask is None else original_attention(q, k, v, mask)

    with plant("fused_attention_backward_transposed", swap(kernels, "sdpa_backend", sdpa_backend),
               swap(kernels, "attention_fast", attention_fast)):
        yield
