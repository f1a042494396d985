"""Planted bugs of runtime.model: CausalLM's forward and loss, the final norm.

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

import weakref

from pv.mutation import mutant

from .planting import plant, swap


@mutant("final_norm_skipped")
def final_norm_skipped():
    """The RMSNorm between the last decoder layer and the output head is skipped: the head sees
    the raw residual stream.

    Imitates the seed defect "final norm skipped". Seam: runtime.model.apply_final_norm."""
    from pvlab.runtime import model

    def apply_final_norm(norm, hidden):
        return hidden

    with plant("final_norm_skipped", swap(model, "apply_final_norm", apply_final_norm)):
        yield


@mutant("eval_reads_stale_train_buffer")
def eval_reads_stale_train_buffer():
    """Eval reads a loss workspace that the last training step wrote instead of its own forward:
    after any training step, an eval-mode loss is the cross-entropy of training's leftover
    (one-hot) logit buffer against training's leftover targets — nearly zero, whatever the
    model and the eval batch. Before the first training step eval is correct.

    Imitates the bug hunt's eval path that reported val_loss 0.0008 (perplexity 1.0008) next to
    train_loss 1.20 at the same model state. Seam: runtime.model.CausalLM.loss (train mode with
    gradients = training; anything else = eval, which Trainer.eval_batch / evaluate use)."""
    import torch

    from pvlab.runtime import kernels
    from pvlab.runtime.model import CausalLM

    original = CausalLM.loss
    workspace: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def loss(self, input_ids, targets):
        if self.training and torch.is_grad_enabled():
            workspace[self] = targets.detach().clone()
            return original(self, input_ids, targets)
        stale = workspace.get(self)
        if stale is None:
            return original(self, input_ids, targets)
        buffer = torch.nn.functional.one_hot(stale.clamp(min=0), self.config.vocab_size).float() * 16.0
        return kernels.cross_entropy_reference(buffer, stale).to(targets.device)

    with plant("eval_reads_stale_train_buffer", swap(CausalLM, "loss", loss)):
        yield


@mutant("head_padded_rows_unmasked")
def head_padded_rows_unmasked():
    """The output head is padded for kernel efficiency (V rounded up to a multiple of 128, plus
    128 when V already is one) and the padding rows — never trained, holding leftover values —
    are not cut off: the model returns V + P logits and the argmax lands in the padding.

    Imitates "the head has the wrong output width" (vocabulary padding leaking into the logits).
    Seam: runtime.model.CausalLM.forward (the logits; the training loss is untouched)."""
    import torch

    from pvlab.runtime import kernels
    from pvlab.runtime.model import CausalLM

    padding: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def rows(model):
        if model not in padding:
            vocab, hidden = model.config.vocab_size, model.config.hidden_size
            extra = 128 - vocab % 128 if vocab % 128 else 128
            generator = torch.Generator(device="cpu").manual_seed(128)
            padding[model] = torch.randn((extra, hidden), generator=generator)
        return padding[model].to(model.device)

    def forward(self, input_ids, cache=None):
        with kernels.autocast_for(self.path, self.device.type):
            hidden = self.model(input_ids, cache)
            logits = self.lm_head(hidden)
            padded = torch.matmul(hidden, rows(self).to(hidden.dtype).t())
            logits = torch.cat((logits, padded.to(logits.dtype)), dim=-1)
        return logits.float()

    with plant("head_padded_rows_unmasked", swap(CausalLM, "forward", forward)):
        yield



@mutant("final_norm_outputs_zeros")
def final_norm_outputs_zeros():
    """The final norm returns zeros: every logit is 0 whatever the input, a constant uniform
    distribution over the vocabulary.

    Imitates a forward that "runs" and returns finite numbers that carry no information (a
    zeroed buffer handed to the head). Seam: runtime.model.apply_final_norm."""
    from pvlab.runtime import model

    def apply_final_norm(norm, hidden):
        return hidden * 0

    with plant("final_norm_outputs_zeros", swap(model, "apply_final_norm", apply_final_norm)):
        yield


@mutant("init_weights_unseeded")
def init_weights_unseeded():
    """Random initialisation ignores its seed and draws from the operating system's entropy: two
    runs with the same seed start from different weights.

    Imitates "unseeded randomness in the initialisation" (INV-TRAIN-003). Seam:
    runtime.model.init_weights (which init_model looks up at call time)."""
    import os

    from pvlab.runtime import model

    original = model.init_weights

    def init_weights(module, seed):
        return original(module, int.from_bytes(os.urandom(4), "little"))

    with plant("init_weights_unseeded", swap(model, "init_weights", init_weights)):
        yield


# ---- third blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/independent-mutants.md, "Third batch"; probes in tests/falsifiers/third_mutant_probes.py)


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


@mutant("batched_prompts_right_padded")
def batched_prompts_right_padded():
    """generate_batch pads shorter prompts on the right (mask 1...1 0...0) instead of the left.
    The attention mask still hides the padding keys, but the first new token of every shorter
    row is read from the logits of its last *padding* position, so it continues from a pad,
    not from the prompt; rows of the longest length are unaffected.

    Imitates a tokenizer's default padding_side="right" used for decoder-only batch generation.
    Seam: runtime.generate.generate_batch (and its re-export pvlab.runtime.generate_batch)."""
    import functools
    import importlib
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


# ---- fourth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Fourth blind batch"; probes in tests/falsifiers/fourth_mutant_probes.py)


@mutant("rope_rotates_cached_keys_at_newest_position")
def rope_rotates_cached_keys_at_newest_position():
    """The keys are rotated *after* the KV cache: the cache stores them unrotated, and the keys
    it hands back (the cached ones and the new ones) are all rotated with the angles of the
    step's newest position. Without a cache (training, eval, a forward over the whole sequence)
    and for a prompt that fills an empty KVCache nothing changes; from the first decoded token
    on, every key carries the query's own angle, so attention during decoding no longer sees
    where any token stands (greedy decoding drifts from the uncached forward). The static cache
    of runtime.graph_decode hands back its whole buffer, so there the prompt is hit too.

    Imitates moving `apply_rope(k)` below `cache.update(...)` in a hand-written decoder (the
    cache then holds raw keys, rotated again at each step with the current position only).
    Seam: runtime.model.Attention.forward (both paths)."""
    from pvlab.runtime import kernels, model

    def forward(self, x, cos, sin, cache=None, mask=None):
        batch, seq, _ = x.shape
        if self.path == "fast" and self.fused_projections:
            q, k, v = kernels.fused_linear_fast(x, [self.q_proj.weight, self.k_proj.weight, self.v_proj.weight],
                                                [self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q = kernels.apply_rope(q, cos, sin)
        if cache is not None:
            k, v = cache.update(self.layer_index, k, v)                     # the defect: raw keys cached
        if k.shape[-2] != cos.shape[-2]:                                    # keys from before this step:
            cos, sin = cos[..., -1:, :], sin[..., -1:, :]                   # all take the newest angle
        k = kernels.apply_rope(k, cos, sin)
        if self.path == "fast":
            y = self._attend_fast(q, k, v, mask)
        elif mask is None:
            y = kernels.attention_reference(q, k, v)
        else:
            y = kernels.attention_reference(q, k, v, mask)
        y = y.transpose(1, 2).reshape(batch, seq, self.num_heads * self.head_dim)
        return self.o_proj(y)

    with plant("rope_rotates_cached_keys_at_newest_position", swap(model.Attention, "forward", forward)):
        yield


# ---- fifth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Fifth blind batch"; probes in tests/falsifiers/fifth_mutant_probes.py)


@mutant("batch_generation_stops_at_first_eos")
def batch_generation_stops_at_first_eos():
    """generate_batch ends the whole batch as soon as any row emits eos_token_id, instead of
    when every row has: the row that finished is right, every other row is cut short at that
    step (its Generation has fewer tokens and stopped_on_eos False, as if max_new_tokens had
    been reached). A batch of one, or one in which no row meets eos, is unaffected.

    Imitates the batched stop test written as "any row done" (`if eos in next_tokens: break`)
    where "all rows done" is meant. Seams: runtime.generate.generate_batch and its re-export
    pvlab.runtime.generate_batch. The original runs and its result is cut where the defective
    loop would have stopped: every step before the first eos is the same in both loops."""
    import functools
    import importlib

    package, module = importlib.import_module("pvlab.runtime"), importlib.import_module("pvlab.runtime.generate")
    original = module.generate_batch

    @functools.wraps(original)
    def generate_batch(model, prompts, **kwargs):
        results = original(model, prompts, **kwargs)
        stops = [len(r.new_ids) for r in results if r.stopped_on_eos]
        if not stops:
            return results
        first = min(stops)   # the step at which the first row emitted eos: the defective loop breaks there
        for result in results:
            result.stopped_on_eos = result.stopped_on_eos and len(result.new_ids) == first
            result.new_ids = result.new_ids[:first]
            if result.logits is not None:
                result.logits = result.logits[:first]
        return results

    with plant("batch_generation_stops_at_first_eos", swap(module, "generate_batch", generate_batch),
               swap(package, "generate_batch", generate_batch)):
        yield


# ---- sixth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Sixth blind batch"; probes in tests/falsifiers/sixth_mutant_probes.py)


@mutant("batch_sampling_ignores_top_k")
def batch_sampling_ignores_top_k():
    """generate_batch accepts top_k and never uses it: sampled batched decoding (temperature > 0)
    draws from the whole vocabulary instead of the k most likely tokens, so generate_batch and
    generate_texts sample tokens outside the top k that generate() (one prompt) never would.
    Greedy decoding (temperature 0) is unaffected.

    Imitates a keyword accepted by the batched entry point and not passed on to
    kernels.pick_next_token. Seams: runtime.generate.generate_batch and its re-export
    pvlab.runtime.generate_batch (wrapped: top_k dropped)."""
    import functools
    import importlib

    package, module = importlib.import_module("pvlab.runtime"), importlib.import_module("pvlab.runtime.generate")
    original = module.generate_batch

    @functools.wraps(original)
    def generate_batch(model, prompts, **kwargs):
        kwargs.pop("top_k", None)   # the defect: top_k never reaches the sampler
        return original(model, prompts, **kwargs)

    with plant("batch_sampling_ignores_top_k", swap(module, "generate_batch", generate_batch),
               swap(package, "generate_batch", generate_batch)):
        yield


@mutant("batch_text_generation_ignores_stop_at_eos")
def batch_text_generation_ignores_stop_at_eos():
    """generate_texts(..., stop_at_eos=False) still stops each prompt at the model's eos id (and
    drops it from the text): a caller who asks for the full max_new_tokens continuation (to
    measure what follows end-of-text, or for a model whose eos is an ordinary token) gets texts
    cut short, while generate_text with the same arguments does not stop. stop_at_eos=True (the
    default) is unaffected.

    Imitates the batched variant passing eos_token_id=model.config.eos_token_id unconditionally.
    Seams: runtime.generate.generate_texts and its re-export pvlab.runtime.generate_texts
    (wrapped: stop_at_eos forced on)."""
    import functools
    import importlib

    package, module = importlib.import_module("pvlab.runtime"), importlib.import_module("pvlab.runtime.generate")
    original = module.generate_texts

    @functools.wraps(original)
    def generate_texts(model, tokenizer, prompts, **kwargs):
        kwargs["stop_at_eos"] = True   # the defect: the caller's choice is not honoured
        return original(model, tokenizer, prompts, **kwargs)

    with plant("batch_text_generation_ignores_stop_at_eos", swap(module, "generate_texts", generate_texts),
               swap(package, "generate_texts", generate_texts)):
        yield


# ---- eighth blind batch ----
# Written from pvlab/runtime and docs/runtime.md alone, before any kill was measured (docs/mutants.md,
# "Eighth blind batch"; probes in tests/falsifiers/eighth_mutant_probes.py).


@mutant("init_std_from_hidden_size")
def init_std_from_hidden_size():
    """Random initialisation draws every matrix (embedding, projections, an untied head) from
    N(0, 1/sqrt(hidden_size)) instead of N(0, initializer_range): 0.125 instead of 0.02 for the
    tiny preset, 0.033 for qwen2-0.5b. Norms (ones) and biases (zeros) are unchanged; the draws
    come from the same seeded generator, so the model is still deterministic and trains.

    Imitates a fan-in ("1/sqrt(d_model)") init carried over from another codebase in place of
    transformers' initializer_range. Quiet: the model trains to a similar loss, only the start
    (step-0 loss, early curve) differs. Seam: runtime.model.init_weights (wrapped: matrices rescaled)."""
    import torch

    from pvlab.runtime import model as models

    original = models.init_weights

    def init_weights(model, seed):
        original(model, seed)
        factor = model.config.hidden_size ** -0.5 / model.config.initializer_range
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if not (name.endswith("norm.weight") or name.endswith(".bias")):
                    parameter.mul_(factor)   # the defect: std 1/sqrt(C), not initializer_range

    with plant("init_std_from_hidden_size", swap(models, "init_weights", init_weights)):
        yield


@mutant("generated_text_drops_last_token")
def generated_text_drops_last_token():
    """generate_text (and `run` with one --prompt) always drops the last generated token from
    the text, not only when decoding stopped on the eos id: a continuation that ran to
    max_new_tokens comes back one token short (and max_new_tokens=1 adds nothing). Stopped on
    eos, the text is right. generate() and its token ids are unaffected.

    Imitates stripping the eos with `new_ids[:-1]` without checking `stopped_on_eos`. Quiet: the
    text is still a plausible continuation. Seams: runtime.generate.generate_text and its
    re-export pvlab.runtime.generate_text (wrapped: the original runs with every generation
    reported as stopped on eos, so it strips the last token whatever happened)."""
    import dataclasses
    import importlib

    package, module = importlib.import_module("pvlab.runtime"), importlib.import_module("pvlab.runtime.generate")
    original = module.generate_text

    def generate_text(*args, **kwargs):
        real = module.generate

        def generate(*a, **k):
            return dataclasses.replace(real(*a, **k), stopped_on_eos=True)   # the defect: always "stopped"

        module.generate = generate
        try:
            return original(*args, **kwargs)
        finally:
            module.generate = real

    with plant("generated_text_drops_last_token", swap(module, "generate_text", generate_text),
               swap(package, "generate_text", generate_text)):
        yield


# ---- ninth blind batch ----
# Written from pvlab/runtime and docs/runtime.md alone, before any kill was measured (docs/mutants.md,
# "Ninth blind batch"; probes in tests/falsifiers/ninth_mutant_probes.py).


@mutant("generation_runs_past_context")
def generation_runs_past_context():
    """The generation request check compares max_new_tokens with the context on its own instead
    of prompt + max_new_tokens: a prompt that fits leaves room for up to a whole context of new
    tokens, and decoding goes on past max_position_embeddings (RoPE angles are computed for any
    position, so nothing breaks) instead of raising PromptTooLongError. A prompt longer than the
    context is still refused, as are empty prompts, bad ids and negative settings.

    Imitates checking each argument against the limit separately ("the prompt fits, the number of
    new tokens fits"). Quiet: no exception, no NaN, plausible tokens; only a request that should be
    refused is served, at positions the model never trained on. Seam:
    runtime.generate._check_request (wrapped: the prompt + max_new_tokens check replaced)."""
    import importlib

    from pvlab.runtime.errors import PromptTooLongError

    generation = importlib.import_module("pvlab.runtime.generate")   # the module, not the package's generate()

    original = generation._check_request

    def _check_request(model, prompt, max_new_tokens, temperature):
        original(model, prompt, min(max_new_tokens, 0), temperature)   # every check but the sum
        context = model.config.max_position_embeddings
        if max_new_tokens > context:   # the defect: new tokens against the context alone
            raise PromptTooLongError(f"max_new_tokens ({max_new_tokens}) exceeds the model's context of {context}")

    with plant("generation_runs_past_context", swap(generation, "_check_request", _check_request)):
        yield


# ---- independent rows (contract independent-rows)


@mutant("fast_attention_joins_rows_into_one_sequence")
def fast_attention_joins_rows_into_one_sequence():
    """The fast path's causal attention runs a batch's rows as one sequence, laid end to end, in
    one kernel call, with the causal mask of that long sequence and no block mask per row: each
    query of row b attends to every token of rows 0..b-1 as well as to its own prefix. Row 0 is
    right; a batch of one row, every padded or packed batch (they carry a mask) and decoding
    with a cache are untouched.

    Imitates "packing" a batch into one sequence to call a variable-length kernel once, with the
    per-row boundaries (cu_seqlens, a document mask) left out. Quiet: no error, no NaN, logits of
    the right shape; only rows after the first are conditioned on text they never saw. Seam:
    runtime.model.Attention._attend_fast (wrapped)."""
    from pvlab.runtime import model

    original = model.Attention._attend_fast

    def _attend_fast(self, q, k, v, mask):
        batch, heads, seq, dim = q.shape
        if mask is not None or batch == 1 or k.shape[-2] != seq:
            return original(self, q, k, v, mask)

        def joined(t):                                                  # (B, h, T, D) -> (1, h, B*T, D)
            return t.transpose(0, 1).reshape(1, t.shape[1], batch * seq, dim)

        y = original(self, joined(q), joined(k), joined(v), None)       # the defect: no per-row mask
        return y.reshape(heads, batch, seq, dim).transpose(0, 1)        # (B, H, T, D)

    with plant("fast_attention_joins_rows_into_one_sequence", swap(model.Attention, "_attend_fast", _attend_fast)):
        yield


# ---- twelfth blind batch ----
# Written from pvlab/runtime and docs/runtime.md alone, before any kill was measured
# (docs/independent-mutants.md, "Twelfth batch"; probes in tests/falsifiers/twelfth_mutant_probes.py).


@mutant("padded_positions_start_at_one")
def padded_positions_start_at_one():
    """The positions of a left-padded batch count real tokens from 1, not 0: every row of a
    batched generation runs one position later than it would alone (its first real token
    rotated as position 1), padded or not. Unpadded single-sequence calls are right.

    Imitates the cumulative sum of the attention mask used as the position without its `- 1`.
    Seam: runtime.kernels.positions_from_attention_mask."""
    from pvlab.runtime import kernels

    def positions_from_attention_mask(attention_mask):
        return attention_mask.long().cumsum(dim=-1).clamp(min=0)   # the defect: no - 1

    with plant("padded_positions_start_at_one",
               swap(kernels, "positions_from_attention_mask", positions_from_attention_mask)):
        yield
