"""RMSNorm (runtime.kernels.rms_norm) against an independent float64 reference.

    y = x / sqrt(mean(x^2, last dim) + eps) * weight

The reference is written here, in float64, from the input *as the kernel sees it* (already
rounded to the kernel's dtype), so the only difference measured is the kernel's own rounding.
Every input holds one all-zero row (the eps-only case: the output must be exactly zero, never
NaN).
"""

from __future__ import annotations

import torch

from ._util import compared, randn, rtol_atol, torch_device, torch_dtype


def _reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x64, w64 = x.double(), weight.double()
    return x64 / torch.sqrt((x64 * x64).mean(dim=-1, keepdim=True) + eps) * w64


def rms_norm_matches_reference(*, device: str, dtype: str = "float32", rows: int = 37, hidden: int = 97,
                               scale: float = 1.0, eps: float = 1e-6, seed: int = 0,
                               tolerance: dict | None = None) -> dict:
    """Observations: max_abs_diff, max_rel_diff, max_abs_ref, allclose_ratio, nonfinite, rtol,
    atol (for `dtype`), zero_row_max_abs (output of the all-zero row), dtype_preserved."""
    from pvlab.runtime import kernels

    dev, dt = torch_device(device), torch_dtype(dtype)
    rtol, atol = rtol_atol(tolerance, dtype)
    x = randn((3, rows, hidden), seed=seed, scale=scale, dtype=dt, device=dev)
    x[1, rows // 2].zero_()
    # A weight away from 1 so that forgetting it (or applying it twice) is visible.
    weight = (1.0 + 0.5 * randn((hidden,), seed=seed + 1)).to(device=dev, dtype=dt)
    with torch.no_grad():
        out = kernels.rms_norm(x, weight, eps)
    ref = _reference(x, weight, eps)
    obs = compared(out, ref, rtol=rtol, atol=atol)
    # The absolute part of the bound, scaled like the values: for inputs far from 1 in magnitude
    # a fixed atol is meaningless; the prediction uses max_abs_ref for that.
    obs["zero_row_max_abs"] = float(out[1, rows // 2].detach().abs().max().float())
    obs["dtype_preserved"] = out.dtype == dt
    return obs
