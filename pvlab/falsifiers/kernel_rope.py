"""Rotary position embedding (runtime.kernels.rope_cos_sin / apply_rope / positions_for) against
an independent float64 reference.

The reference treats each pair (x_i, x_{i + D/2}) of a head vector as the complex number
x_i + i x_{i+D/2} and multiplies it by exp(i * p * theta^(-2i/D)) — the "rotate_half" layout of
Qwen2/Llama checkpoints — in float64 with positions as exact integers. It shares no code with
the kernel (no cos/sin tables, no rotate_half).
"""

from __future__ import annotations

import torch

from ._util import compared, randn, rtol_atol, torch_device, torch_dtype


def _reference(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """x (B, H, T, D) at absolute positions (T,) -> rotated, float64 on the CPU."""
    x64 = x.detach().to("cpu", torch.float64)
    half = x64.shape[-1] // 2
    pairs = torch.complex(x64[..., :half], x64[..., half:])                        # (B, H, T, D/2)
    index = torch.arange(half, dtype=torch.float64)
    frequency = torch.pow(torch.tensor(float(theta), dtype=torch.float64), -2.0 * index / x64.shape[-1])
    angle = positions.to("cpu", torch.float64)[:, None] * frequency[None, :]        # (T, D/2)
    rotated = pairs * torch.polar(torch.ones_like(angle), angle)
    return torch.cat((rotated.real, rotated.imag), dim=-1)


def _rope(x: torch.Tensor, past: int, theta: float) -> torch.Tensor:
    from pvlab.runtime import kernels

    positions = kernels.positions_for(past, x.shape[-2], x.device)
    cos, sin = kernels.rope_cos_sin(theta, x.shape[-1], positions)
    return kernels.apply_rope(x, cos, sin)


def rope_matches_reference(*, device: str, dtype: str = "float32", heads: int = 3, seq: int = 37,
                           head_dim: int = 64, theta: float = 10000.0, past: int = 0, seed: int = 0,
                           tolerance: dict | None = None) -> dict:
    """Rotate queries of `seq` tokens that follow `past` cached ones (so their absolute positions
    are past .. past+seq-1, as in KV-cache decoding) and compare with the reference at those
    absolute positions. Observations: max_abs_diff, max_rel_diff, max_abs_ref, allclose_ratio,
    nonfinite, rtol, atol, max_position."""
    dev, dt = torch_device(device), torch_dtype(dtype)
    rtol, atol = rtol_atol(tolerance, dtype)
    x = randn((2, heads, seq, head_dim), seed=seed, dtype=dt, device=dev)
    with torch.no_grad():
        out = _rope(x, past, theta)
    ref = _reference(x, torch.arange(past, past + seq), theta)
    obs = compared(out, ref, rtol=rtol, atol=atol)
    obs["max_position"] = past + seq - 1
    return obs


def rope_is_relative_rotation(*, device: str, seq: int = 33, head_dim: int = 64, theta: float = 10000.0,
                              shift: int = 517, seed: int = 0) -> dict:
    """RoPE is a rotation (it preserves every head vector's norm) and attention scores depend only
    on the distance between positions: <R(m) q, R(n) k> == <R(m+s) q, R(n+s) k>.

    Observations: max_norm_rel_change (| |R x| - |x| | / |x|, worst vector), max_score_shift_diff
    (largest change of a q.k score when every position is shifted by `shift`, relative to the
    largest score), max_abs_score."""
    dev = torch_device(device)
    q = randn((1, 2, seq, head_dim), seed=seed, device=dev)
    k = randn((1, 2, seq, head_dim), seed=seed + 1, device=dev)
    with torch.no_grad():
        rq, rk = _rope(q, 0, theta), _rope(k, 0, theta)
        sq, sk = _rope(q, shift, theta), _rope(k, shift, theta)
    norm_in = q.double().norm(dim=-1)
    norm_out = rq.double().norm(dim=-1)
    scores = rq.double() @ rk.double().transpose(-2, -1)
    shifted = sq.double() @ sk.double().transpose(-2, -1)
    max_abs_score = float(scores.abs().max())
    return {
        "max_norm_rel_change": float(((norm_out - norm_in).abs() / norm_in).max()),
        "max_score_shift_diff": float((scores - shifted).abs().max()) / max_abs_score,
        "max_abs_score": max_abs_score,
    }
