"""Gradient accumulation (Trainer(micro_batch_size=m), Trainer.train_step, LMBatch.split): an
accumulated step equals one step over the whole batch."""

from __future__ import annotations

import pytest
import torch

from pvlab import runtime
from pvlab.runtime import data, trainer
from pvlab.runtime.errors import ArgumentError, DataError

SEQUENCES = [list(range(1, 40)), [3, 4, 5], list(range(50, 70)), [7, 8], list(range(100, 130))]


def _step(micro_batch_size, path="reference"):
    model = runtime.init_model(config="tiny", weights="random", seed=0, path=path, parity_gate=False)
    run = runtime.Trainer(model, lr=1e-3, grad_clip=0.0, micro_batch_size=micro_batch_size)
    loss = run.train_batch(data.LMBatch.from_sequences(SEQUENCES))
    return loss, torch.cat([p.grad.flatten() for p in model.parameters()])


def test_split_gives_short_last_micro_batch_cut_to_its_longest_row():
    parts = data.LMBatch.from_sequences(SEQUENCES).split(2)
    assert [p.inputs.shape[0] for p in parts] == [2, 2, 1]
    assert [p.inputs.shape[1] for p in parts] == [38, 19, 29]
    assert sum(p.num_target_tokens for p in parts) == data.LMBatch.from_sequences(SEQUENCES).num_target_tokens
    with pytest.raises(DataError):
        data.LMBatch.from_sequences(SEQUENCES).split(0)


@pytest.mark.parametrize("path", ["reference", "fast"])
def test_accumulated_step_equals_one_big_batch(path):
    full_loss, full_grads = _step(None, path)
    loss, grads = _step(2, path)
    scale = float(full_grads.abs().max())
    tolerance = 2e-2 if path == "fast" else 1e-5
    assert abs(loss - full_loss) <= tolerance * abs(full_loss)
    assert float((grads - full_grads).abs().max()) <= tolerance * scale


def test_micro_batches_are_weighted_by_their_tokens():
    assert trainer.micro_batch_weight(10, 40, 2) == 0.25
    assert trainer.micro_batch_weight(30, 40, 2) == 0.75


def test_train_step_takes_micro_batches_of_different_widths():
    model = runtime.init_model(config="tiny", weights="random", seed=0, parity_gate=False)
    run = runtime.Trainer(model, grad_clip=0.0)
    loss = run.train_step([data.LMBatch.from_sequences(SEQUENCES[:2]), data.LMBatch.from_sequences(SEQUENCES[2:])])
    assert loss > 0 and run.step == 1
    with pytest.raises(ArgumentError):
        run.train_step([])
    with pytest.raises(ArgumentError):
        runtime.Trainer(model, micro_batch_size=0)
