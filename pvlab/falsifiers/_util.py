"""Helpers shared by the checks: device resolution, dtype names, tolerance lookup, diffs."""

from __future__ import annotations

from typing import Any, Mapping

import torch


def device_unavailable(message: str) -> Exception:
    """An instance of pv.harness.DeviceUnavailable (imported lazily: checks must import cheaply,
    and the harness must stay importable without torch)."""
    try:
        from pv.harness import DeviceUnavailable
    except ImportError:  # pragma: no cover - pv without a harness: still a distinct, named error
        class DeviceUnavailable(Exception):  # type: ignore[no-redef]
            pass
    return DeviceUnavailable(message)


def torch_device(device: str) -> torch.device:
    """The torch.device for a falsifier device name, or DeviceUnavailable when it is absent.

    Only a request for cuda asks torch.cuda anything (a cpu run never initialises CUDA)."""
    if device == "cpu":
        return torch.device("cpu")
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise device_unavailable(f"{device}: no CUDA GPU on this machine (torch {torch.__version__})")
        return torch.device(device)
    raise ValueError(f"unknown device {device!r} (expected cpu or cuda)")


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "float64": torch.float64}


def torch_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPES)}") from None


# torch.testing's defaults, used when a check is called without a tolerance table (e.g. from a
# unit test); under pv the harness always passes the merged table of pv.tolerance.
_FALLBACK = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5),
             "float64": (1e-7, 1e-7)}


def rtol_atol(tolerance: Mapping[str, Mapping[str, float]] | None, dtype: str) -> tuple[float, float]:
    if tolerance and dtype in tolerance:
        return float(tolerance[dtype]["rtol"]), float(tolerance[dtype]["atol"])
    return _FALLBACK[dtype]


def diff_stats(actual: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    """max |a - r|, max |a - r| / |r| (over |r| > 0), max |r|, and whether any value is non-finite.

    Both are compared in float64 on the CPU; a NaN anywhere makes max_abs_diff NaN (so every
    `<=` prediction on it is false) and sets nonfinite."""
    a = actual.detach().to("cpu", torch.float64)
    r = reference.detach().to("cpu", torch.float64)
    if a.shape != r.shape:
        raise ValueError(f"shape mismatch: kernel gave {tuple(a.shape)}, reference {tuple(r.shape)}")
    diff = (a - r).abs()
    nonfinite = int((~torch.isfinite(a)).sum()) + int((~torch.isfinite(r)).sum())
    max_abs = float(diff.max()) if diff.numel() else 0.0
    if nonfinite:
        max_abs = float("nan")
    nonzero = r.abs() > 0
    rel = float((diff[nonzero] / r.abs()[nonzero]).max()) if bool(nonzero.any()) else 0.0
    if nonfinite:
        rel = float("nan")
    return {"max_abs_diff": max_abs, "max_rel_diff": rel,
            "max_abs_ref": float(r.abs().max()) if r.numel() else 0.0, "nonfinite": nonfinite}


def compared(actual: torch.Tensor, reference: torch.Tensor, *, rtol: float, atol: float,
             prefix: str = "") -> dict[str, Any]:
    """diff_stats plus the tolerance used and the elementwise allclose verdict's worst ratio
    (|a - r| / (atol + rtol |r|); <= 1 means torch.testing.assert_close would pass)."""
    stats = diff_stats(actual, reference)
    a = actual.detach().to("cpu", torch.float64)
    r = reference.detach().to("cpu", torch.float64)
    ratio = ((a - r).abs() / (atol + rtol * r.abs())).max() if r.numel() else torch.tensor(0.0)
    stats.update(rtol=rtol, atol=atol, allclose_ratio=float("nan") if stats["nonfinite"] else float(ratio))
    return {prefix + k: v for k, v in stats.items()}


def generator(seed: int) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(seed)


def randn(shape: tuple[int, ...], *, seed: int, scale: float = 1.0, dtype: torch.dtype = torch.float32,
          device: torch.device | str = "cpu") -> torch.Tensor:
    """Normal values drawn on the CPU (the same on every device), then moved and cast."""
    values = torch.randn(shape, generator=generator(seed), dtype=torch.float64) * scale
    return values.to(device=device, dtype=dtype)
