"""Grouped-query causal attention: the fused fast kernel (runtime.kernels.attention_fast, torch's
scaled_dot_product_attention) and the explicit reference kernel (attention_reference) against
attention written out here in float64.

    out[b, h, t] = sum_{s <= S - T + t} softmax_s(q[b,h,t] . k[b, h // g, s] / sqrt(D)) v[b, h // g, s]

with g = H / KV query heads per key/value head. The T queries are the last T of S positions
(S - T earlier ones come from a KV cache), so query t sits at absolute position S - T + t.
"""

from __future__ import annotations

import math

import torch

from ._util import compared, randn, rtol_atol, torch_device, torch_dtype

KERNELS = ("fast", "reference")


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    q, k, v = (t.detach().to("cpu", torch.float64) for t in (q, k, v))
    batch, heads, queries, head_dim = q.shape
    kv_heads, keys = k.shape[1], k.shape[2]
    groups = heads // kv_heads
    out = torch.empty(batch, heads, queries, head_dim, dtype=torch.float64)
    for h in range(heads):
        kh, vh = k[:, h // groups], v[:, h // groups]                           # (B, S, D)
        scores = q[:, h] @ kh.transpose(-2, -1) / math.sqrt(head_dim)           # (B, T, S)
        for t in range(queries):
            visible = keys - queries + t + 1
            weights = torch.softmax(scores[:, t, :visible], dim=-1)             # (B, visible)
            out[:, h, t] = (weights[:, :, None] * vh[:, :visible]).sum(dim=1)
    return out


def _kernel(name: str):
    from pvlab.runtime import kernels

    if name == "fast":
        return kernels.attention_fast
    if name == "reference":
        return kernels.attention_reference
    raise ValueError(f"kernel must be one of {KERNELS}, got {name!r}")


def _qkv(batch: int, heads: int, kv_heads: int, queries: int, keys: int, head_dim: int, *, seed: int,
         dtype: torch.dtype, device: torch.device, scale: float = 1.0):
    q = randn((batch, heads, queries, head_dim), seed=seed, scale=scale, dtype=dtype, device=device)
    k = randn((batch, kv_heads, keys, head_dim), seed=seed + 1, scale=scale, dtype=dtype, device=device)
    v = randn((batch, kv_heads, keys, head_dim), seed=seed + 2, dtype=dtype, device=device)
    return q, k, v


def attention_matches_reference(*, device: str, kernel: str = "fast", dtype: str = "float32", batch: int = 2,
                                heads: int = 6, kv_heads: int = 2, queries: int = 19, keys: int = 19,
                                head_dim: int = 16, scale: float = 1.0, seed: int = 0,
                                tolerance: dict | None = None) -> dict:
    """One attention kernel vs the float64 math. queries < keys is the KV-cache case (one or
    several new tokens after cached ones). `scale` multiplies q and k (scores grow with scale^2).
    Observations: max_abs_diff, max_rel_diff, max_abs_ref, allclose_ratio, nonfinite, rtol, atol."""
    dev, dt = torch_device(device), torch_dtype(dtype)
    rtol, atol = rtol_atol(tolerance, dtype)
    q, k, v = _qkv(batch, heads, kv_heads, queries, keys, head_dim, seed=seed, dtype=dt, device=dev, scale=scale)
    with torch.no_grad():
        out = _kernel(kernel)(q, k, v)
    return compared(out, _reference(q, k, v), rtol=rtol, atol=atol)


def attention_is_causal(*, device: str, kernel: str = "fast", batch: int = 2, heads: int = 6, kv_heads: int = 2,
                        seq: int = 17, head_dim: int = 16, seed: int = 0) -> dict:
    """Changing the keys and values of positions > t must not change the output at t.

    For every cut c in 1..seq-1 the keys/values at positions >= c are replaced by fresh random
    ones and outputs at positions < c are compared. Also, position 0 can only see itself, so its
    output must equal v[0] of its K/V head. Observations: future_influence_max_abs (worst change
    of a past output; 0 for a causal kernel), first_position_max_abs_diff, max_abs_out."""
    dev = torch_device(device)
    attend = _kernel(kernel)
    q, k, v = _qkv(batch, heads, kv_heads, seq, seq, head_dim, seed=seed, dtype=torch.float32, device=dev)
    k2, v2 = (randn(t.shape, seed=seed + 10 + i, device=dev) for i, t in enumerate((k, v)))
    with torch.no_grad():
        base = attend(q, k, v)
        influence = 0.0
        for cut in range(1, seq):
            k_mod, v_mod = k.clone(), v.clone()
            k_mod[:, :, cut:], v_mod[:, :, cut:] = k2[:, :, cut:], v2[:, :, cut:]
            changed = attend(q, k_mod, v_mod)
            influence = max(influence, float((changed[:, :, :cut] - base[:, :, :cut]).abs().max()))
    groups = heads // kv_heads
    first_expected = v[:, torch.arange(heads, device=dev) // groups, 0]         # (B, H, D)
    return {
        "future_influence_max_abs": influence,
        "first_position_max_abs_diff": float((base[:, :, 0].double() - first_expected.double()).abs().max()),
        "max_abs_out": float(base.abs().max()),
    }
