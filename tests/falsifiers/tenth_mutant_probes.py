"""Probes of the tenth blind batch of planted bugs (under "tenth blind batch" in
mutants/independent.py, loss.py, routes.py, data.py, entrypoints.py and adapters.py;
docs/independent-mutants.md, "Tenth batch"), for test_mutants.py: each is a cheap direct call
whose result changes while its mutant is active. Imported by test_mutants.py (which collects
every `probe_<mutant name>`)."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import torch

from adapter_mutant_probes import _batch, _checkpoint, _ids
from oracle_mutant_probes import tiny_model
from pvpack.adapters import transformers as hf_adapter
from pvpack.protocol import FAST, RANDOM, TrainSettings


def _scalars(step: float = 1.0):
    adamw_update = importlib.import_module("pvlab.runtime.adamw_update")
    return adamw_update.UpdateScalars(torch.tensor(1e-3), torch.tensor(step), torch.tensor(1.0), torch.tensor(0.0),
                                      0.9, 0.95, 1e-8)


def _rows(count: int, length: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, 512, (count, length), generator=generator).tolist()


# ---- the master-weight optimizer (runtime.adamw_update, runtime.master_weights) ----------------------

def probe_master_second_moment_bias_correction_dropped():
    return tuple(_scalars(step=2.0).corrections())


def probe_master_eps_inside_square_root():
    adamw_update = importlib.import_module("pvlab.runtime.adamw_update")
    weight = torch.ones(4)
    grad = torch.tensor([1e-7, 1e-5, 1e-3, 1.0])
    adamw_update.update_reference([weight], [grad], None, [torch.zeros(4)], [torch.zeros(4)], [0.0], _scalars())
    return weight


def probe_master_grad_norm_keeps_last_dtype_group():
    master_weights = importlib.import_module("pvlab.runtime.master_weights")
    model = tiny_model(seed=4)
    named = list(model.named_parameters())
    optimizer = master_weights.MasterAdamW(named, master_weights.master_parameter_names(model), lr=1e-3,
                                           weight_decay=0.1, betas=(0.9, 0.95))
    for _, parameter in named:
        parameter.grad = torch.ones_like(parameter)
    return optimizer.grad_norm()


# ---- the trainer (runtime.trainer) -------------------------------------------------------------------

def probe_clip_inside_accumulation_loop():
    trainer = importlib.import_module("pvlab.runtime.trainer")
    data = importlib.import_module("pvlab.runtime.data")
    model = tiny_model(seed=6)
    run = trainer.Trainer(model, lr=1e-3, grad_clip=0.05, micro_batch_size=1)
    run.train_batch(data.LMBatch.from_sequences(_rows(2, 11, seed=7)))
    return run.last_grad_norm, model.lm_head.weight.detach().clone()


def probe_resume_drops_grad_clip():
    trainer = importlib.import_module("pvlab.runtime.trainer")
    data = importlib.import_module("pvlab.runtime.data")
    run = trainer.Trainer(tiny_model(seed=8), lr=1e-3, grad_clip=0.25)
    run.train_batch(data.LMBatch.from_sequences(_rows(2, 9, seed=9)))
    with tempfile.TemporaryDirectory(prefix="pv-probe-") as directory:
        run.save(Path(directory) / "run")
        return trainer.Trainer.resume(Path(directory) / "run").hyperparameters["grad_clip"]


# ---- kernels: the fused loss and the fused projections (runtime.kernels) -----------------------------

def probe_fused_loss_statistics_in_bfloat16():
    kernels = importlib.import_module("pvlab.runtime.kernels")
    generator = torch.Generator().manual_seed(10)
    hidden = torch.randn(64, 16, generator=generator)
    weight = torch.randn(200, 16, generator=generator)
    targets = torch.randint(0, 200, (64,), generator=generator)
    return kernels.chunked_linear_cross_entropy(hidden, weight, targets, chunk_tokens=16,
                                                compute_dtype=torch.bfloat16)


def probe_fused_projection_biases_reversed():
    kernels = importlib.import_module("pvlab.runtime.kernels")
    generator = torch.Generator().manual_seed(11)
    x = torch.randn(2, 3, 8, generator=generator)
    weights = [torch.randn(8, 8, generator=generator), torch.randn(4, 8, generator=generator),
               torch.randn(4, 8, generator=generator)]
    biases = [torch.randn(8, generator=generator), torch.randn(4, generator=generator),
              torch.randn(4, generator=generator)]
    return tuple(kernels.fused_linear_fast(x, weights, biases))


# ---- data and the eval command (runtime.data, runtime.cli) ------------------------------------------

def probe_documents_encoded_with_leading_end_of_text():
    data = importlib.import_module("pvlab.runtime.data")
    tokenizer = data.train_tokenizer(["def f(x):\n    return x + 1\n", "a = 1\nb = 2\n"], 300)
    return tuple(tuple(ids) for ids in data.encode_documents(tokenizer, ["a = 1\n", "def f(x):\n"]))


def probe_perplexity_reported_as_two_to_the_loss():
    cli = importlib.import_module("pvlab.runtime.cli")
    return cli.math.exp(2.0)        # what the eval command computes the perplexity of val_loss 2.0 with


# ---- the pack's transformers adapter (pvpack.adapters.transformers) ---------------------------------

def probe_hf_schedule_advances_per_micro_batch():
    model = hf_adapter.TransformersAdapter().load(_checkpoint(), device="cpu", train=TrainSettings(
        lr=1e-3, warmup_steps=4, total_steps=10, micro_batches=2))
    model.train_step(_batch(4))
    return model.step, round(model.learning_rate(model.step), 9)


def probe_hf_random_init_seeded_after_construction():
    torch.manual_seed(123)
    model = hf_adapter.TransformersAdapter().load(_checkpoint(), device="cpu", init=RANDOM, seed=0)
    return model.state()["model.embed_tokens.weight"].clone()


def probe_hf_fast_path_loss_in_bfloat16():
    model = hf_adapter.TransformersAdapter().load(_checkpoint(), device="cpu", path=FAST)
    logits = model.logits(_ids(5)[:, :-1])
    return float(hf_adapter.token_loss(logits, _ids(5)[:, 1:]))
