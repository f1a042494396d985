"""The training step waits for the device once: loss, grad norm, clip factor and token counts stay
tensors through the step and are read back together at its end (Trainer._read_step). On the
CPU nothing waits, so the test counts what would wait on a GPU: reads of a tensor's value by
the host (item, tolist, float(), int(), bool())."""

from __future__ import annotations

import math

import pytest
import torch
from runtime_helpers import tiny_config

from pvlab import runtime
from pvlab.falsifiers.host_sync import HostReads  # the one counter of host reads (FALSIFY-PERF-SYNC-001 uses it too)
from pvlab.runtime import errors, kernels, trainer as trainer_module
from pvlab.runtime.data import LMBatch


def small_trainer(path: str, **overrides) -> runtime.Trainer:
    model = runtime.init_model(config=tiny_config(vocab_size=300, num_hidden_layers=2), weights="random", seed=0)
    settings = dict(lr=3e-3, weight_decay=0.1, grad_clip=1e-3, seed=0, path=path, device="cpu")  # clipping active
    settings.update(overrides)
    return runtime.Trainer(model, **settings)


def batch(seed: int = 0) -> LMBatch:
    return LMBatch.from_sequences(torch.randint(0, 300, (4, 17), generator=torch.Generator().manual_seed(seed)))


@pytest.mark.parametrize("micro_batches", [1, 2])
def test_a_fast_path_training_step_reads_the_device_once(micro_batches):
    # (The reference path's single-tensor AdamW reads each parameter's step count by design.)
    trainer = small_trainer("fast")
    trainer.train_batch(batch(0))                      # the first step initialises the optimizer state
    # Split outside the counted region: cutting micro-batches to their longest row reads the data.
    parts = batch(1).split(4 // micro_batches)
    with HostReads() as seen:
        loss = trainer.train_step(parts)
    assert seen.reads == ["tolist"], seen.reads
    assert math.isfinite(loss) and trainer.last_loss == loss and math.isfinite(trainer.last_grad_norm)


def fused_fast_trainer() -> runtime.Trainer:
    trainer = small_trainer("fast")
    if not trainer_module.skips_on_device(trainer.optimizer):
        pytest.skip(f"torch {torch.__version__} has no fused AdamW on the CPU: the on-device skip is not exercised")
    return trainer


def test_a_non_finite_loss_is_skipped_on_the_device_and_leaves_no_trace(monkeypatch):
    trainer = fused_fast_trainer()
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    original = kernels.chunked_linear_cross_entropy
    monkeypatch.setattr(kernels, "chunked_linear_cross_entropy",
                        lambda hidden, weight, targets, **kw: original(hidden, weight, targets, **kw) * float("nan"))
    assert math.isnan(trainer.train_batch(batch(0)))
    assert trainer.nonfinite_losses == 1 and trainer.step == 0 and math.isnan(trainer.last_grad_norm)
    assert all(torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())
    # The skipped step left no optimizer step count or moment behind: the next step is a first step.
    monkeypatch.setattr(kernels, "chunked_linear_cross_entropy", original)
    trainer.train_batch(batch(1))
    fresh = fused_fast_trainer()
    fresh.train_batch(batch(1))
    assert trainer.step == fresh.step == 1
    for (name, p), q in zip(trainer.model.named_parameters(), fresh.model.parameters()):
        assert torch.equal(p, q), name


@pytest.mark.parametrize("path", ["fast", "reference"])
def test_a_batch_without_targets_is_refused_and_changes_nothing(path):
    trainer = small_trainer(path)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    empty = batch(0)
    empty = LMBatch(empty.inputs, torch.full_like(empty.targets, kernels.IGNORE_INDEX))
    with pytest.raises(errors.ArgumentError, match="no target tokens"):
        trainer.train_batch(empty)
    assert trainer.step == 0 and trainer.nonfinite_losses == 0
    assert all(torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())
