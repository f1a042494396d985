"""Planted bugs of runtime.kernels' attention: the causal mask, GQA head mapping, KV-cache positions.

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

from pv.mutation import mutant

from .planting import plant, swap


@mutant("gqa_kv_heads_tiled")
def gqa_kv_heads_tiled():
    """Grouped-query attention hands query head h the key/value head h % KV (the K/V heads tiled)
    instead of h // (H / KV) (each repeated), on both attention paths.

    Imitates the classic GQA head-mapping defect (`repeat` where `repeat_interleave` is meant).
    Seams: runtime.kernels.repeat_kv (reference path) and runtime.kernels.attention_fast."""
    import torch.nn.functional as F

    from pvlab.runtime import kernels

    original_fast = kernels.attention_fast

    def repeat_kv(x, groups):
        return x if groups == 1 else x.repeat(1, groups, 1, 1)

    def attention_fast(q, k, v):
        groups = q.shape[1] // k.shape[1]
        if groups == 1:
            return original_fast(q, k, v)
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
        query_length, key_length = q.shape[-2], k.shape[-2]
        if query_length == key_length:
            return F.scaled_dot_product_attention(q, k, v, is_causal=query_length > 1)
        if query_length == 1:
            return F.scaled_dot_product_attention(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=kernels.causal_mask(query_length, key_length, q.device))

    with plant("gqa_kv_heads_tiled", swap(kernels, "repeat_kv", repeat_kv),
               swap(kernels, "attention_fast", attention_fast)):
        yield


@mutant("attention_not_causal")
def attention_not_causal():
    """Attention has no causal mask: every position also sees the keys after it (the future), on
    both paths.

    Imitates a dropped `is_causal` / mask argument. Seams: runtime.kernels.causal_mask (reference
    path, several-tokens-after-cache fast path) and runtime.kernels.attention_fast."""
    import torch
    import torch.nn.functional as F

    from pvlab.runtime import kernels

    def causal_mask(query_length, key_length, device):
        return torch.ones(query_length, key_length, dtype=torch.bool, device=device)

    def attention_fast(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1])

    with plant("attention_not_causal", swap(kernels, "causal_mask", causal_mask),
               swap(kernels, "attention_fast", attention_fast)):
        yield


@mutant("attention_mask_ignores_cache_offset")
def attention_mask_ignores_cache_offset():
    """When several new tokens follow a KV cache, the causal mask is aligned to the top-left
    (query i sees keys 0..i) instead of the bottom-right (keys 0..past+i): new tokens lose sight
    of most of the cache. On the fast path this is SDPA's `is_causal` used with a cache.

    Imitates the mask-alignment defect the comment in runtime.kernels.attention_fast warns about.
    Seams: runtime.kernels.causal_mask and runtime.kernels.attention_fast."""
    import torch
    import torch.nn.functional as F

    from pvlab.runtime import kernels

    original_fast = kernels.attention_fast

    def causal_mask(query_length, key_length, device):
        return torch.arange(key_length, device=device)[None, :] <= torch.arange(query_length, device=device)[:, None]

    def attention_fast(q, k, v):
        if 1 < q.shape[-2] < k.shape[-2]:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])
        return original_fast(q, k, v)

    with plant("attention_mask_ignores_cache_offset", swap(kernels, "causal_mask", causal_mask),
               swap(kernels, "attention_fast", attention_fast)):
        yield


@mutant("kv_cache_off_by_one")
def kv_cache_off_by_one():
    """Tokens appended after a KV cache get positions one too far (past_length + 1 ...): the
    prompt is right, every decoded token is rotated as if it stood one place later.

    Imitates the seed defect "KV cache off by one" (decode position = sequence length instead of
    sequence length - 1). Seam: runtime.kernels.positions_for."""
    import torch

    from pvlab.runtime import kernels

    original = kernels.positions_for

    def positions_for(past_length, num_new, device):
        if past_length <= 0:
            return original(past_length, num_new, device)
        return torch.arange(past_length + 1, past_length + 1 + num_new, device=device)

    with plant("kv_cache_off_by_one", swap(kernels, "positions_for", positions_for)):
        yield



@mutant("cache_positions_restart_at_zero")
def cache_positions_restart_at_zero():
    """Tokens appended after a KV cache get positions 0, 1, ... again instead of continuing after
    the cached ones: every decoded token is rotated as if it were at the start of the sequence.

    Imitates the decode-position defect of a runtime that passes only the new tokens' own range
    to RoPE (`arange(num_new)`), forgetting the cache offset. Seam: runtime.kernels.positions_for."""
    import torch

    from pvlab.runtime import kernels

    def positions_for(past_length, num_new, device):
        return torch.arange(num_new, device=device)

    with plant("cache_positions_restart_at_zero", swap(kernels, "positions_for", positions_for)):
        yield


@mutant("causal_mask_sees_next_key")
def causal_mask_sees_next_key():
    """The reference path's causal mask lets every query also see the key right after it (an
    off-by-one in the mask's diagonal): each position peeks one token into the future.

    Imitates the classic `<=` / `<` slip in a hand-built triangular mask (`triu(diagonal=2)` for
    `diagonal=1`). Seam: runtime.kernels.causal_mask."""
    import torch

    from pvlab.runtime import kernels

    def causal_mask(query_length, key_length, device):
        query = torch.arange(query_length, device=device)[:, None] + key_length - query_length
        return torch.arange(key_length, device=device)[None, :] <= query + 1

    with plant("causal_mask_sees_next_key", swap(kernels, "causal_mask", causal_mask)):
        yield


@mutant("kv_cache_evicts_oldest_entry")
def kv_cache_evicts_oldest_entry():
    """Once the KV cache holds more than 8 positions, appending drops the oldest one: decoding
    after a longer prompt attends to a window that has silently lost its first token.

    Imitates a cache-eviction bug (a ring buffer or sliding window applied where the model has
    full attention). Seam: runtime.model.KVCache.update."""
    from pvlab.runtime.model import KVCache

    original = KVCache.update

    def update(self, layer_index, k, v):
        k_all, v_all = original(self, layer_index, k, v)
        if k_all.shape[-2] > 8:
            self.keys[layer_index], self.values[layer_index] = k_all[..., 1:, :], v_all[..., 1:, :]
        return self.keys[layer_index], self.values[layer_index]

    with plant("kv_cache_evicts_oldest_entry", swap(KVCache, "update", update)):
        yield


# ---- fourth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Fourth blind batch"; probes in tests/falsifiers/fourth_mutant_probes.py)


@mutant("static_decode_positions_one_late")
def static_decode_positions_one_late():
    """The static-cache decoder (runtime.graph_decode) feeds each new token at position
    len(prompt) + index + 1 instead of len(prompt) + index: after the prompt (which is right)
    every decoded token is rotated one position too far and written one slot too far, so the
    slot right after the prompt stays an all-zero key that every later token attends to. The
    eager decoder of runtime.generate is untouched. The same step runs eagerly on the CPU and
    replayed as a CUDA graph.

    Imitates an off-by-one in the decode loop's position (`index + 1` for the token being fed
    because it is the (index + 1)-th new token). Seam: runtime.graph_decode._step (every call
    after a cache's first, the prompt's)."""
    import weakref

    from pvlab.runtime import graph_decode

    original = graph_decode._step
    prefilled = weakref.WeakSet()                                           # caches whose prompt has run

    def _step(model, cache, ids, positions, key_positions):
        if cache in prefilled:
            positions = positions + 1                                       # the defect: one slot late
        else:
            prefilled.add(cache)
        return original(model, cache, ids, positions, key_positions)

    with plant("static_decode_positions_one_late", swap(graph_decode, "_step", _step)):
        yield


# ---- twelfth blind batch ----
# Written from pvlab/runtime and docs/runtime.md alone, before any kill was measured
# (docs/independent-mutants.md, "Twelfth batch"; probes in tests/falsifiers/twelfth_mutant_probes.py).


@mutant("masked_fast_attention_kv_heads_tiled")
def masked_fast_attention_kv_heads_tiled():
    """On the fast path, an attention that carries a mask (a left-padded batch in batched
    generation, a packed batch of documents) shares the K/V heads by TILING them (`repeat`:
    query head h reads K/V head h % KV) instead of giving each group of H/KV consecutive query
    heads its own K/V head. The plain causal calls (no mask) and the reference path are right.

    Imitates an explicit head expansion added to the masked SDPA call (for a backend that took
    no enable_gqa with an attn_mask) with `repeat` where `repeat_interleave` is meant. Seam:
    runtime.kernels.attention_fast (its masked branch only)."""
    import torch.nn.functional as F

    from pvlab.runtime import kernels

    original = kernels.attention_fast

    def attention_fast(q, k, v, mask=None):
        if mask is None:
            return original(q, k, v)
        groups = q.shape[1] // k.shape[1]
        if groups > 1:
            k, v = k.repeat(1, groups, 1, 1), v.repeat(1, groups, 1, 1)   # the defect: tiled heads
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    with plant("masked_fast_attention_kv_heads_tiled", swap(kernels, "attention_fast", attention_fast)):
        yield
