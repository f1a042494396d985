"""A third blind batch of planted bugs, written from the runtime alone before any kill was measured.

How it was written: by reading pvlab/runtime/*.py (kernels, model, trainer, data, checkpoint,
generate, corpus) and docs/runtime.md, *without* reading the checks (any other module of
pvlab/falsifiers/, contracts/, generated tests) or the records of earlier measurements. The
existing mutants were consulted by name only (and independent_review.py for its format), so
that none of these repeats a planted bug. One bug per seam, aimed at the seams the first two
batches touched least: the fused projections and SwiGLU of the fast path, SDPA's mask
argument, the positions of a padded decode step, the per-chunk gradient of the fused loss,
the trainer's non-finite step skipping, micro-batch splitting and device moves of a batch,
the tied-head check of the loader, temperature sampling, batched generation's padding side
and the corpus digest. Each is a defect a real engineer ships: an off-by-one, a mask cast to
the wrong dtype, a normalisation moved into a loop, a field a helper forgot. Each is live on
the CPU (tests/falsifiers/third_mutant_probes.py shows the small direct call whose answer it
changes) and none raises on every call.

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

import functools
import importlib
import math

from pv.mutation import mutant

from .planting import plant, swap

# ---- the fast path (runtime.kernels) ---------------------------------------------------------------


@mutant("fused_projection_weights_stacked_without_grad")
def fused_projection_weights_stacked_without_grad():
    """The fused Q/K/V and gate/up product stacks its weights (and biases) under no_grad: the
    forward is bit-identical, but the stacked copy is cut from the parameters, so on the fast
    path with fused projections q/k/v/gate/up never receive a gradient (.grad stays None and
    AdamW skips them) while o_proj, down_proj, norms and embeddings still train.

    Imitates wrapping a per-call weight copy in `torch.no_grad()` "so the copy is not recorded"
    (a memory optimisation that also severs autograd). Seam: runtime.kernels.fused_linear_fast."""
    import torch

    from pvlab.runtime import kernels

    def fused_linear_fast(x, weights, biases):
        with torch.no_grad():                                                # the defect
            weight = torch.cat(weights)
            bias = None if all(b is None for b in biases) else torch.cat(
                [b if b is not None else w.new_zeros(w.shape[0]) for w, b in zip(weights, biases)])
        return kernels.linear_fast(x, weight, bias).split([w.shape[0] for w in weights], dim=-1)

    with plant("fused_projection_weights_stacked_without_grad",
               swap(kernels, "fused_linear_fast", fused_linear_fast)):
        yield


@mutant("swiglu_fast_uses_tanh_gelu")
def swiglu_fast_uses_tanh_gelu():
    """The fast path's gated MLP activates the gate with tanh-approximated GELU instead of SiLU
    (GeGLU for SwiGLU). The two curves are close (both ~x for large x, ~0 for very negative x),
    so at small random-init activations the logits barely move; trained weights drift from the
    reference path.

    Imitates an MLP kernel copied from a GeGLU model (Gemma) into a SwiGLU runtime. Seam:
    runtime.kernels.swiglu_fast."""
    import torch.nn.functional as F

    from pvlab.runtime import kernels

    def swiglu_fast(gate, up):
        return F.gelu(gate, approximate="tanh") * up                        # the defect: not F.silu

    with plant("swiglu_fast_uses_tanh_gelu", swap(kernels, "swiglu_fast", swiglu_fast)):
        yield


@mutant("sdpa_boolean_mask_cast_to_float")
def sdpa_boolean_mask_cast_to_float():
    """The fast attention casts an explicit boolean mask to the query dtype before handing it to
    scaled_dot_product_attention. SDPA *adds* a float mask to the scores: allowed keys get +1,
    forbidden keys +0, so nothing is masked at all. Plain causal batches are untouched (no mask
    is passed: is_causal); padded and packed batches on the fast path see padding, other
    documents and the future.

    Imitates `attn_mask=mask.to(q.dtype)` written to silence a dtype complaint. Seam:
    runtime.kernels.attention_fast."""
    import torch.nn.functional as F

    from pvlab.runtime import kernels

    original = kernels.attention_fast

    def attention_fast(q, k, v, mask=None):
        if mask is None:
            return original(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype),   # the defect
                                              enable_gqa=q.shape[1] != k.shape[1])

    with plant("sdpa_boolean_mask_cast_to_float", swap(kernels, "attention_fast", attention_fast)):
        yield


# ---- positions of padded rows (runtime.model) -------------------------------------------------------


@mutant("padded_decode_positions_from_first_columns")
def padded_decode_positions_from_first_columns():
    """For a left-padded batch, the positions of the T new tokens are taken from the *first* T
    columns of the attention mask's positions instead of the last T. The prefill (T = S) is
    right; every decode step after it gives the new token the position of column 0 (0 for every
    row), so batched generation with a KV cache rotates each new token as if it were first.

    Imitates `[:, :seq]` written for `[:, -seq:]`. Seam: runtime.model.attention_layout."""
    from pvlab.runtime import kernels, model
    from pvlab.runtime.errors import ArgumentError

    def attention_layout(input_ids, *, attention_mask=None, document_ids=None):
        if attention_mask is not None and document_ids is not None:
            raise ArgumentError("give attention_mask (padded batch) or document_ids (packed batch), not both")
        seq = input_ids.shape[1]
        if attention_mask is not None:
            if attention_mask.dim() != 2 or attention_mask.shape[0] != input_ids.shape[0] \
                    or attention_mask.shape[1] < seq:
                raise ArgumentError(f"attention_mask must be (batch, cached + new) = ({input_ids.shape[0]}, "
                                    f">= {seq}), got {tuple(attention_mask.shape)}")
            positions = kernels.positions_from_attention_mask(attention_mask)[:, :seq]     # the defect
            return positions, kernels.padded_causal_mask(attention_mask, seq)
        if document_ids is not None:
            if document_ids.shape != input_ids.shape:
                raise ArgumentError(f"document_ids must have the shape of input_ids {tuple(input_ids.shape)}, "
                                    f"got {tuple(document_ids.shape)}")
            return kernels.document_positions(document_ids), kernels.document_causal_mask(document_ids)
        return None, None

    with plant("padded_decode_positions_from_first_columns", swap(model, "attention_layout", attention_layout)):
        yield


# ---- the fused loss (runtime.kernels) ---------------------------------------------------------------


@mutant("fused_loss_gradient_normalised_per_chunk")
def fused_loss_gradient_normalised_per_chunk():
    """Each chunk of the fused linear cross-entropy scales its logit gradient by 1 / (the
    chunk's own counted tokens) instead of 1 / (all counted tokens): the loss value is exact,
    the gradient is the sum of per-chunk means (about n_chunks times too large, and tokens of a
    mostly padded chunk weigh more). With a single chunk (a small vocabulary's default chunk
    size) it is exact, so it only shows where the batch spans several chunks.

    Imitates a normalisation moved inside the chunk loop during a refactor. Seam:
    runtime.kernels.chunk_loss_and_logit_gradient."""
    from pvlab.runtime import kernels

    original = kernels.chunk_loss_and_logit_gradient

    def chunk_loss_and_logit_gradient(logits, targets, counted, row_scale, gradient_dtype):
        row_scale = counted / counted.sum().clamp(min=1)                     # the defect: this chunk's count
        return original(logits, targets, counted, row_scale, gradient_dtype)

    with plant("fused_loss_gradient_normalised_per_chunk",
               swap(kernels, "chunk_loss_and_logit_gradient", chunk_loss_and_logit_gradient)):
        yield


# ---- the trainer (runtime.trainer) ------------------------------------------------------------------


@mutant("nonfinite_loss_step_still_applied")
def nonfinite_loss_step_still_applied():
    """A non-finite loss is counted in nonfinite_losses and its grad norm reported as NaN, but
    the step is not skipped: on the host-skipping optimizers (the reference path) the NaN
    gradients are clipped and applied, turning every parameter NaN; where the optimizer skips
    on the device the update is dropped but the step counter (and the schedule) advance.

    Imitates a guard that logs the bad step and falls through to the update (a missing
    `return False`). Seam: runtime.trainer.Trainer._read_step."""
    import torch

    from pvlab.runtime.errors import ArgumentError
    from pvlab.runtime.trainer import Trainer

    def _read_step(self, loss_total, total_norm, step_tokens):
        device = loss_total.device
        loss_value, norm_value, tokens = torch.stack([loss_total.double(), total_norm.to(device).double(),
                                                      step_tokens.to(device).double()]).tolist()
        if tokens == 0:
            raise ArgumentError("train_step was given no target tokens")
        self.last_loss = loss_value
        if not math.isfinite(loss_value):
            self.nonfinite_losses += 1
            self.last_grad_norm = float("nan")
            return True                                                      # the defect: applied anyway
        self.last_grad_norm = norm_value
        return True

    with plant("nonfinite_loss_step_still_applied", swap(Trainer, "_read_step", _read_step)):
        yield


# ---- batches (runtime.data) -------------------------------------------------------------------------


@mutant("micro_batch_split_drops_last_column")
def micro_batch_split_drops_last_column():
    """LMBatch.split cuts each micro-batch to the index of its last counted column instead of
    that index + 1: the last target of the micro-batch's longest rows (of every full-width
    row) is dropped, so an accumulated step trains on fewer tokens than the batch holds and its
    loss differs from the one-pass loss.

    Imitates using the largest column index as a width (off by one). Seam:
    runtime.data.LMBatch.split."""
    from pvlab.runtime import data
    from pvlab.runtime.data import LMBatch

    def split(self, rows):
        if rows <= 0:
            raise data.DataError(f"micro-batch size must be positive, got {rows}")
        parts = []
        for start in range(0, self.inputs.shape[0], rows):
            targets = self.targets[start:start + rows]
            counted_columns = (targets != data.IGNORE_INDEX).any(dim=0).nonzero()
            width = max(1, int(counted_columns.max())) if counted_columns.numel() else 1   # the defect: no + 1
            documents = None if self.document_ids is None else self.document_ids[start:start + rows, :width]
            parts.append(LMBatch(self.inputs[start:start + rows, :width].contiguous(),
                                 targets[:, :width].contiguous(),
                                 None if documents is None else documents.contiguous()))
        return parts

    with plant("micro_batch_split_drops_last_column", swap(LMBatch, "split", split)):
        yield


@mutant("batch_to_device_drops_document_ids")
def batch_to_device_drops_document_ids():
    """LMBatch.to moves inputs and targets but not document_ids, which it leaves out: every
    packed batch that goes through the trainer (train_step and eval_batch move batches, even to
    the CPU) is trained as a plain causal batch, attending across document boundaries with
    positions that do not restart.

    Imitates a dataclass field added after its device-moving helper was written. Seam:
    runtime.data.LMBatch.to."""
    from pvlab.runtime.data import LMBatch

    def to(self, device):
        return LMBatch(self.inputs.to(device), self.targets.to(device))     # the defect: document_ids lost

    with plant("batch_to_device_drops_document_ids", swap(LMBatch, "to", to)):
        yield


# ---- checkpoint I/O (runtime.checkpoint) ------------------------------------------------------------


@mutant("tied_checkpoint_conflicting_head_accepted")
def tied_checkpoint_conflicting_head_accepted():
    """A tied checkpoint (tie_word_embeddings=true) that also stores an lm_head.weight different
    from its embedding is loaded without complaint: the stored head is listed as ignored and
    silently discarded, so the model answers with the embedding as its head, not with the head
    the file was trained with.

    Imitates treating every tolerated tensor as ignorable without checking that it is redundant.
    Seam: runtime.checkpoint.populate."""
    from pvlab.runtime import checkpoint

    def populate(model, tensors, plan):
        parameters = dict(model.named_parameters())
        copied = []
        for name in plan.found:
            value = tensors[name]
            checkpoint.copy_tensor(parameters[name], value() if callable(value) else value)
            copied.append(name)
        unfilled = sorted(set(parameters) - set(copied))
        report = checkpoint.PopulateReport(expected=plan.expected, found=tuple(copied),
                                           missing=plan.missing + tuple(unfilled), extra=plan.extra,
                                           mismatched=plan.mismatched, ignored=plan.ignored, source=plan.source)
        checkpoint._refuse_unless_complete(report)
        return report                                                        # the defect: no redundancy check

    with plant("tied_checkpoint_conflicting_head_accepted", swap(checkpoint, "populate", populate)):
        yield


# ---- generation (runtime.kernels, runtime.generate) -------------------------------------------------


@mutant("sampling_temperature_multiplies_logits")
def sampling_temperature_multiplies_logits():
    """Sampling multiplies the logits by the temperature instead of dividing: at temperature 1
    nothing changes, below 1 the distribution is flattened instead of sharpened (0.2 samples
    almost uniformly), above 1 it is sharpened. Greedy decoding (temperature 0) is untouched.

    Imitates `logits * temperature` for `logits / temperature` (an inverse temperature beta
    mistaken for T). Seam: runtime.kernels.sample_pick."""
    import torch

    from pvlab.runtime import kernels

    def sample_pick(logits, temperature, generator, top_k=None):
        scaled = logits.float() * temperature                                # the defect
        if top_k is not None and top_k < scaled.shape[-1]:
            kth_best = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
            scaled = scaled.masked_fill(scaled < kth_best, float("-inf"))
        probabilities = kernels.softmax_reference(scaled)
        return torch.multinomial(probabilities, num_samples=1, generator=generator).squeeze(-1)

    with plant("sampling_temperature_multiplies_logits", swap(kernels, "sample_pick", sample_pick)):
        yield


@mutant("batched_prompts_right_padded")
def batched_prompts_right_padded():
    """generate_batch pads shorter prompts on the right (mask 1...1 0...0) instead of the left.
    The attention mask still hides the padding keys, but the first new token of every shorter
    row is read from the logits of its last *padding* position, so it continues from a pad,
    not from the prompt; rows of the longest length are unaffected.

    Imitates a tokenizer's default padding_side="right" used for decoder-only batch generation.
    Seam: runtime.generate.generate_batch (and its re-export pvlab.runtime.generate_batch)."""
    import torch

    package, module = importlib.import_module("pvlab.runtime"), importlib.import_module("pvlab.runtime.generate")
    original = module.generate_batch

    @functools.wraps(original)
    @torch.no_grad()
    def generate_batch(model, prompts, *, max_new_tokens, temperature=0.0, top_k=None, seed=0,
                       eos_token_id=None, pad_token_id=0, output_logits=False):
        rows = [[int(t) for t in prompt] for prompt in prompts]
        if not rows:
            raise module.GenerationError("no prompts to generate from")
        for prompt in rows:
            module._check_request(model, prompt, max_new_tokens, temperature)
        was_training = model.training
        model.eval()
        device = model.device
        generator = torch.Generator(device=device).manual_seed(seed) if temperature > 0 else None
        width = max(len(prompt) for prompt in rows)
        step_input = torch.tensor([p + [pad_token_id] * (width - len(p)) for p in rows], device=device)  # the defect
        attention_mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in rows], device=device)
        results = [module.Generation(prompt_ids=prompt) for prompt in rows]
        kept = [[] for _ in rows]
        active = [True] * len(rows)
        cache = module.KVCache(model.config.num_hidden_layers)
        try:
            for _ in range(max_new_tokens):
                logits = model(step_input, cache, attention_mask=attention_mask)
                next_tokens = module.kernels.pick_next_token(logits[:, -1, :], temperature, generator, top_k)
                for row, token in enumerate(next_tokens.tolist()):
                    if not active[row]:
                        continue
                    results[row].new_ids.append(int(token))
                    if output_logits:
                        kept[row].append(logits[row, -1].detach().to("cpu"))
                    if eos_token_id is not None and token == eos_token_id:
                        results[row].stopped_on_eos = True
                        active[row] = False
                if not any(active):
                    break
                still = torch.tensor(active, device=device)
                step_input = torch.where(still, next_tokens, torch.full_like(next_tokens, pad_token_id))[:, None]
                attention_mask = torch.cat((attention_mask, still.long()[:, None]), dim=1)
        finally:
            model.train(was_training)
        if output_logits:
            for result, rows_logits in zip(results, kept):
                result.logits = torch.stack(rows_logits) if rows_logits else torch.empty(0, model.config.vocab_size)
        return results

    with plant("batched_prompts_right_padded", swap(module, "generate_batch", generate_batch),
               swap(package, "generate_batch", generate_batch)):
        yield


# ---- the real-text corpus (runtime.corpus) ----------------------------------------------------------


@mutant("corpus_digest_ignores_paths")
def corpus_digest_ignores_paths():
    """Corpus.digest hashes the files' bytes only, not their relative paths (nor a separator
    between files): a corpus whose files were renamed or moved keeps its digest although the
    held-out split (which ranks files by path) is a different one, so a recipe's
    expected_digest no longer proves its split can be rebuilt.

    Imitates a content hash that treats names as irrelevant metadata. Seam:
    runtime.corpus.Corpus.digest."""
    import hashlib

    from pvlab.runtime import corpus

    def digest(self):
        hasher = hashlib.sha256()
        for source in self.files:
            hasher.update(source.text.encode("utf-8"))                        # the defect: no path, no length
        return hasher.hexdigest()

    with plant("corpus_digest_ignores_paths", swap(corpus.Corpus, "digest", property(digest))):
        yield
