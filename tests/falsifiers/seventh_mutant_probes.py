"""Probes of the seventh blind batch of planted bugs (in mutants/trainer.py, checkpoint.py,
config.py and distributed.py, each under "seventh blind batch"; docs/mutants.md, "Seventh blind
batch"), for test_mutants.py: each is a cheap direct call whose result changes while its mutant
is active. Imported by test_mutants.py (which collects every `probe_<mutant name>`)."""

from __future__ import annotations

import importlib

import torch

from pvlab.runtime import distributed, master_weights
from pvlab.runtime.config import ModelConfig, preset


# ---- checkpoint loading and the lr schedule ------------------------------------------------------

def probe_checkpoint_load_rounds_fp32_to_bf16():
    checkpoint = importlib.import_module("pvlab.runtime.checkpoint")
    parameter = torch.nn.Parameter(torch.zeros(8, 8))
    checkpoint.copy_tensor(parameter, torch.randn(8, 8, generator=torch.Generator().manual_seed(2)))
    return parameter.detach().clone()


def probe_warmup_skipped_without_total_steps():
    trainer = importlib.import_module("pvlab.runtime.trainer")
    return tuple(trainer.learning_rate(step, peak=1e-3, warmup_steps=4, total_steps=None, min_lr=0.0)
                 for step in range(6))


# ---- master weights ----------------------------------------------------------------------------------

_MATRIX = "model.layers.0.mlp.up_proj.weight"


def _master_optimizer(seed: int) -> tuple[torch.nn.Parameter, master_weights.MasterAdamW]:
    values = torch.randn(16, 24, generator=torch.Generator().manual_seed(seed))
    parameter = torch.nn.Parameter(values)
    optimizer = master_weights.MasterAdamW([(_MATRIX, parameter)], {_MATRIX}, lr=1e-2, weight_decay=0.1,
                                           betas=(0.9, 0.95))
    return parameter, optimizer


def _master_step(parameter, optimizer, seed: int) -> None:
    parameter.grad = torch.randn(parameter.shape, generator=torch.Generator().manual_seed(seed)).to(parameter.dtype)
    optimizer.step(lr=1e-2, total_norm=optimizer.grad_norm(), max_norm=0.0, skip=torch.tensor(False))


def probe_master_resume_restarts_bias_correction():
    parameter, optimizer = _master_optimizer(seed=3)
    for seed in (4, 5, 6):
        _master_step(parameter, optimizer, seed)
    _, resumed = _master_optimizer(seed=3)
    resumed.load_state_dict(optimizer.state_dict())
    return float(resumed.step_count)


def probe_master_bf16_copy_truncated():
    parameter, optimizer = _master_optimizer(seed=7)
    _master_step(parameter, optimizer, seed=8)
    return parameter.detach().clone()


# ---- config.json -------------------------------------------------------------------------------------

def probe_config_json_omits_rms_norm_eps():
    tiny_llama = preset("tiny").replace(model_type="llama", qkv_bias=False, rms_norm_eps=1e-5)
    return ModelConfig.from_hf_dict(tiny_llama.to_hf_dict()).rms_norm_eps


# ---- distributed helpers (one process, no process group needed for DDP's norm) ----------------------

def probe_ddp_grad_norm_left_squared():
    ctx = distributed.Context(rank=0, world_size=1, local_rank=0, backend="gloo", device=torch.device("cpu"))
    return distributed.grad_norm([torch.full((10,), 3.0), torch.full((3,), 1.0)], ctx)
