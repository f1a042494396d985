"""Probes of the training, optimizer, checkpoint and fine-tuning planted bugs of the first batches
(mutants/trainer.py, checkpoint.py, kernels.py, model.py, data.py), kept apart from
test_mutants.py for its size: each returns what the runtime computes, so that the test can show the
bug changes it (test_mutants.test_the_mutant_changes_behaviour)."""

from __future__ import annotations

from pathlib import Path

import torch

from oracle_mutant_probes import tiny_model
from pvlab.runtime import checkpoint, data, kernels, parity, trainer
from pvlab.runtime.config import preset
from pvlab.runtime.data import LMBatch
from pvlab.runtime.model import KVCache


def tokens(batch: int = 2, length: int = 12, seed: int = 3) -> torch.Tensor:
    return torch.randint(0, preset("tiny").vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed))


def _one_step(build) -> torch.Tensor:
    parameter = torch.nn.Parameter(torch.linspace(-1, 1, 12).reshape(3, 4))
    optimizer = build([("w", parameter)], lr=0.1, weight_decay=0.1, betas=(0.9, 0.95), path="reference",
                      device=torch.device("cpu"))
    parameter.grad = torch.linspace(-0.5, 0.5, 12).reshape(3, 4)
    optimizer.step()
    return parameter.detach().clone()


def probe_adamw_second_moment_not_squared():
    return int(torch.isnan(_one_step(trainer.build_optimizer)).sum())


def probe_optimizer_holds_stale_parameters():
    return _one_step(trainer.build_optimizer)


def probe_grad_norm_per_tensor_not_global():
    return trainer.global_grad_norm([torch.ones(3), torch.ones(4)])


def probe_batch_order_not_seeded():
    stream = torch.arange(500)
    first = next(data.random_batches(stream, batch_size=2, seq_len=8, seed=0)).inputs
    second = next(data.random_batches(stream, batch_size=2, seq_len=8, seed=0)).inputs
    return torch.equal(first, second)


def probe_finetune_starts_from_random_init():
    import importlib

    pretrain = importlib.import_module("pvlab.runtime.pretrain")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pv-probe-") as directory:
        checkpoint.save_checkpoint(tiny_model(seed=4), Path(directory) / "ckpt")
        loaded = pretrain.checkpoint.load(Path(directory) / "ckpt", parity_gate=False)
    return loaded.model.layers[0].self_attn.q_proj.weight.detach().clone()


def probe_causal_mask_sees_next_key():
    return kernels.causal_mask(4, 6, "cpu")


def probe_kv_cache_evicts_oldest_entry():
    cache = KVCache(1)
    for step in range(10):
        keys, _ = cache.update(0, torch.full((1, 1, 1, 2), float(step)), torch.zeros(1, 1, 1, 2))
    return keys[0, 0, :, 0]


def _chunked_loss_and_gradient(scale: float):
    generator = torch.Generator().manual_seed(7)
    hidden = (torch.randn(2, 6, 8, generator=generator) * scale).requires_grad_()
    weight = torch.randn(30, 8, generator=generator)
    targets = torch.randint(0, 30, (2, 6), generator=generator)
    loss = kernels.chunked_linear_cross_entropy(hidden, weight, targets, chunk_tokens=4, compute_dtype=torch.float32)
    loss.backward()
    return loss.detach(), hidden.grad


def probe_chunked_cross_entropy_gradient_doubled():
    return _chunked_loss_and_gradient(1.0)[1]


def probe_chunked_cross_entropy_without_max_subtraction():
    return _chunked_loss_and_gradient(1000.0)[0]


def probe_init_weights_unseeded():
    model = checkpoint.init_model(config="tiny", weights="random", seed=0, parity_gate=False)
    return model.model.layers[0].self_attn.q_proj.weight.detach().clone()


def probe_tied_head_replaced_by_random_rows():
    source = tiny_model(seed=2)
    model = checkpoint.init_model(config=preset("tiny"), weights=checkpoint.model_tensors(source), parity_gate=False)
    return model.lm_head.weight is model.model.embed_tokens.weight, model.lm_head.weight.detach().clone()


def probe_parity_gate_refuses_everything():
    try:
        parity.place(tiny_model(), torch.device("cpu"), "fast", gate=True)
        return "accepted"
    except Exception as error:  # noqa: BLE001 - which refusal it is, is the probe
        return type(error).__name__


def probe_eval_batch_reports_a_rescaled_loss():
    return trainer.Trainer(tiny_model(), lr=1e-3).eval_batch(LMBatch.from_sequences(tokens(2, 13, seed=14)))


def probe_grad_norm_reported_after_clipping():
    return trainer.global_grad_norm([torch.full((10,), 3.0)])


def probe_resume_drops_optimizer_state():
    import tempfile

    run = trainer.Trainer(tiny_model(), lr=1e-3)
    run.train_batch(LMBatch.from_sequences(tokens(2, 13, seed=15)))
    with tempfile.TemporaryDirectory(prefix="pv-probe-") as directory:
        run.save(Path(directory) / "run")
        resumed = trainer.Trainer.resume(Path(directory) / "run")
    return len(resumed.optimizer.state)
