"""Sampling at temperature T draws token i with probability softmax(logits / T)_i.

FALSIFY-DECODING-CONTROLS-002 proves that a seed fixes the sample, not what is sampled: a sampler
that scales the logits the wrong way (logits * T), ignores T, or draws from the wrong row is as
repeatable as the right one. Here fixed logits are sampled many times through
`kernels.pick_next_token` (the seam generate and generate_batch call, top-k off), and the
empirical frequencies are compared with the distribution written out in float64 in this check:
p_i = exp(l_i / T - max_j l_j / T) / sum_j exp(l_j / T - max_j l_j / T). The oracle shares no
code with the sampler (no kernels.softmax_reference, no torch.multinomial).

The bound is distribution-free: total variation TV(p_hat, p) = max over token subsets A of
p_hat(A) - p(A); for one A, Hoeffding gives P(p_hat(A) - p(A) >= t) <= exp(-2 N t^2) for N
independent draws, and a union over the 2^V - 2 non-trivial subsets and the m (row, temperature)
tests gives P(any TV >= t) <= delta for t = sqrt((ln(2^V - 2) + ln(m / delta)) / (2 N)). The
sampler computes in float32, so its own distribution q may differ from the float64 p by
rounding: |q_i - p_i| <= atol + rtol p_i (float32 tolerance), i.e. TV(q, p) <= (V atol + rtol) / 2,
added to t.

FALSIFY-SAMPLING-LAW-002 samples the same rows with top_k = k: no draw may fall outside the k
largest logits (chosen in this check by sorting the row, not by the sampler's torch.topk), and the
frequencies must stay within the same kind of bound of the float64 softmax(logits / T)
renormalised over those k tokens. With every draw inside the k kept tokens, TV is a maximum over
the 2^k - 2 non-trivial subsets of them, so the union runs over sum over tests of (2^k - 2)
events, and the rounding term is (k atol + rtol) / 2 for the largest k.
"""

from __future__ import annotations

import math

from ._util import rtol_atol, torch_device

# Two fixed logit rows over V = 12 tokens, sampled interleaved in one batch (a sampler that mixes
# rows shows): the second is shifted by +40 (a sampler without max subtraction overflows at
# T = 0.5) and masks one token with -inf (it must never be drawn).
LOGIT_ROWS = (
    (2.5, 1.8, 1.2, 0.9, 0.4, 0.0, -0.3, -0.8, -1.5, -2.0, 0.6, 1.5),
    (40.0, 41.1, 39.2, 40.7, 38.5, float("-inf"), 40.3, 37.9, 41.6, 39.8, 40.1, 38.8),
)


def _softmax64(row: tuple, temperature: float) -> list[float]:
    """softmax(row / T) in float64, written out (the oracle)."""
    scaled = [x / temperature for x in row]
    top = max(scaled)
    weights = [math.exp(z - top) if z != float("-inf") else 0.0 for z in scaled]
    total = math.fsum(weights)
    return [w / total for w in weights]


def _top_k_softmax64(row: tuple, temperature: float, k: int) -> tuple[list[float], set[int]]:
    """softmax(row / T) in float64 renormalised over the k largest logits of `row`, and their
    indices: the oracle of top-k sampling, chosen by sorting the row here (ties are refused, as
    the rows are meant to have none at the k-th place), with no torch.topk."""
    order = sorted(range(len(row)), key=lambda i: (-row[i], i))
    kept = set(order[:k])
    if k < len(row) and row[order[k - 1]] == row[order[k]]:
        raise ValueError(f"logit row has a tie at its {k}-th largest value: top-{k} is not one set")
    return _softmax64(tuple(x if i in kept else float("-inf") for i, x in enumerate(row)), temperature), kept


def _hoeffding_tv(subsets: int, tests: int, samples: int, failure_probability: float) -> float:
    """t with subsets * tests * exp(-2 N t^2) = delta: a total-variation deviation that N correct
    draws exceed, over any of `subsets` token subsets in any of `tests` tests, with probability
    at most delta (Hoeffding, union bound)."""
    return math.sqrt((math.log(subsets) + math.log(tests / failure_probability)) / (2 * samples))


def _draw(logits, temperature: float, seed: int, top_k: int | None, expected_rows: int):
    """One seeded kernels.pick_next_token call on the (R, V) batch `logits`; the picked ids as a
    flat int64 CPU tensor."""
    import torch

    from pvlab.runtime import kernels

    generator = torch.Generator(device=logits.device)
    generator.manual_seed(seed)
    picked = kernels.pick_next_token(logits, temperature, generator, top_k).to("cpu", torch.int64).reshape(-1)
    if picked.numel() != expected_rows:
        raise ValueError(f"pick_next_token returned {picked.numel()} tokens for {expected_rows} rows")
    return picked


def _row_counts(picked, r: int, rows: int, vocab: int) -> list[int]:
    """Counts per token id of row r's draws (rows interleaved r, r + rows, ...); ids clamped into
    [0, V) (out-of-range ids are counted by the caller)."""
    import torch

    return torch.bincount(picked[r::rows].clamp(0, vocab - 1), minlength=vocab).tolist()


def _tv(counts: list[int], samples: int, expected: list[float]) -> float:
    return 0.5 * math.fsum(abs(c / samples - p) for c, p in zip(counts, expected))


def sampling_matches_softmax_law(*, device: str, temperatures: list | None = None, samples: int = 50000,
                                 failure_probability: float = 1e-6, seed: int = 0,
                                 tolerance: dict | None = None) -> dict:
    """For each temperature T and each of the two logit rows, `samples` draws through
    kernels.pick_next_token(logits, T, seeded generator, top_k=None) (all rows of one (2N, V)
    batch per T); the empirical frequencies against softmax(row / T) in float64.

    Observations: max_tv (the worst total-variation distance over rows and temperatures),
    tv_bound (the Hoeffding-union bound for `samples`, V, the number of tests and
    `failure_probability`, plus the float32 rounding term), statistical_bound, rounding_bound,
    tv_<row>_T<T> for each test, masked_draws (draws of a -inf token), out_of_range (token ids
    outside [0, V)), tests, samples, vocab, rtol, atol."""
    import torch

    dev = torch_device(device)
    temperatures = [float(t) for t in (temperatures or [0.5, 2.0])]
    vocab = len(LOGIT_ROWS[0])
    rows = len(LOGIT_ROWS)
    tests = rows * len(temperatures)
    rtol, atol = rtol_atol(tolerance, "float32")
    statistical = _hoeffding_tv(2 ** vocab - 2, tests, samples, failure_probability)
    rounding = (vocab * atol + rtol) / 2
    table = torch.tensor(LOGIT_ROWS, dtype=torch.float32)
    logits = table.repeat(samples, 1).to(dev)                                   # row r at indices r, r+2, ...
    obs: dict = {}
    worst = 0.0
    masked = out_of_range = 0
    for t_index, temperature in enumerate(temperatures):
        picked = _draw(logits, temperature, seed * 1000 + t_index, None, rows * samples)
        out_of_range += int(((picked < 0) | (picked >= vocab)).sum())
        for r, row in enumerate(LOGIT_ROWS):
            counts = _row_counts(picked, r, rows, vocab)
            tv = _tv(counts, samples, _softmax64(row, temperature))
            masked += sum(c for c, x in zip(counts, row) if x == float("-inf"))
            obs[f"tv_{r}_T{temperature:g}"] = tv
            worst = max(worst, tv)
    obs.update({"max_tv": worst, "tv_bound": statistical + rounding, "statistical_bound": statistical,
                "rounding_bound": rounding, "masked_draws": masked, "out_of_range": out_of_range,
                "tests": tests, "samples": samples, "vocab": vocab, "rtol": rtol, "atol": atol})
    return obs


def top_k_sampling_matches_law(*, device: str, top_ks: list | None = None, temperatures: list | None = None,
                               samples: int = 50000, failure_probability: float = 1e-6, seed: int = 0,
                               tolerance: dict | None = None) -> dict:
    """For each temperature T and each k in `top_ks`, `samples` draws of each of the two logit
    rows through kernels.pick_next_token(logits, T, seeded generator, top_k=k) (one (2N, V) batch
    per (T, k)); no draw may fall outside the row's k largest logits, and the frequencies are
    compared with softmax(row / T) in float64 renormalised over those k tokens.

    Observations: outside_top_k (draws of a token outside the row's k largest logits, ids outside
    [0, V) included), max_tv (the worst total-variation distance over rows, k and T), tv_bound
    (the Hoeffding-union bound over the sum of 2^k - 2 subsets of every test, plus the float32
    rounding term for the largest k), statistical_bound, rounding_bound, tv_<row>_k<k>_T<T> for
    each test, tests, samples, vocab, rtol, atol."""
    import torch

    dev = torch_device(device)
    top_ks = [int(k) for k in (top_ks or [1, 3, 5])]
    temperatures = [float(t) for t in (temperatures or [0.7, 1.5])]
    vocab = len(LOGIT_ROWS[0])
    rows = len(LOGIT_ROWS)
    if not all(1 <= k < vocab for k in top_ks):
        raise ValueError(f"top_ks {top_ks} must lie in [1, {vocab}): top_k >= V is top-k off")
    tests = rows * len(top_ks) * len(temperatures)
    subsets = rows * len(temperatures) * sum(2 ** k - 2 for k in top_ks)          # k = 1: none
    rtol, atol = rtol_atol(tolerance, "float32")
    statistical = _hoeffding_tv(subsets, 1, samples, failure_probability) if subsets else 0.0
    rounding = (max(top_ks) * atol + rtol) / 2
    logits = torch.tensor(LOGIT_ROWS, dtype=torch.float32).repeat(samples, 1).to(dev)
    obs: dict = {}
    worst = 0.0
    outside = 0
    for t_index, temperature in enumerate(temperatures):
        for k_index, k in enumerate(top_ks):
            picked = _draw(logits, temperature, seed * 1000 + 100 * t_index + k_index, k, rows * samples)
            for r, row in enumerate(LOGIT_ROWS):
                expected, kept = _top_k_softmax64(row, temperature, k)
                own = picked[r::rows]
                outside += int((~torch.isin(own, torch.tensor(sorted(kept), dtype=torch.int64))).sum())
                tv = _tv(_row_counts(picked, r, rows, vocab), samples, expected)
                obs[f"tv_{r}_k{k}_T{temperature:g}"] = tv
                worst = max(worst, tv)
    obs.update({"outside_top_k": outside, "max_tv": worst, "tv_bound": statistical + rounding,
                "statistical_bound": statistical, "rounding_bound": rounding, "tests": tests,
                "samples": samples, "vocab": vocab, "rtol": rtol, "atol": atol})
    return obs
