"""Probes of the master-weight planted bugs (mutants/trainer.py, "master weights (issue #29)"), for
test_mutants.py: each is a cheap direct call whose result changes while its mutant is active."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file

from pvlab.runtime import checkpoint
from pvlab.runtime.config import preset
from pvlab.runtime.data import LMBatch
from pvlab.runtime.master_weights import MasterWeightTrainer


def _run(grad_clip: float = 0.5) -> MasterWeightTrainer:
    model = checkpoint.init_model(config=preset("tiny"), weights="random", seed=3, device="cpu", path="fast",
                                  parity_gate=False)
    return MasterWeightTrainer(model, lr=1e-2, grad_clip=grad_clip)


def _batch() -> LMBatch:
    return LMBatch.from_sequences([[1, 2, 3, 7, 5, 6], [8, 9, 7, 10, 11, 12]])


def _trained() -> tuple:
    run = _run()
    run.train_batch(_batch())
    run.train_batch(_batch())
    q = dict(run.model.named_parameters())["model.layers.0.self_attn.q_proj.weight"]
    return run, q


def probe_master_bf16_copy_not_refreshed():
    _, q = _trained()
    return q.detach().clone()


def probe_master_update_ignores_clip():
    run, _ = _trained()
    return run.optimizer.sets[0].exp_avg.clone()


def probe_master_bias_correction_off_by_one():
    run, _ = _trained()
    return run.optimizer.masters.clone()


def probe_master_update_ignores_skip():
    run, _ = _trained()
    with torch.no_grad():
        run.model.model.embed_tokens.weight[7] = float("nan")
    run.train_batch(_batch())
    return run.optimizer.masters.clone()


def probe_master_checkpoint_saves_bf16_rounding():
    run, _ = _trained()
    with tempfile.TemporaryDirectory() as tmp:
        run.save(Path(tmp) / "c")
        return load_file(str(Path(tmp) / "c" / "model.safetensors"))["model.layers.0.self_attn.q_proj.weight"]
