"""In a batch, each row stops at end-of-sequence on its own.

runtime.generate.generate_batch decodes several prompts together; docs/runtime.md (Generation)
says a row that reaches EOS is fed masked padding until all rows stop, and that greedy decoding
gives every row the tokens it gets alone. So one row's eos must end that row only: the others go
on to their own eos or to max_new_tokens, and each row's Generation (tokens and stopped_on_eos)
is the one its prompt gets decoded alone with the same eos id and max_new_tokens.

Oracle: each prompt decoded alone by runtime.generate.generate's single-sequence greedy loop
(use_graph=False, the eager loop on any device), a different code path from generate_batch (no
padding, no attention mask, no per-row bookkeeping of who is still active, its own stop test).
It is NOT independent of the model's forward (both paths call the same CausalLM and kernels): a
forward bug that both share is invisible here; batched-generation compares the forward.

The eos id is chosen from the tokens the model itself emits, so that it is reached early by one
row, later by another and never by a third: the "late" prompt's eos-free greedy run F is read
alone; the eos is F[k], the first token of F at step >= LATE_STEP that occurs there for the first
time; the "early" prompt is the late prompt followed by F[:k - EARLY_STEP] (so, decoded alone, it
reaches the same token about EARLY_STEP steps in); the "never" prompt is the first of a few fixed
prompts whose eos-free run does not contain it. Whether each row stops, and where, is then read
from the oracle's runs with that eos, never assumed.
"""

from __future__ import annotations

import importlib

import torch

from . import fixtures
from ._util import torch_device

LATE_PROMPT = [5, 9, 17, 33]
NEVER_PROMPTS = ([100, 200, 300, 400, 7, 8, 9, 10, 11, 12, 13], [250, 3, 71, 128, 64, 90, 411, 2, 19],
                 [480, 481, 60, 61, 62, 300, 301, 302, 303, 304])
LATE_STEP, EARLY_STEP = 5, 1


def _tokens(generation) -> tuple[list[int], bool]:
    return [int(t) for t in generation.new_ids], bool(generation.stopped_on_eos)


def batch_rows_stop_on_their_own(*, device: str, seed: int = 0, new_tokens: int = 12,
                                 initializer_range: float = 0.3) -> dict:
    """Three prompts of different lengths (late, never and early reaching the eos id chosen as
    the module docstring says, in that order) decoded greedily in one generate_batch call with that
    eos id and `new_tokens`: every row must equal its prompt decoded alone by generate (tokens and
    stopped_on_eos), a row that reaches eos must end right after its first eos, a row that does
    not must run to `new_tokens`.

    The model is the tiny preset with random weights from `seed`; initializer_range 0.3 because
    at the preset's 0.02 a random tied model mostly repeats one token, and a run that repeats
    gives no choice of a token reached at a chosen step.

    Observations (scalars): rows; row_mismatches (rows whose batched tokens differ from alone);
    stop_mismatches (rows whose stopped_on_eos differs); shape_errors (batched rows that hold eos
    but do not end right after its first occurrence, or hold none and are shorter than
    new_tokens); rows_stopping_early and rows_running_full (the oracle's runs: rows that stop on
    eos before new_tokens, rows that run to new_tokens without it); eos_id; first_stop and
    last_stop (1-based steps at which the oracle's stopping rows end); mismatched (the first
    differences, joined by "; ")."""
    dev = torch_device(device)
    generate_module = importlib.import_module("pvlab.runtime.generate")   # at call time: planted bugs reach it
    generate, generate_batch = generate_module.generate, generate_module.generate_batch
    model = fixtures.random_model("tiny", seed=seed, initializer_range=initializer_range, device=str(dev))

    def alone(prompt, eos):
        return _tokens(generate(model, prompt, max_new_tokens=new_tokens, eos_token_id=eos, use_graph=False))

    late_free, _ = alone(LATE_PROMPT, None)
    k = next((i for i in range(LATE_STEP, new_tokens) if late_free.index(late_free[i]) == i), None)
    if k is None:
        raise AssertionError(f"the late prompt's greedy run repeats from step {LATE_STEP} on: {late_free}; "
                             f"raise initializer_range")
    eos = late_free[k]
    early_prompt = LATE_PROMPT + late_free[:k - EARLY_STEP]
    never_prompt = next((p for p in NEVER_PROMPTS if eos not in alone(p, None)[0]), None)
    if never_prompt is None:
        raise AssertionError(f"every fixed prompt's greedy run reaches token {eos}")
    prompts = [LATE_PROMPT, never_prompt, early_prompt]   # 4, 11 and 8 tokens at seed 0: two rows padded
    expected = [alone(p, eos) for p in prompts]
    batched = [_tokens(g) for g in generate_batch(model, prompts, max_new_tokens=new_tokens, eos_token_id=eos)]

    row_mismatches = stop_mismatches = shape_errors = 0
    mismatched: list[str] = []
    for row, ((want, want_stop), (got, got_stop)) in enumerate(zip(expected, batched)):
        if got != want:
            row_mismatches += 1
            mismatched.append(f"row {row}: batched {len(got)} tokens {got}, alone {len(want)} {want}")
        if got_stop != want_stop:
            stop_mismatches += 1
            mismatched.append(f"row {row}: batched stopped_on_eos={got_stop}, alone {want_stop}")
        ends_right = (got.index(eos) == len(got) - 1 and got_stop) if eos in got else \
            (len(got) == new_tokens and not got_stop)
        if not ends_right:
            shape_errors += 1
            mismatched.append(f"row {row}: {len(got)} tokens, eos at "
                              f"{got.index(eos) if eos in got else None}, stopped_on_eos={got_stop}")
    stops = [len(want) for want, stop in expected if stop]
    return {"rows": len(prompts), "row_mismatches": row_mismatches, "stop_mismatches": stop_mismatches,
            "shape_errors": shape_errors,
            "rows_stopping_early": sum(1 for want, stop in expected if stop and len(want) < new_tokens),
            "rows_running_full": sum(1 for want, stop in expected if not stop and len(want) == new_tokens),
            "eos_id": eos, "first_stop": min(stops, default=0), "last_stop": max(stops, default=0),
            # Observations are scalars (the ledger's rule): the first differences as one string.
            "mismatched": "; ".join(mismatched[:6])}
