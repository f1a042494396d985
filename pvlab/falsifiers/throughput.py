"""Honest throughput measurement, shared by the performance checks and bench/bench_vs_hf.py.

A speed claim is only evidence when the figure is stable: each measurement warms up first (the
first calls compile, autotune and fill allocator caches), then times a steady-state window of
calls several times, and reports the median with its spread. A spread too large for the claim
is not a slow runtime and not a fast one: `measure` raises `UnstableMeasurement`, which the
harness records as ERROR (never a flaky FAIL, never a PASS).
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from typing import Callable

# Dense bf16 tensor-core peak (FLOP/s, no sparsity) by GPU model, from the vendors' data sheets.
# MFU is only reported for a GPU named here: a figure against a guessed peak would be invented.
DENSE_BF16_PEAK = {
    "H100 80GB HBM3": 989.4e12,   # H100 SXM5
    "H100 PCIe": 756.0e12,
    "H200": 989.4e12,             # same compute as the H100 SXM, more memory bandwidth
    "A100": 312.0e12,
}


class UnstableMeasurement(RuntimeError):
    """The repeats of one measurement disagree more than the claim can tolerate."""


@dataclasses.dataclass(frozen=True)
class Throughput:
    median: float          # units per second (tokens/s, steps/s, ...), median over the repeats
    spread: float          # (max - min) / median over the repeats
    repeats: list[float]   # each repeat's units per second, in the order measured

    def as_observations(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}_per_s": self.median, f"{prefix}_spread": self.spread}


def measure(step: Callable[[], object], *, units_per_step: float, warmup: int = 3, window: int = 1,
            repeats: int = 5, synchronize: Callable[[], None] | None = None, min_window_s: float = 1.0,
            max_spread: float = 0.25, what: str = "throughput") -> Throughput:
    """Call `step` `warmup` times, then time `repeats` windows of calls, each window long enough
    to last `min_window_s` (at least `window` calls; the count is calibrated on one timed window
    after the warm-up), around `synchronize()` (e.g. torch.cuda.synchronize, so queued GPU work
    is counted). Python's garbage collector is paused while timing, as `timeit` does: a
    collection landing in one window is noise, not the runtime's speed.

    Returns the median rate; raises UnstableMeasurement when (max - min) / median of the
    repeats exceeds `max_spread`."""
    if repeats < 5:
        raise ValueError(f"a throughput claim needs at least 5 repeats to take a median, got {repeats}")
    if window < 1 or warmup < 1:
        raise ValueError("warmup and window must each be at least 1 call")
    sync = synchronize or (lambda: None)

    def timed(calls: int) -> float:
        started = time.perf_counter()
        for _ in range(calls):
            step()
        sync()
        return time.perf_counter() - started

    for _ in range(warmup):
        step()
    sync()
    collecting = gc.isenabled()
    gc.disable()
    try:
        one = timed(window) / window
        calls = max(window, int(min_window_s / one + 0.999)) if one > 0 else window
        rates = [calls * units_per_step / timed(calls) for _ in range(repeats)]
    finally:
        if collecting:
            gc.enable()
    median = statistics.median(rates)
    spread = (max(rates) - min(rates)) / median
    if spread > max_spread:
        raise UnstableMeasurement(
            f"{what}: the {repeats} repeats range over {spread:.0%} of their median "
            f"({', '.join(f'{r:.4g}' for r in rates)} per s), more than the {max_spread:.0%} the claim "
            "allows; the machine is busy or the window is too short — re-run on a quiet machine")
    return Throughput(median=median, spread=spread, repeats=rates)


def dense_bf16_peak(device_name: str) -> float | None:
    """The dense bf16 peak of a GPU named by torch.cuda.get_device_name(), or None if unknown."""
    for model, peak in DENSE_BF16_PEAK.items():
        if model in device_name:
            return peak
    return None


def training_flops_per_token(*, parameters: int, layers: int, hidden: int, seq_len: int) -> float:
    """Model FLOPs per trained token: 6·N for the matrix products of forward and backward, plus
    12·L·d·T for attention scores and values (the PaLM paper's appendix B accounting)."""
    return 6.0 * parameters + 12.0 * layers * hidden * seq_len


def warm_up_gpu(device, seconds: float = 25.0) -> float:
    """Large bf16 products for `seconds` on a CUDA `device` before anything is timed; returns the
    seconds spent (0 off CUDA). A GPU fresh from idle ramps up under load: on a freshly started
    H100 the first configuration FALSIFY-PERF-HF-001 measured spread 30-40 % over its windows
    twice in one session, and FALSIFY-PERF-MFU-001's windows rose from 52k to 65k tokens/s (a
    22 % spread); after 25 s of products neither did."""
    if getattr(device, "type", None) != "cuda" or seconds <= 0:
        return 0.0
    import torch   # here, not at the top: the rest of this module is plain arithmetic

    started = time.perf_counter()
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    while time.perf_counter() - started < seconds:
        for _ in range(8):
            a @ a
        torch.cuda.synchronize(device)
    del a
    torch.cuda.empty_cache()
    return time.perf_counter() - started
