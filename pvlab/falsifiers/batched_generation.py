"""Batched greedy generation with left padding (runtime.generate.generate_batch) gives every row
the tokens and logits it gets alone (runtime.generate.generate).

Left padding shifts every shorter prompt to the right. If positions are not derived from the
attention mask, a padded row is rotated as if its prompt started at the first padding column
(the public defect: positions taken from the cache index, shared by the whole batch); if the mask
does not reach attention, the row attends to padding. Either shows as different logits — and
soon different tokens — for every row shorter than the longest. The model is the tiny preset
with random weights of std 0.1 (spread logits: greedy choices are rarely near-ties).
"""

from __future__ import annotations

import torch

from . import fixtures
from ._util import compared, generator, rtol_atol, torch_device


def left_padded_batch_matches_alone(*, device: str, path: str | None = None, prompt_lengths: list | None = None,
                                    new_tokens: int = 12, seed: int = 0, tolerance: dict | None = None) -> dict:
    """Greedy generate_batch over prompts of `prompt_lengths` tokens (one batch, left-padded to
    the longest) against generate() of each prompt alone, both keeping every step's logits.

    Logits are compared over each row's steps up to and including its first token mismatch (the
    contexts are identical until then). Observations: token_mismatches (rows whose new tokens
    differ), rows, padded_rows (rows shorter than the longest), max_abs_diff, max_abs_ref,
    allclose_ratio, nonfinite, rtol, atol, min_top2_gap (smallest gap between the two best logits
    of the single runs: how close greedy came to a tie), decisive_token_mismatches (rows whose
    first mismatch is at a step where the single run's two best logits are further apart than
    twice the logit tolerance: not a tie that rounding may break either way)."""
    from pvlab.runtime import devices
    from pvlab.runtime.generate import generate, generate_batch  # at call time: planted bugs reach them

    dev = torch_device(device)
    path = path or devices.default_path(dev)
    rtol, atol = rtol_atol(tolerance, "bfloat16" if path == "fast" else "float32")
    lengths = [int(n) for n in (prompt_lengths or [3, 9, 14])]
    model = fixtures.random_model("tiny", seed=seed, initializer_range=0.1, device=str(dev), path=path)
    vocab = model.config.vocab_size
    prompts = [torch.randint(0, vocab, (n,), generator=generator(seed + i)).tolist() for i, n in enumerate(lengths)]
    batched = generate_batch(model, prompts, max_new_tokens=new_tokens, output_logits=True)
    alone = [generate(model, p, max_new_tokens=new_tokens, output_logits=True) for p in prompts]
    mismatches, decisive, got, expected, gaps = 0, 0, [], [], []
    tie_margin = 2 * (atol + rtol * max(float(s.logits.abs().max()) for s in alone))
    for together, single in zip(batched, alone):
        differing = [i for i, (a, b) in enumerate(zip(together.new_ids, single.new_ids)) if a != b]
        if differing or len(together.new_ids) != len(single.new_ids):
            mismatches += 1
        steps = (differing[0] + 1) if differing else min(len(together.new_ids), len(single.new_ids))
        got.append(together.logits[:steps])
        expected.append(single.logits[:steps])
        top2 = torch.topk(single.logits.double(), 2, dim=-1).values
        step_gaps = top2[:, 0] - top2[:, 1]                                               # (steps,)
        gaps.append(float(step_gaps.min()))
        if differing and float(step_gaps[differing[0]]) > tie_margin:
            decisive += 1
    obs = compared(torch.cat(got), torch.cat(expected), rtol=rtol, atol=atol)
    obs.update(token_mismatches=mismatches, decisive_token_mismatches=decisive, rows=len(prompts), padded_rows=sum(n < max(lengths) for n in lengths),
               min_top2_gap=min(gaps), new_tokens=new_tokens)
    return obs
