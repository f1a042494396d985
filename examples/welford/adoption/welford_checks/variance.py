"""Checks of the welford package: each measures the library against exact arithmetic."""

from __future__ import annotations

import random
from fractions import Fraction

from pv.harness import DeviceUnavailable

import welford


def _exact_mean_and_variance(values: list[float]) -> tuple[Fraction, Fraction]:
    """Mean and sample variance in exact rational arithmetic (every float is a fraction): an
    oracle that shares no code and no rounding with the library."""
    exact = [Fraction(x) for x in values]
    mean = sum(exact) / len(exact)
    return mean, sum((x - mean) ** 2 for x in exact) / (len(exact) - 1)


def variance_far_from_zero(*, device: str, n: int, offset: float, spread: float, seed: int) -> dict[str, float]:
    """Streams n values offset + uniform(-spread, spread) through welford and measures the
    relative error of its mean and variance: mean_rel_error, variance_rel_error."""
    if device != "cpu":
        raise DeviceUnavailable(f"welford is plain Python; it runs on the cpu, not on {device}")
    rng = random.Random(seed)
    values = [offset + rng.uniform(-spread, spread) for _ in range(n)]
    mean, variance = welford.mean_and_variance(values)
    exact_mean, exact_variance = _exact_mean_and_variance(values)
    return {
        "mean_rel_error": float(abs(Fraction(mean) - exact_mean) / abs(exact_mean)),
        "variance_rel_error": float(abs(Fraction(variance) - exact_variance) / exact_variance),
    }
