"""A deterministic synthetic corpus: a sparse second-order chain over the vocabulary.

Each token is drawn from three possible successors of the token two positions back, so a model
must attend (one position further than the previous token) to predict it, and a trained model
gets well below the uniform loss ln V (the chain's entropy is 0.90 nats) — a quick signal that
training and attention work, with no download.
"""

from __future__ import annotations

import torch


def corpus(vocab_size: int, *, seed: int = 0, tokens: int = 20_000, heldout: float = 0.1,
           lag: int = 2) -> dict[str, torch.Tensor]:
    """{"train": ids, "heldout": ids}: one stream from the chain, its last `heldout` fraction held out."""
    generator = torch.Generator().manual_seed(seed)
    successors = torch.randint(vocab_size, (vocab_size, 3), generator=generator).tolist()
    choices = torch.multinomial(torch.tensor([0.6, 0.3, 0.1]), tokens, replacement=True, generator=generator).tolist()
    stream = [0] * lag
    for t in range(lag, tokens):
        stream.append(successors[stream[t - lag]][choices[t]])
    cut = int(tokens * (1 - heldout))
    ids = torch.tensor(stream, dtype=torch.long)
    return {"train": ids[:cut], "heldout": ids[cut:]}


def random_batch(stream: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator) -> torch.Tensor:
    """batch_size windows of seq_len tokens at random offsets of the stream."""
    starts = torch.randint(len(stream) - seq_len, (batch_size,), generator=generator)
    return torch.stack([stream[s:s + seq_len] for s in starts.tolist()])


def sequential_batches(stream: torch.Tensor, batch_size: int, seq_len: int) -> list[torch.Tensor]:
    """Consecutive non-overlapping windows, batch_size at a time (the last batch may be smaller)."""
    windows = stream[: len(stream) // seq_len * seq_len].view(-1, seq_len)
    return list(windows.split(batch_size))
