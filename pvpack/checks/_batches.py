"""Batches a check cuts from a subject's data so that a defect which a plain batch hides shows."""

from __future__ import annotations

import torch

from ..protocol import IGNORE_INDEX, Batch


def ragged(batch: Batch, rows: int, min_len: int, max_len: int, seed: int) -> Batch:
    """The first `rows` rows of `batch`, cut to max_len positions, each scoring only its first n
    targets (n spread evenly over [min_len, max_len], in a seeded order): right padding, as a
    batch of documents of different lengths has it. Positions after a row's end keep their
    tokens; in a causal model they cannot change the scored positions."""
    if rows > batch.inputs.shape[0] or max_len > batch.inputs.shape[1] or not 1 <= min_len <= max_len:
        raise ValueError(f"a ragged batch of {rows} rows of {min_len}..{max_len} tokens cannot be cut from a "
                         f"{tuple(batch.inputs.shape)} batch")
    lengths = torch.linspace(min_len, max_len, rows).round().long()
    lengths = lengths[torch.randperm(rows, generator=torch.Generator().manual_seed(seed))]
    inputs = batch.inputs[:rows, :max_len].clone()
    targets = batch.targets[:rows, :max_len].clone()
    for row, n in enumerate(lengths.tolist()):
        targets[row, n:] = IGNORE_INDEX
    return Batch(inputs, targets)
