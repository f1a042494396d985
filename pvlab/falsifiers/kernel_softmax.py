"""Softmax and log-softmax (runtime.kernels.softmax_reference / log_softmax_reference) against
float64 references, including logits of magnitude 1e4 where exp overflows without the max
subtraction, and rows with -inf entries (the causal mask).
"""

from __future__ import annotations

import torch

from ._util import compared, randn, rtol_atol, torch_device, torch_dtype


def _logits(rows: int, width: int, *, seed: int, scale: float, offset: float, masked: bool,
            dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """N(0, scale) logits shifted by +offset on even rows and -offset on odd rows (exp(+1e4)
    overflows and exp(-1e4) underflows to 0 without the max subtraction), plus one row of
    extremes, +-(offset + 10 scale) side by side."""
    x = randn((rows, width), seed=seed, scale=scale, dtype=torch.float32)
    signs = torch.where(torch.arange(rows) % 2 == 0, 1.0, -1.0)[:, None]
    x = x + offset * signs
    extreme = abs(offset) + 10 * abs(scale)
    x[0, 0::2], x[0, 1::2] = extreme, -extreme
    if masked:
        # Like a causal mask: row r may see the first r + 1 entries (every row keeps at least one).
        keep = torch.arange(width)[None, :] <= torch.arange(rows)[:, None] % width
        x = x.masked_fill(~keep, float("-inf"))
    return x.to(device=device, dtype=dtype)


def _against_float64(kernel, definition, *, device: str, dtype: str, tolerance: dict | None, rows: int,
                     width: int, seed: int, scale: float, offset: float, masked: bool) -> tuple[torch.Tensor, dict]:
    """`kernel` on seeded logits on the device against torch's `definition` of it in float64 on
    the CPU: the kernel's output and the comparison (compared(), plus nonfinite)."""
    dev, dt = torch_device(device), torch_dtype(dtype)
    rtol, atol = rtol_atol(tolerance, dtype)
    x = _logits(rows, width, seed=seed, scale=scale, offset=offset, masked=masked, dtype=dt, device=dev)
    with torch.no_grad():
        out = kernel(x)
    ref = definition(x.double().cpu(), dim=-1)
    obs = compared(out, ref, rtol=rtol, atol=atol)
    obs["nonfinite"] = int((~torch.isfinite(out)).sum())
    return out, obs


def softmax_matches_reference(*, device: str, dtype: str = "float32", rows: int = 31, width: int = 1021,
                              scale: float = 3.0, offset: float = 0.0, masked: bool = False,
                              seed: int = 0, tolerance: dict | None = None) -> dict:
    """Observations: max_abs_diff, max_rel_diff, max_abs_ref, allclose_ratio, nonfinite (NaN/Inf in
    the kernel's output), rtol, atol, max_row_sum_error (| sum_j p_ij - 1 |, worst row)."""
    from pvlab.runtime import kernels

    out, obs = _against_float64(kernels.softmax_reference, torch.softmax, device=device, dtype=dtype,
                                tolerance=tolerance, rows=rows, width=width, seed=seed, scale=scale,
                                offset=offset, masked=masked)
    obs["max_row_sum_error"] = float((out.double().sum(dim=-1) - 1.0).abs().max())
    return obs


def log_softmax_matches_reference(*, device: str, dtype: str = "float32", rows: int = 31, width: int = 1021,
                                  scale: float = 3.0, offset: float = 1e4, seed: int = 0,
                                  tolerance: dict | None = None) -> dict:
    """log_softmax on unmasked logits (every output is finite and <= 0). Observations as
    softmax_matches_reference, plus max_value (must be <= 0, a log-probability)."""
    from pvlab.runtime import kernels

    out, obs = _against_float64(kernels.log_softmax_reference, torch.log_softmax, device=device, dtype=dtype,
                                tolerance=tolerance, rows=rows, width=width, seed=seed, scale=scale,
                                offset=offset, masked=False)
    obs["max_value"] = float(out.double().max())
    return obs
