"""A deterministic synthetic corpus: a sparse Markov chain over the vocabulary.

Every token has three possible successors, so a trained model gets well below the uniform loss
ln V (the chain's entropy is at most ln 3) — a quick signal that training works, with no download.
"""

from __future__ import annotations

import torch


def corpus(vocab_size: int, *, seed: int = 0, tokens: int = 20_000, heldout: float = 0.1) -> dict[str, torch.Tensor]:
    """{"train": ids, "heldout": ids}: one stream from the chain, its last `heldout` fraction held out."""
    generator = torch.Generator().manual_seed(seed)
    successors = torch.randint(vocab_size, (vocab_size, 3), generator=generator)
    weights = torch.tensor([0.6, 0.3, 0.1])
    stream = torch.empty(tokens, dtype=torch.long)
    stream[0] = 0
    choices = torch.multinomial(weights, tokens, replacement=True, generator=generator)
    for t in range(1, tokens):
        stream[t] = successors[stream[t - 1], choices[t]]
    cut = int(tokens * (1 - heldout))
    return {"train": stream[:cut], "heldout": stream[cut:]}


def random_batch(stream: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator) -> torch.Tensor:
    """batch_size windows of seq_len tokens at random offsets of the stream."""
    starts = torch.randint(len(stream) - seq_len, (batch_size,), generator=generator)
    return torch.stack([stream[s:s + seq_len] for s in starts.tolist()])


def sequential_batches(stream: torch.Tensor, batch_size: int, seq_len: int) -> list[torch.Tensor]:
    """Consecutive non-overlapping windows, batch_size at a time (the last batch may be smaller)."""
    windows = stream[: len(stream) // seq_len * seq_len].view(-1, seq_len)
    return list(windows.split(batch_size))
