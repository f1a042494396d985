"""The tokens of a sampled continuation are independent draws, step after step and row after row.

sampling-law's -001/-002 judge one call of the sampler: thousands of draws from fixed logits in
one batch, against the float64 softmax. They cannot see how draws relate *across calls*: a
generator reseeded (or rebuilt from the seed) before every step, shared badly between rows, or a
cached draw reused, gives each step the right marginal law while the tokens of one continuation
repeat one another. Here the runtime's own generation loops (`runtime.generate`,
`runtime.generate_batch`) sample a long continuation, keeping each step's next-token logits
(`output_logits=True`), and the draws are tested against independence given those logits:

* **repeats**: R = #{t >= 1 : x_t == x_(t-1)} within a continuation. If x_t is drawn from
  p_t = softmax(logits_t / T) independently of the past, then P(x_t == x_(t-1) | past) =
  p_t(x_(t-1)), so M = R - sum_t p_t(x_(t-1)) is a martingale whose increments lie in an interval
  of length 1. Azuma-Hoeffding: P(|M| >= a) <= 2 exp(-2 a^2 / n) over n increments;
* **coincidences** across the rows of one batch given the same prompt: C = #{(t, r >= 1) :
  x_(t,r) == x_(t,0)}; given everything before it, row r's draw at step t is independent of
  row 0's, so C - sum p_(t,r)(x_(t,0)) is a martingale of the same kind (the rows' draws of a step
  taken in row order).

p_t is written out in float64 from the logits the runtime recorded (sampling_law's oracle, no
sampler code, no torch.multinomial); the bound is derived, not tuned: each of the three statistics (the single
API's repeats, the batch's repeats, the batch's coincidences) gets delta / 3, so a correct
sampler fails with probability at most `failure_probability` whatever the model and temperature.
A near-uniform law (a random-weights model at T > 1) makes the expected repeat count small and a
dependent sampler's large: under a per-step reseed nearly every token repeats the one before.
"""

from __future__ import annotations

import math

from ._util import torch_device
from .sampling_law import _softmax64


def _azuma(increments: int, failure_probability: float) -> float:
    """a with 2 exp(-2 a^2 / n) = delta: a martingale of n increments, each within an interval of
    length 1, strays |M| >= a with probability at most delta (Azuma-Hoeffding)."""
    return math.sqrt(increments * math.log(2 / failure_probability) / 2)


def _repeats(tokens: list[int], laws: list[list[float]]) -> tuple[int, float]:
    """(R, sum of p_t(x_(t-1))) over t >= 1 of one continuation."""
    observed = sum(int(tokens[t] == tokens[t - 1]) for t in range(1, len(tokens)))
    expected = math.fsum(laws[t][tokens[t - 1]] for t in range(1, len(tokens)))
    return observed, expected


def continuation_draws_are_independent(*, device: str, config: str = "tiny", prompt_tokens: int = 4,
                                       new_tokens: int = 120, rows: int = 4, temperature: float = 1.5,
                                       seed: int = 0, failure_probability: float = 1e-6) -> dict:
    """Sample `new_tokens` tokens with runtime.generate and, from `rows` copies of the same prompt,
    with runtime.generate_batch (no eos: every continuation runs to the end), on a model of
    `config` with random weights (seed 0), at `temperature`, keeping each step's logits.

    Observations: single_repeats / single_expected (R and its expectation given the logits),
    batch_repeats / batch_expected (summed over rows), batch_coincidences / coincidences_expected,
    single_excess, batch_excess, coincidence_excess (|R - E| over the Azuma bound a of that
    statistic: above 1 is a dependence a correct sampler shows with probability below delta / 3),
    max_excess, single_bound / batch_bound / coincidence_bound (a), draws (tokens sampled in all),
    expected_draws, vocab."""
    import torch

    from pvlab import runtime

    dev = torch_device(device)
    model = runtime.init_model(config=config, weights="random", seed=0, device=dev, path="reference")
    vocab = model.config.vocab_size
    prompt = torch.randint(0, vocab, (prompt_tokens,), generator=torch.Generator().manual_seed(seed)).tolist()
    delta = failure_probability / 3

    single = runtime.generate(model, prompt, max_new_tokens=new_tokens, temperature=temperature, seed=seed,
                              eos_token_id=None, output_logits=True)
    batch = runtime.generate_batch(model, [prompt] * rows, max_new_tokens=new_tokens, temperature=temperature,
                                   seed=seed + 1, eos_token_id=None, output_logits=True)
    continuations = [single, *batch]
    for generation in continuations:
        if generation.logits is None or len(generation.logits) != len(generation.new_ids):
            raise RuntimeError("output_logits=True did not keep one logits row per generated token")
    laws = [[_softmax64(row.tolist(), temperature) for row in g.logits.double()] for g in continuations]  # the law each draw must follow

    single_repeats, single_expected = _repeats(single.new_ids, laws[0])
    batch_repeats, batch_expected = 0, 0.0
    for g, law in zip(batch, laws[1:]):
        r, e = _repeats(g.new_ids, law)
        batch_repeats, batch_expected = batch_repeats + r, batch_expected + e
    steps = min(len(g.new_ids) for g in batch) if batch else 0
    coincidences = sum(int(batch[r].new_ids[t] == batch[0].new_ids[t]) for t in range(steps) for r in range(1, rows))
    coincidences_expected = math.fsum(laws[1 + r][t][batch[0].new_ids[t]] for t in range(steps) for r in range(1, rows))

    single_bound = _azuma(max(len(single.new_ids) - 1, 1), delta)
    batch_bound = _azuma(max(sum(len(g.new_ids) - 1 for g in batch), 1), delta)
    coincidence_bound = _azuma(max(steps * (rows - 1), 1), delta)
    excess = {
        "single_excess": abs(single_repeats - single_expected) / single_bound,
        "batch_excess": abs(batch_repeats - batch_expected) / batch_bound,
        "coincidence_excess": abs(coincidences - coincidences_expected) / coincidence_bound,
    }
    return {
        "single_repeats": single_repeats, "single_expected": single_expected,
        "batch_repeats": batch_repeats, "batch_expected": batch_expected,
        "batch_coincidences": coincidences, "coincidences_expected": coincidences_expected,
        **excess, "max_excess": max(excess.values()),
        "single_bound": single_bound, "batch_bound": batch_bound, "coincidence_bound": coincidence_bound,
        "draws": sum(len(g.new_ids) for g in continuations), "expected_draws": new_tokens * (1 + rows),
        "vocab": vocab,
    }
