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

    from pvlab.runtime import kernels

    dev = torch_device(device)
    temperatures = [float(t) for t in (temperatures or [0.5, 2.0])]
    vocab = len(LOGIT_ROWS[0])
    rows = len(LOGIT_ROWS)
    tests = rows * len(temperatures)
    rtol, atol = rtol_atol(tolerance, "float32")
    statistical = math.sqrt((math.log(2 ** vocab - 2) + math.log(tests / failure_probability)) / (2 * samples))
    rounding = (vocab * atol + rtol) / 2
    table = torch.tensor(LOGIT_ROWS, dtype=torch.float32)
    logits = table.repeat(samples, 1).to(dev)                                   # row r at indices r, r+2, ...
    obs: dict = {}
    worst = 0.0
    masked = out_of_range = 0
    for t_index, temperature in enumerate(temperatures):
        generator = torch.Generator(device=dev)
        generator.manual_seed(seed * 1000 + t_index)
        picked = kernels.pick_next_token(logits, temperature, generator, None).to("cpu", torch.int64).reshape(-1)
        if picked.numel() != rows * samples:
            raise ValueError(f"pick_next_token returned {picked.numel()} tokens for {rows * samples} rows")
        out_of_range += int(((picked < 0) | (picked >= vocab)).sum())
        for r, row in enumerate(LOGIT_ROWS):
            drawn = picked[r::rows].clamp(0, vocab - 1)
            counts = torch.bincount(drawn, minlength=vocab).tolist()
            expected = _softmax64(row, temperature)
            tv = 0.5 * math.fsum(abs(c / samples - p) for c, p in zip(counts, expected))
            masked += sum(c for c, x in zip(counts, row) if x == float("-inf"))
            obs[f"tv_{r}_T{temperature:g}"] = tv
            worst = max(worst, tv)
    obs.update({"max_tv": worst, "tv_bound": statistical + rounding, "statistical_bound": statistical,
                "rounding_bound": rounding, "masked_draws": masked, "out_of_range": out_of_range,
                "tests": tests, "samples": samples, "vocab": vocab, "rtol": rtol, "atol": atol})
    return obs
