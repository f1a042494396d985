"""pvpack.checks._batches: the batches checks cut from a subject's data."""

import pytest
import torch

from pvpack.checks._batches import ragged
from pvpack.protocol import IGNORE_INDEX, Batch


def test_the_ragged_batch_scores_rows_of_spread_lengths_and_keeps_their_tokens():
    windows = torch.arange(8 * 50).reshape(8, 50)
    batch = ragged(Batch(windows, windows + 1), rows=7, min_len=3, max_len=40, seed=0)
    scored = sorted(int(n) for n in (batch.targets != IGNORE_INDEX).sum(dim=1))
    assert scored == [3, 9, 15, 22, 28, 34, 40] and batch.inputs.shape == (7, 40)
    assert torch.equal(batch.inputs, windows[:7, :40])
    with pytest.raises(ValueError, match="cannot be cut"):
        ragged(Batch(windows, windows), rows=9, min_len=3, max_len=40, seed=0)


def test_a_ragged_batch_pads_each_row_after_its_own_length_only():
    windows = torch.arange(4 * 20).reshape(4, 20)
    batch = ragged(Batch(windows, windows + 1), rows=4, min_len=2, max_len=20, seed=3)
    for row in range(4):
        scored = (batch.targets[row] != IGNORE_INDEX).nonzero().squeeze(1).tolist()
        assert scored == list(range(len(scored)))          # a prefix: padding only after the row's end
        assert torch.equal(batch.targets[row, :len(scored)], windows[row, :len(scored)] + 1)
    with pytest.raises(ValueError, match="cannot be cut"):
        ragged(Batch(windows, windows), rows=2, min_len=0, max_len=20, seed=0)
