"""A second batch of planted bugs written from the runtime alone, before reading any check.

Issue #12, item 5: falsifiers are judged against bugs nobody on the team has seen. These were
written by reading pvlab/runtime/*.py module by module (model, kernels, config, checkpoint,
trainer, data, corpus, generate, pretrain, cli, zoo, subjects, parity) *without* reading
pvlab/falsifiers/*.py or contracts/, one or more per seam, and committed before any kill was
measured (docs/independent-mutants.md, "Second batch"). Each imitates a defect a real engineer
ships; tests/falsifiers/test_independent_review.py proves every one is live (the patched
function answers differently on a small input).

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

import dataclasses
import math

from pv.mutation import mutant

from .planting import plant, swap

# ---- model assembly (runtime.model) -------------------------------------------------------------


@mutant("attention_heads_merged_without_transpose")
def attention_heads_merged_without_transpose():
    """The attention output (B, H, T, D) is reshaped to (B, T, H*D) without first moving the
    head axis back behind the time axis: heads and positions are scrambled before o_proj
    (shapes still match, so nothing complains; with one position and one head it is harmless).

    Imitates a missing `.transpose(1, 2)` before `.reshape`. Seam: runtime.model.Attention.forward."""
    from pvlab.runtime import kernels, model

    def forward(self, x, cos, sin, cache=None, mask=None):
        batch, seq, _ = x.shape
        q = self.q_proj(x).view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = kernels.apply_rope(q, cos, sin), kernels.apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(self.layer_index, k, v)
        if self.path == "fast":
            y = self._attend_fast(q, k, v, mask)
        else:
            y = kernels.attention_reference(q, k, v) if mask is None else kernels.attention_reference(q, k, v, mask)
        y = y.reshape(batch, seq, self.num_heads * self.head_dim)        # the defect: no transpose(1, 2)
        return self.o_proj(y)

    with plant("attention_heads_merged_without_transpose", swap(model.Attention, "forward", forward)):
        yield


@mutant("kv_cache_length_reads_head_axis")
def kv_cache_length_reads_head_axis():
    """KVCache.length reads the size of axis 1 of the cached keys (the KV heads) instead of the
    sequence axis: after a prefill every decoded token gets position num_key_value_heads + i.

    Imitates `shape[1]` written for `shape[-2]` after the cache layout changed from (B, S, ...)
    to (B, KV, S, D). Seam: runtime.model.KVCache.length."""
    from pvlab.runtime import model

    def length(self):
        return 0 if self.keys[0] is None else self.keys[0].shape[1]

    with plant("kv_cache_length_reads_head_axis", swap(model.KVCache, "length", property(length))):
        yield


@mutant("init_final_norm_drawn_random")
def init_final_norm_drawn_random():
    """Random initialisation recognises norms by the suffix "layernorm.weight": the final
    `model.norm.weight` falls through to normal(0, initializer_range) instead of ones.

    Imitates a name filter written against the per-layer norms only. Seam:
    runtime.model.init_weights."""
    import torch

    from pvlab.runtime import model

    @torch.no_grad()
    def init_weights(causal_lm, seed):
        generator = torch.Generator(device="cpu").manual_seed(seed)
        std = causal_lm.config.initializer_range
        for name, parameter in causal_lm.named_parameters():
            if name.endswith("layernorm.weight"):
                values = torch.ones(parameter.shape)
            elif name.endswith(".bias"):
                values = torch.zeros(parameter.shape)
            else:
                values = torch.empty(parameter.shape).normal_(0.0, std, generator=generator)
            parameter.copy_(values)

    with plant("init_final_norm_drawn_random", swap(model, "init_weights", init_weights)):
        yield


# ---- kernels (runtime.kernels) -------------------------------------------------------------------


@mutant("attention_scaled_by_head_dim")
def attention_scaled_by_head_dim():
    """The reference attention divides Q K^T by D instead of sqrt(D): softmax is flattened.

    Imitates the 1/d scaling of a muP-style recipe applied to a model trained with 1/sqrt(d).
    Seam: runtime.kernels.attention_reference."""
    import torch

    from pvlab.runtime import kernels

    def attention_reference(q, k, v, mask=None):
        groups = q.shape[1] // k.shape[1]
        k, v = kernels.repeat_kv(k, groups), kernels.repeat_kv(v, groups)
        compute = torch.promote_types(q.dtype, torch.float32)
        q, k, v = q.to(compute), k.to(compute), v.to(compute)
        scores = torch.matmul(q, k.transpose(-2, -1)) / q.shape[-1]        # the defect: D, not sqrt(D)
        allowed = kernels.causal_mask(q.shape[-2], k.shape[-2], q.device) if mask is None else mask
        scores = scores.masked_fill(~allowed, float("-inf"))
        return torch.matmul(kernels.softmax_reference(scores), v)

    with plant("attention_scaled_by_head_dim", swap(kernels, "attention_reference", attention_reference)):
        yield


@mutant("padded_mask_lets_queries_see_padding")
def padded_mask_lets_queries_see_padding():
    """The mask of a left-padded batch is only causal: real tokens attend to the padding keys
    before them (the positions still skip padding, so short prompts merely drift).

    Imitates forgetting `& attention_mask` when building the 4-D mask. Seam:
    runtime.kernels.padded_causal_mask."""
    from pvlab.runtime import kernels

    def padded_causal_mask(attention_mask, query_length):
        key_length = attention_mask.shape[-1]
        allowed = kernels.causal_mask(query_length, key_length, attention_mask.device)     # (T, S)
        return allowed[None, None].expand(attention_mask.shape[0], 1, query_length, key_length)

    with plant("padded_mask_lets_queries_see_padding", swap(kernels, "padded_causal_mask", padded_causal_mask)):
        yield


@mutant("chunked_cross_entropy_backward_scores_padding")
def chunked_cross_entropy_backward_scores_padding():
    """The fused loss's value ignores IGNORE_INDEX targets, but its gradients do not mask
    them: every padded position pushes the model towards token 0 (the loss value is right).

    Imitates a hand-written gradient that forgot the mask the loss applies. Seam:
    runtime.kernels._fused_loss_and_gradients (the fast path's loss; its gradients are computed
    in the forward)."""
    from pvlab.runtime import kernels

    original = kernels._fused_loss_and_gradients

    def unmasked(flat_hidden, weight, flat_targets, chunk_tokens, compute_dtype, *, grad_hidden, grad_weight):
        loss, _, _ = original(flat_hidden, weight, flat_targets, chunk_tokens, compute_dtype,
                              grad_hidden=False, grad_weight=False)
        if not (grad_hidden or grad_weight):
            return loss, None, None
        counted = (flat_targets != kernels.IGNORE_INDEX).sum().clamp(min=1)
        _, hidden_gradient, weight_gradient = original(       # the defect: padding scored as token 0
            flat_hidden, weight, flat_targets.clamp(min=0), chunk_tokens, compute_dtype,
            grad_hidden=grad_hidden, grad_weight=grad_weight)
        rescale = flat_targets.shape[0] / counted              # normalised by the real count, as the loss is
        hidden_gradient = None if hidden_gradient is None else hidden_gradient * rescale
        weight_gradient = None if weight_gradient is None else weight_gradient * rescale
        return loss, hidden_gradient, weight_gradient

    with plant("chunked_cross_entropy_backward_scores_padding", swap(kernels, "_fused_loss_and_gradients", unmasked)):
        yield


@mutant("sampling_ignores_seeded_generator")
def sampling_ignores_seeded_generator():
    """Sampling draws from torch's global RNG, not from the generator seeded with `seed`: the
    same seed gives different text from one call to the next (greedy is unaffected).

    Imitates `torch.multinomial(probabilities, 1)` without `generator=`. Seam:
    runtime.kernels.sample_pick."""
    import torch

    from pvlab.runtime import kernels

    def sample_pick(logits, temperature, generator, top_k=None):
        scaled = logits.float() / temperature
        if top_k is not None and top_k < scaled.shape[-1]:
            kth_best = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
            scaled = scaled.masked_fill(scaled < kth_best, float("-inf"))
        return torch.multinomial(kernels.softmax_reference(scaled), num_samples=1).squeeze(-1)

    with plant("sampling_ignores_seeded_generator", swap(kernels, "sample_pick", sample_pick)):
        yield


# ---- configuration (runtime.config) ---------------------------------------------------------------


@mutant("rope_theta_read_from_legacy_key_only")
def rope_theta_read_from_legacy_key_only():
    """config.json's rope_theta is read from the top-level key only, with 10000 as default:
    a config that gives it in rope_parameters alone (transformers >= 5) gets theta 10000.

    Imitates a reader written before rope_parameters existed. Seam:
    runtime.config._read_rope_theta."""
    from pvlab.runtime import config
    from pvlab.runtime.errors import UnsupportedArchitectureError

    def _read_rope_theta(hf, source):
        if hf.get("rope_scaling"):
            raise UnsupportedArchitectureError(f"{source}: rope_scaling {hf['rope_scaling']} is not supported")
        return hf.get("rope_theta", 10000.0)

    with plant("rope_theta_read_from_legacy_key_only", swap(config, "_read_rope_theta", _read_rope_theta)):
        yield


# ---- checkpoint I/O (runtime.checkpoint) ------------------------------------------------------------


@mutant("saved_head_is_embedding_copy")
def saved_head_is_embedding_copy():
    """An untied model is saved with lm_head.weight taken from the embedding: the trained
    output head is lost, and loading succeeds because the shapes agree.

    Imitates a writer that assumes every head is tied. Seam: runtime.checkpoint.model_tensors."""
    from pvlab.runtime import checkpoint

    original = checkpoint.model_tensors

    def model_tensors(model):
        tensors = original(model)
        if "lm_head.weight" in tensors:
            tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
        return tensors

    with plant("saved_head_is_embedding_copy", swap(checkpoint, "model_tensors", model_tensors)):
        yield


# ---- the trainer (runtime.trainer) ------------------------------------------------------------------


@mutant("cosine_progress_ignores_warmup")
def cosine_progress_ignores_warmup():
    """The cosine's progress is step / total_steps, not (step - warmup) / (total - warmup): the
    decay starts below the peak right after warmup and the floor is not reached before the end.

    Imitates a cosine copied from a recipe without warmup. Seam: runtime.trainer.learning_rate."""
    from pvlab.runtime import trainer

    def learning_rate(step, *, peak, warmup_steps, total_steps, min_lr):
        if warmup_steps and step < warmup_steps:
            return peak * (step + 1) / warmup_steps
        if not total_steps or step >= total_steps:
            return peak if not total_steps else min_lr
        progress = step / total_steps                                        # the defect
        return min_lr + 0.5 * (peak - min_lr) * (1 + math.cos(math.pi * progress))

    with plant("cosine_progress_ignores_warmup", swap(trainer, "learning_rate", learning_rate)):
        yield


@mutant("gradients_never_zeroed")
def gradients_never_zeroed():
    """The optimizer's zero_grad does nothing: each step's gradients add to all previous ones.

    Imitates a training loop that lost its `optimizer.zero_grad()` in a refactor. Seam:
    runtime.trainer.build_optimizer."""
    from pvlab.runtime import trainer

    original = trainer.build_optimizer

    def build_optimizer(named_parameters, **kwargs):
        optimizer = original(named_parameters, **kwargs)
        optimizer.zero_grad = lambda set_to_none=True: None
        return optimizer

    with plant("gradients_never_zeroed", swap(trainer, "build_optimizer", build_optimizer)):
        yield


@mutant("evaluate_averages_batch_means")
def evaluate_averages_batch_means():
    """Trainer.evaluate averages the batches' mean losses, so the tokens of a short last batch
    weigh more than the others.

    Imitates `sum(losses) / len(losses)` for a token-weighted mean. Seam:
    runtime.trainer.Trainer.evaluate."""
    from pvlab.runtime.errors import ArgumentError
    from pvlab.runtime.trainer import Trainer

    def evaluate(self, batches):
        losses = [self.eval_batch(batch) for batch in batches if batch.num_target_tokens]
        if not losses:
            raise ArgumentError("evaluate() was given no target tokens")
        return sum(losses) / len(losses)

    with plant("evaluate_averages_batch_means", swap(Trainer, "evaluate", evaluate)):
        yield


# ---- data (runtime.data) ----------------------------------------------------------------------------


@mutant("documents_encoded_without_end_of_text")
def documents_encoded_without_end_of_text():
    """Encoded documents are not terminated by END_OF_TEXT: the token stream runs one file into
    the next and the model never learns where a document ends.

    Imitates dropping the `+ [end]` of encode_documents. Seam: runtime.data.encode_documents."""
    from pvlab.runtime import data

    def encode_documents(tokenizer, documents):
        if tokenizer.token_to_id(data.END_OF_TEXT) is None:
            raise data.DataError(f"tokenizer has no {data.END_OF_TEXT} token")
        return [encoding.ids for encoding in tokenizer.encode_batch(list(documents))]

    with plant("documents_encoded_without_end_of_text", swap(data, "encode_documents", encode_documents)):
        yield


# ---- the real-text corpus (runtime.corpus) ----------------------------------------------------------


@mutant("held_out_threshold_inverted")
def held_out_threshold_inverted():
    """split_by_path holds a file out when its rank is *above* val_fraction: about 95 % of the
    corpus is held out and 5 % trained on (still disjoint, still deterministic).

    Imitates a flipped comparison. Seam: runtime.corpus.split_by_path."""
    import hashlib

    from pvlab.runtime import corpus

    def split_by_path(source_corpus, *, val_fraction, seed):
        if not 0 < val_fraction < 1:
            raise corpus.DataError(f"val_fraction must be in (0, 1), got {val_fraction}")
        unique = {}
        for source in source_corpus.files:
            unique.setdefault(source.text, source)
        files = list(unique.values())
        if len(files) < 2:
            raise corpus.DataError(f"corpus {source_corpus.spec} has {len(files)} distinct file(s)")

        def rank(source):
            return int(hashlib.sha256(f"{seed}:{source.path}".encode()).hexdigest(), 16) / 2 ** 256

        ranked = sorted(files, key=rank)
        held = {s.path for s in ranked if rank(s) >= val_fraction}          # the defect: >= for <
        if not held:
            held = {ranked[0].path}
        elif len(held) == len(files):
            held.discard(ranked[-1].path)
        return [s for s in files if s.path not in held], [s for s in files if s.path in held]

    with plant("held_out_threshold_inverted", swap(corpus, "split_by_path", split_by_path)):
        yield


# ---- generation (runtime.generate) ------------------------------------------------------------------


@mutant("eos_ignored_by_generate")
def eos_ignored_by_generate():
    """generate() never stops at eos_token_id: it always produces max_new_tokens tokens and
    never reports stopped_on_eos (generate_text then keeps the text after the end of text).

    Imitates a stop test comparing against a variable that is always None. Seam:
    runtime.generate.generate (and its re-export pvlab.runtime.generate)."""
    import functools
    import importlib

    package, module = importlib.import_module("pvlab.runtime"), importlib.import_module("pvlab.runtime.generate")
    original = module.generate

    @functools.wraps(original)
    def generate(model, prompt_ids, **kwargs):
        kwargs["eos_token_id"] = None
        return original(model, prompt_ids, **kwargs)

    with plant("eos_ignored_by_generate", swap(module, "generate", generate), swap(package, "generate", generate)):
        yield


# ---- pretraining (runtime.pretrain) -----------------------------------------------------------------


@mutant("train_loss_scored_on_heldout_stream")
def train_loss_scored_on_heldout_stream():
    """The "train_loss" that pretrain reports is computed on the held-out stream: it equals
    val_loss at every eval, so the train/val gap (overfitting) is invisible.

    Imitates a copy-paste of heldout_batches. Seam: runtime.pretrain.PreparedData.train_eval_batches."""
    from pvlab.runtime import data
    from pvlab.runtime.pretrain import PreparedData

    def train_eval_batches(self, recipe):
        return data.sequential_batches(self.heldout_stream, batch_size=recipe.batch_size, seq_len=recipe.seq_len,
                                       max_batches=recipe.eval_batches)

    with plant("train_loss_scored_on_heldout_stream", swap(PreparedData, "train_eval_batches", train_eval_batches)):
        yield


# ---- the command line (runtime.cli) -----------------------------------------------------------------


@mutant("cli_eval_ignores_batches")
def cli_eval_ignores_batches():
    """`python -m pvlab.runtime eval DIR --batches N` accepts N and scores the recipe's number of
    held-out batches anyway (the reported token count betrays it).

    Imitates an option declared on the command but never passed on. Seam: the `eval` command
    of runtime.cli."""
    import functools

    from pvlab.runtime import cli

    command = cli.main.commands["eval"]
    original = command.callback

    @functools.wraps(original)
    def callback(**params):
        return original(**{**params, "batches": None})

    with plant("cli_eval_ignores_batches", swap(command, "callback", callback)):
        yield


# ---- the checkpoint cache (runtime.zoo) -------------------------------------------------------------


@mutant("tiny_random_ignores_seed")
def tiny_random_ignores_seed():
    """zoo.tiny_random(seed=s) builds (and caches) the recipe's own seed whatever s is: every
    "independent random init" is the same model.

    Imitates a keyword accepted and not threaded through. Seam: runtime.zoo.tiny_random."""
    from pvlab.runtime import zoo

    def tiny_random(cache_dir=None, *, seed=0, recipe=zoo.TINY_RECIPE):
        untrained = dataclasses.replace(recipe, steps=0)                    # the defect: seed dropped
        return zoo.build_cached("tiny-random", untrained.digest(), zoo._train(untrained, False), cache_dir)

    with plant("tiny_random_ignores_seed", swap(zoo, "tiny_random", tiny_random)):
        yield


# ---- subjects (runtime.subjects) ----------------------------------------------------------------


@mutant("subject_key_ignores_training_path")
def subject_key_ignores_training_path():
    """A subject's cache key leaves out the device and path it is trained on: a CPU-reference
    build and a CUDA-fast build of one recipe share one cache entry.

    Imitates a key built from the recipe alone. Seam: runtime.subjects.Subject.key."""
    import hashlib
    import json

    from pvlab.runtime import subjects

    def key(self, recipe=None):
        recipe = recipe or self.resolved_recipe()
        payload = json.dumps({"format": subjects.SUBJECT_FORMAT, "recipe": recipe.digest()}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    with plant("subject_key_ignores_training_path", swap(subjects.Subject, "key", key)):
        yield


# ---- the parity gate (runtime.parity) ---------------------------------------------------------------


@mutant("parity_cosine_pooled_over_positions")
def parity_cosine_pooled_over_positions():
    """The parity gate's cosine is taken over all probe positions flattened together instead of
    per position: one diverging position among 32 agreeing ones barely moves it.

    Imitates cosine_similarity on the flattened tensors. Seam: runtime.parity.compare_logits."""
    import torch

    from pvlab.runtime import parity

    def compare_logits(reference, candidate, *, device, path):
        reference, candidate = reference.float().flatten(0, -2), candidate.float().flatten(0, -2)
        cosine = torch.nn.functional.cosine_similarity(reference.flatten(), candidate.flatten(), dim=0)
        agreement = (reference.argmax(-1) == candidate.argmax(-1)).float().mean()
        return parity.ParityReport(device=device, path=path, probe_tokens=reference.shape[0],
                                   min_cosine=float(cosine), max_abs_diff=float((reference - candidate).abs().max()),
                                   argmax_agreement=float(agreement))

    with plant("parity_cosine_pooled_over_positions", swap(parity, "compare_logits", compare_logits)):
        yield
