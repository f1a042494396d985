"""MasterWeightTrainer (pvlab/runtime/master_weights.py): what the falsifiers of contract
master-weights do not already pin down on their own."""

from __future__ import annotations

import torch

from pvlab.runtime import checkpoint, data
from pvlab.runtime.config import preset
from pvlab.runtime.master_weights import MasterWeightTrainer
from pvlab.runtime.trainer import Trainer


def test_save_writes_on_the_cpu_and_both_trainers_resume_it(tmp_path):
    """Every parameter's optimizer "step" is the one step_count tensor (and the moments views of
    flat buffers): written as they are, safetensors refused them as shared memory on the CPU."""
    model = checkpoint.init_model(config=preset("tiny"), weights="random", seed=0, device="cpu", path="fast",
                                  parity_gate=False)
    run = MasterWeightTrainer(model, lr=1e-2)
    batch = data.LMBatch.from_sequences(torch.randint(0, 512, (2, 9), generator=torch.Generator().manual_seed(1)))
    run.train_batch(batch)
    run.save(tmp_path / "ckpt")
    for cls in (Trainer, MasterWeightTrainer):
        resumed = cls.resume(tmp_path / "ckpt", path="fast")
        assert resumed.step == 1 and resumed.optimizer_digest() == run.optimizer_digest()
