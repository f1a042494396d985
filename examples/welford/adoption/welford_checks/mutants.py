"""Planted bugs in welford: each patches the library on entry and restores it on exit.
`pv strength` runs each falsifier under the bugs it declares; it must FAIL (kill them)."""

from __future__ import annotations

from pv.mutation import mutant

import welford


@mutant("textbook_one_pass_variance")
def textbook_one_pass_variance():
    """The formula from the textbook: var = (sum x^2 - n mean^2) / (n - 1), accumulated in one
    pass. Exact in real numbers; in floats it cancels catastrophically far from zero."""
    original_push, original_variance = welford.RunningStats.push, welford.RunningStats.variance

    def push(self, x):
        self.count += 1
        self.mean += (x - self.mean) / self.count
        self._sum_sq = getattr(self, "_sum_sq", 0.0) + x * x

    def variance(self):
        return (self._sum_sq - self.count * self.mean * self.mean) / (self.count - 1)

    welford.RunningStats.push, welford.RunningStats.variance = push, variance
    try:
        yield
    finally:
        welford.RunningStats.push, welford.RunningStats.variance = original_push, original_variance
