"""Greedy decoding up to and across the model's context window, judged token by token against the
textbook greedy loop over the runtime's own logits.

The textbook loop, written here and re-run from scratch at every step (no cache): the next token
is the argmax of `logits(context)[-1]`, where the context is the most recent tokens the model can
condition on — the whole sequence while the runtime's forward accepts it, and past the context
window L (config.json's `max_position_embeddings`, or `max_seq_len` / `n_positions` / `n_ctx`),
where a forward of the whole sequence is refused, its last L tokens (a sliding window). A decode
loop may also refuse a request that runs past the window (an error its adapter raises, as a
runtime with a request check does), provided it decodes up to the window. What it may not do is
condition on anything else: a window cropped from the start (the oldest tokens, stale once the
sequence outgrows it), a window one token short, a position read from the wrong end, a cache that
drifts from the sequence.

Each prompt (held-out tokens, L - overhang long) is decoded twice through the runtime's own loop
(`generate`): `overhang` tokens, which end exactly at the window, and 2 * overhang, which run
`overhang` tokens past it. A token is consistent when the textbook's logits rank it within
2 * (atol + rtol * |top logit|) of their top token (a near-tie: a decode with a KV cache and a
forward of the whole sequence round differently).

The oracle is the definition of greedy decoding over the runtime's logits: it judges the decode
loop (its window, its position bookkeeping, its cache), not the model, which other checks judge.

Assumes: a causal LM whose greedy choice is the argmax of its logits; a config.json naming its
context length under one of the keys above (or the falsifier's `context` param).
"""

from __future__ import annotations

import torch

from ..protocol import GENERATE, LOAD, LOGITS, REFERENCE, AdapterError
from ._base import load, subject_of, uses

CONTEXT_KEYS = ("max_position_embeddings", "max_seq_len", "n_positions", "n_ctx")


def context_length(config: dict, context: int | None = None) -> tuple[int, str]:
    """(L, where it came from): the `context` param, else the first of CONTEXT_KEYS in config."""
    if context is not None:
        return int(context), "param"
    for key in CONTEXT_KEYS:
        if isinstance(config.get(key), int) and config[key] > 0:
            return config[key], key
    raise RuntimeError(f"config.json names no context length ({', '.join(CONTEXT_KEYS)}): give the falsifier "
                       "a `context` param")


def held_out_prompts(batches, count: int, length: int) -> list[list[int]]:
    """`count` prompts of `length` tokens, consecutive pieces of the held-out inputs read row by row."""
    stream = torch.cat([row for batch in batches for row in batch.inputs]).tolist()
    if len(stream) < count * length:
        raise RuntimeError(f"the subject's held-out batches hold {len(stream)} tokens; {count} prompts of "
                           f"{length} tokens need {count * length}")
    return [stream[i * length:(i + 1) * length] for i in range(count)]


def _refused(error: AdapterError) -> bool:
    """The adapter raised (the runtime refused the request), as opposed to answering malformed."""
    return ": raised " in str(error)


@uses(LOAD, LOGITS, GENERATE)
def decode_across_context_window(*, runtime, device: str, subject: str, path: str = REFERENCE, prompts: int = 2,
                                 overhang: int = 6, rtol: float = 1e-4, atol: float = 1e-5,
                                 context: int | None = None) -> dict:
    """Greedy decodes from held-out prompts of L - overhang tokens, `overhang` new tokens (up to
    the window) and 2 * overhang (past it), each token judged against the textbook greedy loop
    over the runtime's own logits (module docstring).

    Observations: context (L), prompts, inside_tokens / inside_inconsistent (tokens decoded with
    the sequence within the window, and those the textbook does not pick), past_window_tokens /
    past_inconsistent (tokens decoded from a sequence longer than L), past_full_context /
    past_sliding_window (which textbook context judged them: the whole sequence, accepted by the
    forward, or its last L tokens), refused (decodes past the window the runtime refused),
    short_decodes (decodes that stopped early, at an end-of-sequence token), largest_tie_gap."""
    who = subject_of(subject)
    limit, _ = context_length(who.config, context)
    if overhang < 1 or overhang >= limit:
        raise ValueError(f"overhang must be in [1, {limit}), got {overhang}")
    model = load(runtime, who, device, path)
    seen = {"inside_tokens": 0, "inside_inconsistent": 0, "past_window_tokens": 0, "past_inconsistent": 0,
            "past_full_context": 0, "past_sliding_window": 0, "refused": 0, "short_decodes": 0}
    largest_gap = 0.0

    def textbook_row(sequence: list[int]) -> tuple[torch.Tensor, str]:
        if len(sequence) <= limit:
            return model.logits(torch.tensor([sequence], dtype=torch.int64))[0, -1].double(), "inside"
        try:
            return model.logits(torch.tensor([sequence], dtype=torch.int64))[0, -1].double(), "past_full_context"
        except AdapterError as refused:
            if not _refused(refused):
                raise
        return model.logits(torch.tensor([sequence[-limit:]], dtype=torch.int64))[0, -1].double(), \
            "past_sliding_window"

    def judge(prompt: list[int], tokens: list[int], wanted: int) -> None:
        nonlocal largest_gap
        seen["short_decodes"] += int(len(tokens) < wanted)
        for j, token in enumerate(tokens):
            row, where = textbook_row(prompt + tokens[:j])
            side = "inside" if where == "inside" else "past"
            if side == "past":
                seen["past_window_tokens"] += 1
                seen[where] += 1
            else:
                seen["inside_tokens"] += 1
            top = float(row.max())
            gap = top - float(row[token]) if 0 <= token < row.numel() else float("inf")
            if gap > 2 * (atol + rtol * abs(top)):
                seen[f"{side}_inconsistent"] += 1
            elif gap > 0:
                largest_gap = max(largest_gap, gap)

    try:
        for prompt in held_out_prompts(who.heldout(), prompts, limit - overhang):
            judge(prompt, model.generate(prompt, overhang), overhang)
            try:
                across = model.generate(prompt, 2 * overhang)
            except AdapterError as error:
                if not _refused(error):
                    raise
                seen["refused"] += 1
                continue
            judge(prompt, across, 2 * overhang)
    finally:
        model.close()
    return {"context": limit, "prompts": prompts, "overhang": overhang, **seen, "largest_tie_gap": largest_gap}
