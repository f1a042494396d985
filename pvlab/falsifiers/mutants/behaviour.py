"""Planted bugs for the contracts fast-path-on-cpu and documented-behaviour (issue #26): each
imitates one class of the automatic mutants that survived every older falsifier, as a named bug
so the new falsifiers are judged by `pv strength` like every other (docs/mutants.md)."""

from __future__ import annotations

import importlib

from pv.mutation import mutant

from .planting import plant, swap


@mutant("gqa_flag_from_sequence_length")
def gqa_flag_from_sequence_length():
    """attention_fast decides grouped-query attention from the wrong axis (the sequence length
    against the KV heads): a prompt exactly as long as the number of KV heads crashes SDPA.

    Imitates an index slip in a shape test. Seam: runtime.kernels.attention_fast."""
    import torch.nn.functional as F

    from pvlab.runtime import kernels

    def attention_fast(q, k, v, mask=None):
        if mask is not None or q.shape[-2] != k.shape[-2]:
            return original(q, k, v) if mask is None else original(q, k, v, mask)
        return F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[-2] > 1,
                                              enable_gqa=q.shape[2] != k.shape[1])

    original = kernels.attention_fast
    with plant("gqa_flag_from_sequence_length", swap(kernels, "attention_fast", attention_fast)):
        yield


@mutant("fast_path_runs_reference_attention")
def fast_path_runs_reference_attention():
    """The fast path's attention quietly runs the reference kernel: the same numbers, so every
    value check passes, while the fused kernel the path exists for never runs.

    Imitates a dispatch test written backwards. Seam: runtime.model.Attention._attend_fast."""
    from pvlab.runtime import kernels
    from pvlab.runtime.model import Attention

    def _attend_fast(self, q, k, v, mask):
        return kernels.attention_reference(q, k, v) if mask is None else kernels.attention_reference(q, k, v, mask)

    with plant("fast_path_runs_reference_attention", swap(Attention, "_attend_fast", _attend_fast)):
        yield


@mutant("pinned_backend_error_unwrapped")
def pinned_backend_error_unwrapped():
    """A pinned attention backend that cannot run here surfaces as torch's bare RuntimeError
    instead of the runtime's DeviceError naming the backend.

    Imitates an exception translation inverted. Seam: runtime.model.Attention._attend_fast."""
    from pvlab.runtime.errors import DeviceError
    from pvlab.runtime.model import Attention

    original = Attention._attend_fast

    def _attend_fast(self, q, k, v, mask):
        try:
            return original(self, q, k, v, mask)
        except DeviceError:
            raise RuntimeError("No viable backend for scaled_dot_product_attention was found.") from None

    with plant("pinned_backend_error_unwrapped", swap(Attention, "_attend_fast", _attend_fast)):
        yield


@mutant("parity_probe_counts_rows")
def parity_probe_counts_rows():
    """The parity report counts the probe's rows instead of its positions (a batch of one reads
    as a single probe token).

    Imitates a flatten over the wrong dimensions. Seam: runtime.parity.compare_logits."""
    import dataclasses

    from pvlab.runtime import parity

    original = parity.compare_logits

    def compare_logits(reference, candidate, *, device, path):
        return dataclasses.replace(original(reference, candidate, device=device, path=path),
                                   probe_tokens=reference.shape[0])

    with plant("parity_probe_counts_rows", swap(parity, "compare_logits", compare_logits)):
        yield


@mutant("head_only_gradient_dropped")
def head_only_gradient_dropped():
    """The fused output head + cross-entropy computes no head gradient when the hidden states are
    frozen: fine-tuning only the output head trains nothing, with a loss that looks normal.

    Imitates gradient bookkeeping keyed on the wrong input. Seam: runtime.kernels.chunked_linear_cross_entropy."""
    from pvlab.runtime import kernels

    original = kernels.chunked_linear_cross_entropy

    def chunked_linear_cross_entropy(hidden, weight, targets, **options):
        if not hidden.requires_grad:
            weight = weight.detach()
        return original(hidden, weight, targets, **options)

    with plant("head_only_gradient_dropped", swap(kernels, "chunked_linear_cross_entropy", chunked_linear_cross_entropy)):
        yield


@mutant("float64_state_dict_refused")
def float64_state_dict_refused():
    """A {name: tensor} dict of float64 tensors is refused as a non-float dtype: the dtype table
    misses F64.

    Imitates a lookup table one entry short. Seam: runtime.checkpoint._safetensors_dtype."""
    import torch

    from pvlab.runtime import checkpoint

    def _safetensors_dtype(tensor):
        return {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}.get(tensor.dtype, str(tensor.dtype))

    with plant("float64_state_dict_refused", swap(checkpoint, "_safetensors_dtype", _safetensors_dtype)):
        yield


@mutant("atomic_write_swallows_writer_error")
def atomic_write_swallows_writer_error():
    """An atomic write whose writer fails cleans up and returns as if it had written: the caller
    believes a checkpoint was saved.

    Imitates a cleanup handler that forgot to re-raise. Seam: runtime.atomic.write_with."""
    from pvlab.runtime import atomic

    original = atomic.write_with

    def write_with(path, writer):
        try:
            original(path, writer)
        except Exception:  # noqa: BLE001 - the bug
            pass

    with plant("atomic_write_swallows_writer_error", swap(atomic, "write_with", write_with)):
        yield


@mutant("hf_config_without_cache")
def hf_config_without_cache():
    """The transformers config the runtime writes says use_cache: false, so transformers decodes
    every saved checkpoint without its KV cache (the same text, many times slower).

    Imitates a copied default flipped. Seam: runtime.config.ModelConfig.to_hf_dict."""
    from pvlab.runtime.config import ModelConfig

    original = ModelConfig.to_hf_dict

    def to_hf_dict(self):
        return {**original(self), "use_cache": False}

    with plant("hf_config_without_cache", swap(ModelConfig, "to_hf_dict", to_hf_dict)):
        yield


@mutant("fingerprint_counts_docstrings")
def fingerprint_counts_docstrings():
    """code_fingerprint hashes the sources' text, docstrings included: rewording a docstring makes
    every cached build stale (hours of GPU time on the production-scale subjects).

    Imitates hashing the file instead of its syntax tree. Seam: runtime.pretrain.code_fingerprint."""
    import hashlib
    from pathlib import Path

    from .entrypoints import _pretrain_module

    pretrain = _pretrain_module()

    def code_fingerprint(source_dir=None):
        source_dir = Path(source_dir or Path(pretrain.__file__).parent)
        digest = hashlib.sha256()
        for name in pretrain._SOURCES_THAT_SHAPE_A_CHECKPOINT:
            digest.update((source_dir / name).read_bytes())
        return digest.hexdigest()

    with plant("fingerprint_counts_docstrings", swap(pretrain, "code_fingerprint", code_fingerprint)):
        yield


@mutant("compile_mode_dropped")
def compile_mode_dropped():
    """compile_module ignores the mode: "reduce-overhead" compiles without CUDA graphs, so the
    speed a user asked for never comes and nothing says why.

    Imitates a keyword argument lost in a wrapper. Seam: runtime.trainer.compile_module."""
    from pvlab.runtime import trainer

    def compile_module(module, mode=None):
        module.compile()

    with plant("compile_mode_dropped", swap(trainer, "compile_module", compile_module)):
        yield


@mutant("packer_opens_row_when_full")
def packer_opens_row_when_full():
    """pack_documents opens a new row when a document would fill the current one exactly: every
    exactly-filling document moves on and leaves padding behind (fewer tokens a step).

    Imitates `>=` where `>` belongs. Seam: runtime.data.pack_documents."""
    from pvlab.runtime import data

    original = data.pack_documents

    def pack_documents(documents, *, seq_len):
        # the same pieces in the same order (the original's rows, flattened), laid out again
        pieces = [piece for row in original(documents, seq_len=seq_len) for piece in row]
        rows, used = [], seq_len
        for piece in pieces:
            if used + len(piece) - 1 >= seq_len:
                rows.append([])
                used = 0
            rows[-1].append(piece)
            used += len(piece) - 1
        return rows

    with plant("packer_opens_row_when_full", swap(data, "pack_documents", pack_documents)):
        yield


@mutant("pretokenizer_split_dropped")
def pretokenizer_split_dropped():
    """The tokenizer's pre-tokenizer loses its Split step (byte-level mapping only): BPE merges run
    across word, digit and whitespace boundaries. Every text still round-trips, so nothing that
    only encodes and decodes notices.

    Imitates a pipeline step left out of a builder. Seam: runtime.data.train_tokenizer."""
    from pvlab.runtime import data

    original = data.train_tokenizer

    def train_tokenizer(documents, vocab_size):
        from tokenizers import pre_tokenizers

        tokenizer = original(documents, vocab_size)
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        return tokenizer

    with plant("pretokenizer_split_dropped", swap(data, "train_tokenizer", train_tokenizer)):
        yield


@mutant("sampling_unseeded_below_one")
def sampling_unseeded_below_one():
    """Sampling at a temperature up to 1 draws from a generator that was never seeded: the same
    seed gives a different text every time.

    Imitates a seeding condition off by one (temperature > 1 instead of > 0). Seam:
    runtime.generate.generate."""
    import torch

    generation = importlib.import_module("pvlab.runtime.generate")
    original = generation.generate

    def generate(model, prompt_ids, *, max_new_tokens, temperature=0.0, seed=0, **options):
        if 0 < temperature <= 1:
            seed = int(torch.randint(0, 2**31 - 1, (1,)))
        return original(model, prompt_ids, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                        **options)

    with plant("sampling_unseeded_below_one", swap(generation, "generate", generate)):
        yield


from . import routes  # noqa: E402,F401 - registers the planted bugs of fast-routes (issue #26's GPU survivors)
