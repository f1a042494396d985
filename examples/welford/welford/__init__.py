"""welford: streaming mean and variance with Welford's algorithm (1962).

A stand-in for an outside project that adopts pv: plain Python, nothing of pv's own
repository. The point of the algorithm is numerical: the textbook one-pass formula
var = (sum x^2 - n mean^2) / (n - 1) subtracts two huge, nearly equal numbers when the data
sit far from zero (timestamps, sensor readings with an offset) and loses every digit; Welford
updates the mean and the sum of squared deviations instead, and keeps them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class RunningStats:
    """Mean and sample variance of the values pushed so far, in O(1) memory."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0  # sum of squared deviations from the current mean

    def push(self, x: float) -> None:
        self.count += 1
        delta = x - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (x - self.mean)  # the old and the new deviation: no cancellation

    def variance(self) -> float:
        """Sample variance (divides by n - 1)."""
        if self.count < 2:
            raise ValueError("the sample variance needs at least two values")
        return self.m2 / (self.count - 1)


def mean_and_variance(values: Iterable[float]) -> tuple[float, float]:
    stats = RunningStats()
    for x in values:
        stats.push(x)
    return stats.mean, stats.variance()
