"""Greedy decoding picks the exact argmax of the logits, however close the runner-up.

runtime.generate documents temperature 0 as "greedy (argmax) decoding", and the logits it picks
from are fp32 (the ones output_logits=True hands back). A pick made from a rounded copy of them
(bf16 keeps 8 bits of mantissa: at a logit of 10 it cannot tell values 0.06 apart) still picks a
near-best token, and text stays fluent: only exact agreement with an fp32 argmax breaks, on
near-ties. So the pick is judged where it can break: on rows built with near-ties of 1 to 256
fp32 ulps at several magnitudes, the winner always after the runner-up (a tie resolved to the
lowest index picks the wrong one), and on exact ties, where the documented argmax is the first
maximum (torch.argmax's rule; a pick of the last one would break it). It is also judged at every step of real greedy decodes, each
token against the logits the runtime recorded for that step.

The oracle is the first index of the maximum, found by a Python loop over the values widened to
float64 (exact for fp32 inputs), independent of torch.argmax and of the runtime's kernels.
"""

from __future__ import annotations

import importlib

import torch


def _first_argmax(row: list[float]) -> int:
    best = 0
    for i, value in enumerate(row):
        if value > row[best]:
            best = i
    return best


def _near_tie_rows(vocab: int, seed: int) -> torch.Tensor:
    """Rows of fp32 logits: background noise below -1, a runner-up at a lower index and the
    winner at a higher one, 0 (an exact tie: the first, lower index wins), 1, 2, 16 or 256 ulps
    above it, at magnitudes 0.5, 3, 10 and 40."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for magnitude in (0.5, 3.0, 10.0, 40.0):
        for ulps in (0, 1, 2, 16, 256):
            row = -1.0 - torch.rand(vocab, generator=generator)
            runner_up, winner = sorted(torch.randperm(vocab, generator=generator)[:2].tolist())
            value = torch.tensor(magnitude, dtype=torch.float32)
            row[runner_up] = value
            top = value
            for _ in range(ulps):
                top = torch.nextafter(top, torch.tensor(float("inf")))
            row[winner] = top
            rows.append(row)
    return torch.stack(rows).float()


def greedy_is_exact_argmax(*, device: str = "cpu", seed: int = 0, prompts: int = 4, new_tokens: int = 24) -> dict:
    """runtime.kernels.greedy_pick on 20 rows of near and exact ties, then `prompts` greedy decodes of
    `new_tokens` tokens through runtime.generate (output_logits=True, eos disabled) on the tiny
    preset with random weights, each token judged against its step's recorded logits.

    Observations: tie_rows (20), tie_mismatches (rows whose pick is not the first maximum);
    decode_steps (tokens judged), decode_mismatches (tokens that are not their step's first
    maximum)."""
    from . import fixtures
    from ._util import torch_device

    dev = torch_device(device)
    kernels = importlib.import_module("pvlab.runtime.kernels")      # read at call time: planted bugs swap them
    generation = importlib.import_module("pvlab.runtime.generate")
    model = fixtures.random_model("tiny", seed=seed, device=str(dev))
    vocab = model.config.vocab_size

    rows = _near_tie_rows(vocab, seed)
    picks = kernels.greedy_pick(rows.to(dev)).cpu().tolist()
    tie_mismatches = sum(int(p) != _first_argmax(r) for p, r in zip(picks, rows.double().tolist()))

    steps = mismatches = 0
    generator = torch.Generator().manual_seed(seed + 1)
    for _ in range(prompts):
        prompt = torch.randint(0, vocab, (6,), generator=generator).tolist()
        out = generation.generate(model, prompt, max_new_tokens=new_tokens, eos_token_id=None, output_logits=True)
        for token, logits in zip(out.new_ids, out.logits.double().tolist()):
            steps += 1
            mismatches += int(token) != _first_argmax(logits)
    return {"tie_rows": len(picks), "tie_mismatches": tie_mismatches, "decode_steps": steps,
            "decode_mismatches": mismatches}
