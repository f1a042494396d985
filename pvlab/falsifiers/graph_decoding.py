"""Checks of the CUDA-graph greedy decoder (pvlab.runtime.graph_decode): that it says the same as
the general decoder, and that it is worth having.

The oracle of the first is `runtime.generate` with its growing KVCache: a different cache (one
that concatenates rather than writes in place), a different mask (none after the prompt, the
causal kernel for it) and no graph. The second measures like FALSIFY-PERF-DECODE-001 (the same
model, prompt and CPU side), so the two speed figures compare.
"""

from __future__ import annotations

import torch

from . import fixtures, throughput
from ._util import torch_device
from .performance import _decode_rate, _gpu_named, _model


def _new_ids(call) -> list[int] | None:
    """The token ids a decoder returns, or None when it raised: a crash of the decoder under test
    is a wrong outcome of this check, counted, never an error of the check."""
    try:
        return list(call())
    except Exception:  # noqa: BLE001
        return None


def graph_decode_matches_generate(*, device: str, checkpoint: str = "tiny-trained", prompts: int = 4,
                                  prompt_tokens: int = 12, new_tokens: int = 24) -> dict:
    """Greedy tokens of graph_decode.greedy_generate (a replayed CUDA graph on cuda, the same
    static-cache step eagerly on cpu), and of runtime.generate with its default decoder (the graph
    decoder on cuda), against runtime.generate's eager decoder, on the device's default path, for
    `prompts` held-out prompts of the trained checkpoint; and greedy_generate refuses what
    runtime.generate documents refusing — an empty prompt and a token outside the vocabulary
    (GenerationError), a prompt plus new tokens longer than the context (PromptTooLongError),
    max_new_tokens = -1 (ArgumentError).

    Observations: prompts, new_tokens, tokens_compared, token_mismatches, sequences_differing,
    first_mismatch_at (-1 when none), errors (decodes under test that raised), wrong_refusals
    (of the 4 bad requests, those not refused with the documented error), replayed (1 when the
    CUDA graph ran)."""
    from pvlab import runtime
    from pvlab.runtime import graph_decode
    from pvlab.runtime.devices import default_path
    from pvlab.runtime.errors import ArgumentError, GenerationError, PromptTooLongError

    dev = torch_device(device)
    model = fixtures.model(checkpoint, device=device, path=default_path(dev))
    rows = fixtures.heldout_batches(checkpoint)[0].inputs[:prompts, :prompt_tokens].tolist()
    mismatches = differing = compared = errors = 0
    first = -1
    for row in rows:
        # The eager decoder (model.KVCache, one forward per token): on CUDA, runtime.generate's
        # default is the graph decoder itself, which would be no oracle for it.
        expected = runtime.generate(model, row, max_new_tokens=new_tokens, use_graph=False).new_ids
        for got in (_new_ids(lambda: graph_decode.greedy_generate(model, row, max_new_tokens=new_tokens)),
                    _new_ids(lambda: runtime.generate(model, row, max_new_tokens=new_tokens).new_ids)):
            if got is None:
                errors += 1
                continue
            compared += max(len(expected), len(got))
            wrong = [i for i in range(max(len(expected), len(got)))
                     if i >= len(expected) or i >= len(got) or expected[i] != got[i]]
            mismatches += len(wrong)
            differing += int(bool(wrong))
            if wrong and (first < 0 or wrong[0] < first):
                first = wrong[0]
    context, vocab = model.config.max_position_embeddings, model.config.vocab_size
    bad = [([], 4, GenerationError), ([1, vocab], 4, GenerationError), ([1] * 8, context, PromptTooLongError),
           ([1, 2], -1, ArgumentError)]
    wrong_refusals = 0
    for prompt, count, refusal in bad:
        try:
            graph_decode.greedy_generate(model, prompt, max_new_tokens=count)
            wrong_refusals += 1
        except refusal:
            pass
        except Exception:  # noqa: BLE001 - another error is a wrong refusal
            wrong_refusals += 1
    return {"prompts": len(rows), "new_tokens": new_tokens, "tokens_compared": compared,
            "token_mismatches": mismatches, "sequences_differing": differing, "first_mismatch_at": first,
            "errors": errors, "wrong_refusals": wrong_refusals, "replayed": int(dev.type == "cuda")}


def graph_decode_speed_vs_cpu(*, device: str, config: str = "qwen2-0.5b", prompt_tokens: int = 32,
                              new_tokens: int = 32, repeats: int = 5, max_spread: float = 0.3,
                              gpu: str | None = None) -> dict:
    """Greedy decoding of the same random-weight model (seed 0) on the GPU through the CUDA-graph
    decoder (bf16 fast path) and on the CPU through runtime.generate (fp32 reference path).

    Observations: cuda_tokens_per_s, cpu_tokens_per_s (medians), speedup, cuda_spread,
    cpu_spread, new_tokens."""
    from pvlab.runtime import graph_decode

    _gpu_named(device, gpu)
    cpu_model = _model(config, "cpu", "reference")
    cpu = _decode_rate(cpu_model, prompt_tokens=prompt_tokens, new_tokens=new_tokens, repeats=repeats,
                       max_spread=max_spread, sync=None, what="cpu greedy decode")
    del cpu_model
    gpu_model = _model(config, device, "fast")
    prompt = torch.randint(0, gpu_model.config.vocab_size, (prompt_tokens,),
                           generator=torch.Generator().manual_seed(0)).tolist()

    def decode() -> None:
        produced = graph_decode.greedy_generate(gpu_model, prompt, max_new_tokens=new_tokens)
        if len(produced) != new_tokens:
            raise RuntimeError(f"graph decode gave {len(produced)} tokens, asked for {new_tokens}")

    cuda = throughput.measure(decode, units_per_step=new_tokens, warmup=1, repeats=repeats,
                              synchronize=torch.cuda.synchronize, max_spread=max_spread,
                              what="cuda graph greedy decode")
    return {"cuda_tokens_per_s": cuda.median, "cpu_tokens_per_s": cpu.median, "speedup": cuda.median / cpu.median,
            "cuda_spread": cuda.spread, "cpu_spread": cpu.spread, "new_tokens": new_tokens}
