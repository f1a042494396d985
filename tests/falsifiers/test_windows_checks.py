"""pvlab.falsifiers.windows: holds on the runtime's sampler and fails on a sampler whose windows
are a token short (a defect other than its planted bug, which `pv strength` measures)."""

from __future__ import annotations

import torch

from falsifier_helpers import observe
from pvlab.runtime import data


def test_holds_on_the_runtime():
    observations, judgement = observe("sampler-windows", "FALSIFY-SAMPLER-WINDOWS-001")
    assert judgement.holds, observations


def test_short_windows_are_seen(monkeypatch):
    def random_batches(stream, *, batch_size, seq_len, seed):
        generator = torch.Generator().manual_seed(seed)
        while True:
            starts = torch.randint(0, stream.numel() - seq_len, (batch_size,), generator=generator).tolist()
            yield data.LMBatch.from_sequences(torch.stack([stream[s:s + seq_len] for s in starts]))

    monkeypatch.setattr(data, "random_batches", random_batches)
    observations, judgement = observe("sampler-windows", "FALSIFY-SAMPLER-WINDOWS-001")
    assert not judgement.holds and observations["bad_shapes"] == 125, observations


def test_packing_holds_on_the_runtime():
    observations, judgement = observe("sampler-windows", "FALSIFY-SAMPLER-WINDOWS-002")
    assert judgement.holds, observations


def test_pieces_without_overlap_are_seen(monkeypatch):
    original = data.pack_documents

    def pack_documents(documents, *, seq_len):   # pieces cut end to end: the pair across each cut is lost
        pieces = [list(d)[i:i + seq_len] for d in documents for i in range(0, len(d), seq_len)]
        return original([p for p in pieces if len(p) >= 2], seq_len=seq_len)

    monkeypatch.setattr(data, "pack_documents", pack_documents)
    observations, judgement = observe("sampler-windows", "FALSIFY-SAMPLER-WINDOWS-002")
    assert not judgement.holds and observations["missing_pairs"] > 0, observations


def test_heldout_batches_hold_and_kill_their_planted_bug():
    from falsifier_helpers import assert_holds_and_killed

    assert_holds_and_killed("sampler-windows", "FALSIFY-SAMPLER-WINDOWS-003", "heldout_last_short_batch_dropped")


def test_overlapping_heldout_windows_are_seen(monkeypatch):
    """Another defect: held-out windows that overlap by one token (the training sampler's
    stride seq_len used for eval): as many windows, other tokens, the end of the stream unread."""
    def sequential_batches(stream, *, batch_size, seq_len, max_batches=None):
        count = (stream.numel() - 1) // seq_len
        windows = torch.stack([stream[i * seq_len:i * seq_len + seq_len + 1] for i in range(count)
                               if i * seq_len + seq_len + 1 <= stream.numel()])
        batches = [data.LMBatch.from_sequences(windows[i:i + batch_size]) for i in range(0, len(windows), batch_size)]
        return batches[:max_batches] if max_batches else batches

    monkeypatch.setattr(data, "sequential_batches", sequential_batches)
    observations, judgement = observe("sampler-windows", "FALSIFY-SAMPLER-WINDOWS-003")
    assert not judgement.holds and observations["windows_wrong"] > 0, observations
