"""Packed training data over several passes: every pass covers the rows once, in a fresh order.

runtime.data.packed_batches (`Recipe.pack_documents`, `pretrain --pack-documents`) is "the seeded
endless training iterator" of whole documents packed into rows (docs/runtime.md, Data), "in an
order reshuffled from `seed` every pass" (its docstring): each pass draws a permutation of the
documents, packs them in that order (pack_documents: first fit in order, a document longer than
a row cut into pieces of seq_len + 1 tokens overlapping by one) and yields the rows B at a time;
rows that do not fill a last batch are left out of that pass. FALSIFY-EPOCH-SHARDING-001 holds
the rank sampler's epochs to this and pipeline_rules reads only the first packed pass: an
iterator that replays the first pass's order on every pass (a generator seeded inside the pass
loop) keeps every property one pass can show.

The oracle is arithmetic written here, on documents built so that it is exact whatever the
order: every document of a case has the same length, so each row holds the same number k of
documents (or, for documents longer than a row, each piece fills one row) and a pass has
R = ceil(pieces / k) rows and floor(R / B) batches, whatever permutation was drawn. Every token
of every document is distinct, so each packed segment (a run of one document id in a row) is read
back to the piece it came from: no reproduction of the runtime's seed handling or of torch's
permutation.
"""

from __future__ import annotations

from itertools import combinations

import torch

from ._util import torch_device

# (documents, tokens each, seq_len, batch B, seed): 2 documents a row, 12 rows, 4 batches a pass;
# 3 a row, 7 rows (the last holding 2), 3 batches a pass and one row left out; documents of
# 2·seq_len + 1 tokens, each cut into 2 pieces filling a row each, 32 rows, 8 batches a pass
CASES = ((24, 5, 8, 3, 0), (20, 4, 9, 2, 1), (16, 13, 6, 4, 2026))


def _documents(count: int, length: int) -> list[list[int]]:
    return [list(range(1000 + length * i, 1000 + length * (i + 1))) for i in range(count)]


def _pieces(document: list[int], seq_len: int) -> list[tuple[int, ...]]:
    """The documented cut: pieces of seq_len + 1 tokens overlapping by one (a document that fits
    a row is one piece)."""
    if len(document) <= seq_len + 1:
        return [tuple(document)]
    return [tuple(document[start:start + seq_len + 1]) for start in range(0, len(document) - 1, seq_len)]


def _read_rows(batch) -> tuple[list[tuple[tuple[int, ...], ...]], int]:
    """Each row of an LMBatch as its pieces (inputs of each document id's segment plus that
    segment's last target), and the number of segments whose targets are not their inputs
    shifted by one."""
    rows, wrong = [], 0
    for r in range(batch.inputs.shape[0]):
        ids = batch.document_ids[r]
        row = []
        for d in sorted(set(ids.tolist()) - {-1}):
            keep = ids == d
            inputs, targets = batch.inputs[r][keep].tolist(), batch.targets[r][keep].tolist()
            wrong += int(inputs[1:] != targets[:-1])
            row.append(tuple(inputs + targets[-1:]))
        rows.append(tuple(row))
    return rows, wrong


def _passes(documents, *, batch_size: int, seq_len: int, seed: int, passes: int, per_pass: int):
    from pvlab.runtime import data

    stream = data.packed_batches(documents, batch_size=batch_size, seq_len=seq_len, seed=seed)
    return [[next(stream) for _ in range(per_pass)] for _ in range(passes)]


def packed_passes_reshuffle(*, device: str, passes: int = 4) -> dict:
    """packed_batches for every case of CASES over `passes` passes.

    Observations: cases, passes; coverage_errors (per pass: a piece trained twice, a piece not of
    the documents, a number of pieces left out other than the arithmetic's — the rows that do
    not fill a last batch —, a segment whose targets are not its inputs shifted by one, a batch
    of other than B rows); repeated_orders (pairs of passes of one case with the same sequence
    of rows); nondeterministic (passes whose batches differ, tensor for tensor, from a fresh
    iterator of the same seed read after the global torch RNG was reseeded and consumed);
    seed_ignored (cases where seed + 1 gives the same first pass)."""
    torch_device(device)
    coverage_errors = repeated_orders = nondeterministic = seed_ignored = 0
    for count, length, seq_len, batch_size, seed in CASES:
        documents = _documents(count, length)
        pieces = [piece for document in documents for piece in _pieces(document, seq_len)]
        per_row = max(1, seq_len // (max(len(piece) for piece in pieces) - 1))
        rows = -(-len(pieces) // per_row)
        per_pass = rows // batch_size
        trained = min(len(pieces), per_pass * batch_size * per_row)
        try:
            runs = _passes(documents, batch_size=batch_size, seq_len=seq_len, seed=seed, passes=passes,
                           per_pass=per_pass)
        except Exception:  # noqa: BLE001 - an iterator that raises on valid documents covers nothing
            coverage_errors += passes
            continue
        orders = []
        for run in runs:
            order, wrong = [], 0
            for batch in run:
                read, bad = _read_rows(batch)
                order.extend(read)
                wrong += bad + int(len(read) != batch_size)
            seen = [piece for row in order for piece in row]
            wrong += len(seen) - len(set(seen)) + len(set(seen) - set(pieces))
            wrong += int(len(set(seen) & set(pieces)) != trained)
            coverage_errors += wrong
            orders.append(order)
        repeated_orders += sum(1 for a, b in combinations(range(passes), 2) if orders[a] == orders[b])

        torch.manual_seed(seed + 12345)
        torch.rand(11)
        again = _passes(documents, batch_size=batch_size, seq_len=seq_len, seed=seed, passes=passes,
                        per_pass=per_pass)
        for first, second in zip(runs, again):
            nondeterministic += int(any(not (torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
                                             and torch.equal(a.document_ids, b.document_ids))
                                        for a, b in zip(first, second)))
        other = _passes(documents, batch_size=batch_size, seq_len=seq_len, seed=seed + 1, passes=1,
                        per_pass=per_pass)[0]
        seed_ignored += int([_read_rows(b)[0] for b in other] == [_read_rows(b)[0] for b in runs[0]])
    return {"cases": len(CASES), "passes": passes, "coverage_errors": coverage_errors,
            "repeated_orders": repeated_orders, "nondeterministic": nondeterministic, "seed_ignored": seed_ignored}
