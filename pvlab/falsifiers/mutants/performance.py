"""Planted bugs that leave every number right and make the runtime slow (contracts
runtime-performance and runtime-vs-transformers): the KV cache bypassed, a host synchronisation
per layer, the fast path running the reference kernels, the fused loss's chunk steps left eager.

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

from pv.mutation import mutant

from .planting import plant, swap


@mutant("decode_recomputes_the_prefix")
def decode_recomputes_the_prefix():
    """Greedy decoding ignores the KV cache: every new token re-runs the decoder over the whole
    sequence so far. The tokens are the same (the cache is an optimisation); the cost of a token
    grows with the length of the text.

    Imitates a generation loop that passes use_cache=False (or drops the cache it built) — the
    bug hunt's slow GPU decode had this shape. Seams: runtime.generate.generate and the package's
    runtime.generate (the same function, bound twice)."""
    import importlib

    from pvlab import runtime

    generation = importlib.import_module("pvlab.runtime.generate")
    original = generation.generate

    def generate(model, prompt_ids, **kwargs):
        return original(model, prompt_ids, **{**kwargs, "use_cache": False})

    with plant("decode_recomputes_the_prefix", swap(generation, "generate", generate),
               swap(runtime, "generate", generate)):
        yield


@mutant("host_read_per_layer")
def host_read_per_layer():
    """Every decoder layer checks its output for NaN or inf and raises if it finds one — through
    bool(tensor), a read of a device value by the host: on a GPU, one wait for the whole queue
    per layer, forward only (the backward is untouched). The numbers do not change.

    Imitates a debugging guard left in a hot path (`if not torch.isfinite(x).all(): raise`).
    Seam: runtime.model.DecoderLayer.forward."""
    import torch

    from pvlab.runtime import model

    original = model.DecoderLayer.forward

    def forward(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if not bool(torch.isfinite(out).all()):
            raise FloatingPointError(f"decoder layer {self.self_attn.layer_index} produced a non-finite value")
        return out

    with plant("host_read_per_layer", swap(model.DecoderLayer, "forward", forward)):
        yield


@mutant("fast_path_runs_reference_kernels")
def fast_path_runs_reference_kernels():
    """Asking for the fast path gives the reference path: fp32 matmuls, the explicit softmax
    attention, full-vocabulary logits, the single-tensor AdamW. Every number is right (the
    reference path is the correct one); it is several times slower on a GPU.

    Imitates a path switch that silently falls back (a device check that fails, a default that
    wins over the argument). Seam: runtime.model.CausalLM.set_path."""
    from pvlab.runtime import model

    original = model.CausalLM.set_path

    def set_path(self, path):
        return original(self, "reference" if path == "fast" else path)

    with plant("fast_path_runs_reference_kernels", swap(model.CausalLM, "set_path", set_path)):
        yield


@mutant("loss_chunk_steps_eager")
def loss_chunk_steps_eager():
    """The fused loss runs its per-chunk steps (softmax, loss, logit gradient of each (c, V)
    block) as eager elementwise kernels instead of the compiled Triton ones: a dozen passes over
    each chunk's logits where two do. Every number is the same; on an H100 it costs about 30 ms of
    a ~90 ms qwen2-0.5b training step.

    Imitates a speed switch left off (Triton missing on the machine, a debugging flag committed).
    Seam: runtime.kernels.COMPILE_LOSS_CHUNKS."""
    from pvlab.runtime import kernels

    with plant("loss_chunk_steps_eager", swap(kernels, "COMPILE_LOSS_CHUNKS", False)):
        yield


@mutant("generate_decodes_eagerly")
def generate_decodes_eagerly():
    """runtime.generate never takes the CUDA-graph decoder: greedy decoding on a GPU runs the eager
    loop, ~1,500 kernel launches per token of the qwen2-0.5b shape, launch-bound at about the
    CPU's speed. The tokens are the same.

    Imitates a default switched off, or a device test that never matches ("cuda:0" against
    "cuda"). Seams: runtime.generate.generate and the package's runtime.generate."""
    import importlib

    from pvlab import runtime

    generation = importlib.import_module("pvlab.runtime.generate")
    original = generation.generate

    def generate(model, prompt_ids, **kwargs):
        return original(model, prompt_ids, **{**kwargs, "use_graph": False})

    with plant("generate_decodes_eagerly", swap(generation, "generate", generate), swap(runtime, "generate", generate)):
        yield
