"""Statistics of independent N(0, s^2) draws, judged from the drawn values alone (float64): what
the initialisation checks (bias_initialisation, weight_initialisation) hold a runtime's draws to.

* sample second moment m2 = sum(x^2) / n: n m2 / s^2 ~ chi-square(n); Laurent and Massart (2000,
  lemma 1): P(X - n >= 2 sqrt(n z) + 2z) <= e^-z and P(n - X >= 2 sqrt(n z)) <= e^-z. With z = 18:
  sqrt(m2) / s in [sqrt(max(0, 1 - 2 sqrt(z/n))), sqrt(1 + 2 sqrt(z/n) + 2z/n)];
* sample mean: mean sqrt(n) / s ~ N(0, 1); P(|Z| > 6) = 2.0e-9;
* cosine c of two independent N(0, s^2 I) vectors of length n: distributed as one coordinate of a
  uniform unit vector, P(|c| > t) <= 2 exp(-n t^2 / 2) (K. Ball, lemma 2.2); t = 6 / sqrt(n) gives
  2 e^-18. Tensors of different lengths are compared on their common prefix;
* pooled values / s against the standard normal CDF: Dvoretzky-Kiefer-Wolfowitz (Massart's
  constant), P(sup |F_n - Phi| > e) <= 2 exp(-2 n e^2); e = 3 / sqrt(n) gives 2 e^-18.
"""

from __future__ import annotations

import math
from typing import Mapping

import torch

Z = 18.0                 # every tail bound here is exp(-Z) or 2 exp(-Z) per event
CORRELATION_SIGMAS = 6.0  # |c| <= 6 / sqrt(n): 2 exp(-36 / 2) = 2 exp(-Z)
MEAN_SIGMAS = 6.0


def std_bounds(n: int) -> tuple[float, float]:
    """[low, high] of sqrt(mean x^2) / s for n independent N(0, s^2) values (Laurent-Massart, z = Z)."""
    lower = math.sqrt(max(0.0, 1.0 - 2.0 * math.sqrt(Z / n)))
    upper = math.sqrt(1.0 + 2.0 * math.sqrt(Z / n) + 2.0 * Z / n)
    return lower, upper


def spread(x: torch.Tensor, std: float) -> tuple[float, bool, bool]:
    """(sqrt(mean x^2) / std, outside its chi-square bound?, |mean| sqrt(n) / std > MEAN_SIGMAS?)."""
    ratio = float(x.square().mean().sqrt()) / std
    lower, upper = std_bounds(x.numel())
    return ratio, not lower <= ratio <= upper, abs(float(x.mean())) * math.sqrt(x.numel()) / std > MEAN_SIGMAS


def pairs(values: Mapping[str, torch.Tensor]) -> tuple[int, int, float, int | None]:
    """Over every pair of `values` on their common prefix: (equal pairs, pairs with |cosine| >
    CORRELATION_SIGMAS / sqrt(n), the largest |cosine|, the shortest n compared)."""
    names = sorted(values)
    equal = correlated = 0
    largest, shortest = 0.0, None
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            n = min(values[a].numel(), values[b].numel())
            x, y = values[a][:n], values[b][:n]
            shortest = n if shortest is None else min(shortest, n)
            equal += int(torch.equal(x, y))
            cosine = float(x @ y) / max(float(x.norm() * y.norm()), 1e-300)
            largest = max(largest, abs(cosine))
            correlated += int(abs(cosine) > CORRELATION_SIGMAS / math.sqrt(n))
    return equal, correlated, largest, shortest


def ks_to_standard_normal(pooled: torch.Tensor) -> tuple[float, float]:
    """(sup distance of the empirical CDF of `pooled` from the standard normal's, its DKW bound 3 / sqrt(n))."""
    n = pooled.numel()
    ordered = pooled.sort().values
    cdf = 0.5 * (1.0 + torch.erf(ordered / math.sqrt(2.0)))
    ranks = torch.arange(1, n + 1, dtype=torch.float64)
    return float(torch.maximum(ranks / n - cdf, cdf - (ranks - 1) / n).max()), 3.0 / math.sqrt(n)
