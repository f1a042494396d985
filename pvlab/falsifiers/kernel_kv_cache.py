"""KV-cache decoding (runtime.model.KVCache, kernels.positions_for / causal_mask / attention_*,
runtime.generate) equals the full forward.

A model that decodes with a cache must produce, at every position, the logits a full forward
over the whole sequence produces there. The model here is the tiny preset with random weights
drawn at a larger scale than usual (std 0.1), so that logits are spread and an error of one
position shows; it costs milliseconds and needs no trained checkpoint.
"""

from __future__ import annotations

import torch

from ._util import compared, generator, rtol_atol, torch_device


def _model(device: torch.device, path: str, seed: int):
    from . import fixtures

    return fixtures.random_model("tiny", seed=seed, initializer_range=0.1, device=str(device), path=path)


def _tokens(vocab: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, vocab, (2, length), generator=generator(seed))


def cached_decode_matches_full_forward(*, device: str, path: str = "reference", prompt: int = 7, steps: int = 24,
                                       chunk: int = 1, seed: int = 0, tolerance: dict | None = None) -> dict:
    """Feed `prompt` tokens, then the rest `chunk` tokens at a time through one KVCache, and compare
    the logits of every position with one full forward of the whole sequence (same path).

    chunk 1 is token-by-token decoding (one query after the cache); chunk > 1 is the several-new-
    tokens case (a mask offset by the cache length). Observations: max_abs_diff, max_rel_diff,
    max_abs_ref, allclose_ratio, nonfinite, rtol, atol (float32 on the reference path, bfloat16
    on the fast path), cache_length (positions cached at the end; must be prompt + steps),
    argmax_agreement (fraction of positions whose top token agrees)."""
    from pvlab.runtime.model import KVCache

    dev = torch_device(device)
    dtype = "bfloat16" if path == "fast" else "float32"
    rtol, atol = rtol_atol(tolerance, dtype)
    model = _model(dev, path, seed)
    tokens = _tokens(model.config.vocab_size, prompt + steps, seed + 1).to(dev)
    with torch.no_grad():
        full = model(tokens)                                                      # (B, T, V)
        cache = KVCache(model.config.num_hidden_layers)
        pieces = [model(tokens[:, :prompt], cache)]
        for start in range(prompt, prompt + steps, chunk):
            pieces.append(model(tokens[:, start:start + chunk], cache))
        cached = torch.cat(pieces, dim=1)
    obs = compared(cached, full, rtol=rtol, atol=atol)
    obs["cache_length"] = cache.length
    obs["expected_cache_length"] = prompt + steps
    obs["argmax_agreement"] = float((cached.argmax(-1) == full.argmax(-1)).float().mean())
    return obs


def cached_greedy_matches_uncached(*, device: str, path: str = "reference", prompt: int = 5,
                                   new_tokens: int = 32, prompts: int = 3, seed: int = 0) -> dict:
    """runtime.generate.generate greedy with the KV cache vs without it (full recompute each step),
    for several random prompts. Observations: agreeing_prefix (shortest run of identical leading
    tokens over the prompts), new_tokens, prompts."""
    from pvlab.runtime.generate import generate

    dev = torch_device(device)
    model = _model(dev, path, seed)
    agreeing = new_tokens
    for i in range(prompts):
        ids = _tokens(model.config.vocab_size, prompt, seed + 100 + i)[0].tolist()
        # model.KVCache through the eager decoder (on CUDA the default would be the graph decoder's
        # static cache, a different cache: FALSIFY-PERF-DECODE-004 compares the two)
        with_cache = generate(model, ids, max_new_tokens=new_tokens, temperature=0.0, use_cache=True,
                              use_graph=False).new_ids
        without = generate(model, ids, max_new_tokens=new_tokens, temperature=0.0, use_cache=False).new_ids
        prefix = 0
        for a, b in zip(with_cache, without):
            if a != b:
                break
            prefix += 1
        if len(with_cache) != new_tokens or len(without) != new_tokens:
            prefix = min(prefix, len(with_cache), len(without))
        agreeing = min(agreeing, prefix)
    return {"agreeing_prefix": agreeing, "new_tokens": new_tokens, "prompts": prompts}
