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


def packed_rows_cover_each_pair_once(*, device: str, seq_len: int = 8,
                                     document_lengths: tuple = (3, 9, 17, 30, 2)) -> dict:
    """runtime.data.pack_documents over documents of distinct consecutive tokens (so a token says
    which document and position it is), some longer than a row: every row must hold at most
    seq_len positions, and the (input, target) pairs of all pieces must be each document's
    textbook pairs (d[i], d[i+1]), each exactly once (a long document is cut into pieces that
    overlap by exactly one token).

    Observations: overfull_rows, missing_pairs, extra_pairs (pairs duplicated or not in any document)."""
    from collections import Counter

    from pvlab.runtime import data

    documents, first = [], 100
    for length in document_lengths:
        documents.append(list(range(first, first + length)))
        first += length + 1000
    expected = Counter((d[i], d[i + 1]) for d in documents for i in range(len(d) - 1))
    rows = data.pack_documents(documents, seq_len=seq_len)
    got = Counter((p[i], p[i + 1]) for row in rows for p in row for i in range(len(p) - 1))
    return {"overfull_rows": sum(sum(len(p) - 1 for p in row) > seq_len for row in rows),
            "missing_pairs": sum((expected - got).values()), "extra_pairs": sum((got - expected).values())}


def heldout_batches_cover_every_window(*, device: str, cases: tuple = ((100, 4, 8), (97, 3, 5), (54, 4, 8), (27, 5, 8))) -> dict:
    """runtime.data.sequential_batches over torch.arange(n) for each (n tokens, batch_size,
    seq_len) of `cases`, with no max_batches and with max_batches 1 and 2: the documented rule
    ("consecutive non-overlapping windows from the start of the stream, so every evaluation
    scores exactly the same tokens") written as index arithmetic here: windows of seq_len + 1
    tokens, floor(n / (seq_len + 1)) of them, window w reading tokens w (seq_len + 1) ..
    (w + 1)(seq_len + 1) - 1, in order, batch_size a batch and the remainder in a last, shorter
    batch, every window scored once; max_batches = k keeps the first k batches.

    Observations: cases, windows (expected over the cases), windows_missing (expected windows in
    no batch: a dropped short batch, a window cut off), windows_wrong (rows that are not the
    expected window at their place: wrong tokens, order, overlap or targets not one ahead),
    batches_wrong (batches whose row count is not the rule's), truncation_wrong (max_batches
    runs that are not the first k batches)."""
    import torch

    from pvlab.runtime import data

    out = {"cases": len(cases), "windows": 0, "windows_missing": 0, "windows_wrong": 0, "batches_wrong": 0,
           "truncation_wrong": 0}
    for tokens, batch_size, seq_len in cases:
        window = seq_len + 1
        count = tokens // window
        expected = [list(range(w * window, (w + 1) * window)) for w in range(count)]
        sizes = [min(batch_size, count - start) for start in range(0, count, batch_size)]
        out["windows"] += count
        batches = data.sequential_batches(torch.arange(tokens), batch_size=batch_size, seq_len=seq_len)
        rows = []
        out["batches_wrong"] += int([int(b.inputs.shape[0]) for b in batches] != sizes)
        for batch in batches:
            for inputs, targets in zip(batch.inputs.tolist(), batch.targets.tolist()):
                rows.append(inputs + targets[-1:])
                out["windows_wrong"] += int(targets != inputs[1:] + targets[-1:])
        out["windows_missing"] += max(0, count - len(rows))
        out["windows_wrong"] += sum(int(a != b) for a, b in zip(rows, expected)) + max(0, len(rows) - count)
        for k in (1, 2):
            cut = data.sequential_batches(torch.arange(tokens), batch_size=batch_size, seq_len=seq_len, max_batches=k)
            out["truncation_wrong"] += int(len(cut) != min(k, len(sizes)) or any(
                not torch.equal(a.inputs, b.inputs) for a, b in zip(cut, batches)))
    return out
