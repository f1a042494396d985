"""The trainer's random-window sampler (runtime.data.random_batches) draws what its docstring
says: windows of seq_len + 1 consecutive stream tokens (inputs the first seq_len, targets the
last seq_len), every possible start reachable. Found unchecked by `pv mutate`: a window one or
two tokens short trained silently.

Oracle: a stream of consecutive integers (token i at position i), so each row must read
s, s+1, ..., s+seq_len for its start s; the set of possible starts, [0, N - seq_len - 1], is
written here, independent of the sampler's arithmetic.
"""

from __future__ import annotations


def random_windows_are_stream_slices(*, device: str, stream_tokens: int = 40, seq_len: int = 8,
                                     batch_size: int = 16, batches: int = 125) -> dict:
    """`batches` batches of runtime.data.random_batches over torch.arange(stream_tokens).

    Observations: bad_shapes (batches whose inputs or targets are not (batch_size, seq_len)),
    bad_rows (rows that are not consecutive tokens with targets one ahead of inputs),
    unreached_starts (possible starts never drawn), impossible_starts (drawn starts past the last)."""
    import torch

    from pvlab.runtime import data

    stream = torch.arange(stream_tokens)
    sampler = data.random_batches(stream, batch_size=batch_size, seq_len=seq_len, seed=11)
    bad_shapes = bad_rows = 0
    starts = set()
    for _ in range(batches):
        batch = next(sampler)
        if tuple(batch.inputs.shape) != (batch_size, seq_len) or tuple(batch.targets.shape) != (batch_size, seq_len):
            bad_shapes += 1
            continue
        for inputs, targets in zip(batch.inputs.tolist(), batch.targets.tolist()):
            start = inputs[0]
            bad_rows += inputs != list(range(start, start + seq_len)) or targets != list(range(start + 1, start + seq_len + 1))
            starts.add(start)
    possible = set(range(stream_tokens - seq_len))
    return {"bad_shapes": bad_shapes, "bad_rows": bad_rows, "unreached_starts": len(possible - starts),
            "impossible_starts": len(starts - possible)}
