"""Helpers for checks that measure torch code (import them from a check; pv itself never does).

    from pv.testing.torch_helpers import torch_device, randn, compared, rtol_atol, torch_dtype

    def my_check(*, device, rows, dim, dtype, seed, tolerance):
        dev = torch_device(device)              # first: an absent GPU is a SKIP, not an ERROR
        x = randn((rows, dim), seed=seed, dtype=torch_dtype(dtype), device=dev)
        rtol, atol = rtol_atol(tolerance, dtype)
        return compared(my_lib.f(x), reference_in_float64(x), rtol=rtol, atol=atol)

- `torch_device(name)`: the torch.device for "cpu" / "cuda" / "cuda:N", or
  pv.harness.DeviceUnavailable when that device is absent (pv records a SKIP, never a pass). A
  cpu request asks torch.cuda nothing.
- `randn(shape, seed=...)`: normal values drawn on the CPU from their own generator in float64,
  then moved and cast: the same inputs on every device and every run, and the global RNG untouched.
- `diff_stats(actual, reference)` / `compared(actual, reference, rtol=, atol=)`: the error
  observations a prediction bounds, computed in float64 on the CPU: max |a - r|, max |a - r|/|r|,
  max |r|, the count of non-finite values (a NaN anywhere makes max_abs_diff NaN, so every `<=`
  on it is false), and with `compared` the tolerance used and the worst elementwise allclose
  ratio |a - r| / (atol + rtol |r|) (<= 1 where torch.testing.assert_close would pass).
- `rtol_atol(tolerance, dtype)`: one dtype's (rtol, atol) from the table pv passes a check that
  declares a `tolerance` parameter (pv.tolerance: torch.testing's defaults merged with the
  falsifier's override).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from pv.harness import DeviceUnavailable

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16,
          "float16": torch.float16}

# torch.testing's defaults (rtol, atol), for a check called without pv's tolerance table (a
# unit test calling it directly); under pv the harness always passes the merged table.
_DEFAULTS = {"float64": (1e-7, 1e-7), "float32": (1.3e-6, 1e-5), "bfloat16": (1.6e-2, 1e-5),
             "float16": (1e-3, 1e-5)}


def torch_device(device: str) -> torch.device:
    """The device a falsifier names, or DeviceUnavailable (a SKIP) when this machine lacks it."""
    if device == "cpu":
        return torch.device("cpu")
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise DeviceUnavailable(f"{device}: no CUDA device on this machine (torch {torch.__version__})")
        return torch.device(device)
    raise ValueError(f"unknown device {device!r}: pv falsifiers run on cpu or cuda")


def torch_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPES)}") from None


def rtol_atol(tolerance: Mapping[str, Mapping[str, float]] | None, dtype: str) -> tuple[float, float]:
    if tolerance and dtype in tolerance:
        return float(tolerance[dtype]["rtol"]), float(tolerance[dtype]["atol"])
    return _DEFAULTS[dtype]


def generator(seed: int) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(int(seed))


def randn(shape: tuple[int, ...], *, seed: int, scale: float = 1.0, dtype: torch.dtype = torch.float32,
          device: torch.device | str = "cpu") -> torch.Tensor:
    values = torch.randn(tuple(shape), generator=generator(seed), dtype=torch.float64) * scale
    return values.to(device=device, dtype=dtype)


def diff_stats(actual: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    a = actual.detach().to("cpu", torch.float64)
    r = reference.detach().to("cpu", torch.float64)
    if a.shape != r.shape:
        raise ValueError(f"shape mismatch: the code gave {tuple(a.shape)}, the reference {tuple(r.shape)}")
    nonfinite = int((~torch.isfinite(a)).sum()) + int((~torch.isfinite(r)).sum())
    diff = (a - r).abs()
    nonzero = r.abs() > 0
    if nonfinite:
        max_abs = max_rel = float("nan")
    else:
        max_abs = float(diff.max()) if diff.numel() else 0.0
        max_rel = float((diff[nonzero] / r.abs()[nonzero]).max()) if bool(nonzero.any()) else 0.0
    return {"max_abs_diff": max_abs, "max_rel_diff": max_rel,
            "max_abs_ref": float(r.abs().max()) if r.numel() else 0.0, "nonfinite": nonfinite}


def compared(actual: torch.Tensor, reference: torch.Tensor, *, rtol: float, atol: float,
             prefix: str = "") -> dict[str, Any]:
    stats: dict[str, Any] = dict(diff_stats(actual, reference))
    a = actual.detach().to("cpu", torch.float64)
    r = reference.detach().to("cpu", torch.float64)
    ratio = float(((a - r).abs() / (atol + rtol * r.abs())).max()) if r.numel() else 0.0
    stats.update(rtol=rtol, atol=atol, allclose_ratio=float("nan") if stats["nonfinite"] else ratio)
    return {prefix + k: v for k, v in stats.items()}
