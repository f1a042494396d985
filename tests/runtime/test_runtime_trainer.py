"""Trainer invariants: decoupled weight decay, the real global grad norm, eval without side
effects, determinism, and bit-for-bit resume on the CPU."""

from __future__ import annotations

import math

import pytest
import torch
from runtime_helpers import tiny_config

from pvlab import runtime
from pvlab.runtime import errors
from pvlab.runtime.data import LMBatch


def batches(count: int, seed: int = 0, vocab: int = 512, length: int = 33):
    generator = torch.Generator().manual_seed(seed)
    return [LMBatch.from_sequences(torch.randint(0, vocab, (4, length), generator=generator)) for _ in range(count)]


def new_trainer(path="reference", seed=0, **overrides):
    model = runtime.init_model(config="tiny", weights="random", seed=seed)
    settings = dict(lr=3e-3, weight_decay=0.1, betas=(0.9, 0.95), grad_clip=1.0, seed=seed, path=path, device="cpu")
    settings.update(overrides)
    return runtime.Trainer(model, **settings)


@pytest.mark.parametrize("path", ["reference", "fast"])
def test_resume_gives_the_same_next_loss_bit_for_bit(path, tmp_path):
    data = batches(6)
    trainer = new_trainer(path, warmup_steps=2, total_steps=6, min_lr=3e-4)
    for batch in data[:3]:
        trainer.train_batch(batch)
    trainer.save(tmp_path / "ckpt")
    continued = [trainer.train_batch(batch) for batch in data[3:]]

    resumed = runtime.Trainer.resume(tmp_path / "ckpt")
    assert resumed.step == 3 and resumed.path == path
    assert resumed.optimizer.param_groups[0]["weight_decay"] == 0.1
    after_resume = [resumed.train_batch(batch) for batch in data[3:]]
    assert after_resume == continued  # exact float equality, not approx
    assert resumed.optimizer_digest() == trainer.optimizer_digest()


def test_two_seeded_runs_have_the_same_optimizer_digest_and_a_third_does_not():
    digests = []
    for seed in (0, 0, 1):
        trainer = new_trainer(seed=seed)
        for batch in batches(3):
            trainer.train_batch(batch)
        digests.append(trainer.optimizer_digest())
    assert digests[0] == digests[1] != digests[2]
    assert len(digests[0]) == 64


def test_last_grad_norm_is_the_global_l2_norm_before_clipping():
    trainer = new_trainer(grad_clip=1e-3)  # clips every step
    batch = batches(1)[0]
    model = trainer.model
    # The gradient the step will see, computed independently of the trainer:
    model.zero_grad()
    model.loss(batch.inputs, batch.targets).backward()
    expected = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in model.parameters()))
    model.zero_grad()
    trainer.train_batch(batch)
    assert trainer.last_grad_norm == pytest.approx(expected, rel=1e-5)
    clipped = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in model.parameters()))
    assert clipped == pytest.approx(1e-3, rel=1e-3)  # what was applied was clipped


def test_weight_decay_is_decoupled_from_the_adam_update():
    """With a zero gradient Adam's update is zero, so only decoupled decay moves a weight:
    w <- w * (1 - lr * wd) exactly. L2-style (coupled) decay would instead move it by ~lr."""
    trainer = new_trainer(lr=0.01, weight_decay=0.5, grad_clip=0.0)
    model = trainer.model
    weight = model.model.layers[0].mlp.up_proj.weight
    norm_weight = model.model.layers[0].input_layernorm.weight
    before, norm_before = weight.detach().clone(), norm_weight.detach().clone()
    for parameter in model.parameters():
        parameter.grad = torch.zeros_like(parameter)
    trainer.optimizer.step()
    assert torch.allclose(weight, before * (1 - 0.01 * 0.5), rtol=0, atol=1e-9)
    assert torch.equal(norm_weight, norm_before)  # norms are not decayed


def test_eval_changes_nothing_that_training_owns():
    trainer = new_trainer()
    train, held_out = batches(2, seed=0), batches(1, seed=1)[0]
    trainer.train_batch(train[0])
    parameters = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    gradients = {n: p.grad.clone() for n, p in trainer.model.named_parameters()}
    digest, step = trainer.optimizer_digest(), trainer.step
    first = trainer.eval_batch(held_out)
    assert trainer.eval_batch(held_out) == first
    assert trainer.optimizer_digest() == digest and trainer.step == step
    for name, parameter in trainer.model.named_parameters():
        assert torch.equal(parameter, parameters[name]) and torch.equal(parameter.grad, gradients[name])
    assert trainer.model.training  # eval restored the mode it found


def test_eval_loss_moves_with_the_model_not_with_the_last_train_loss():
    trainer = new_trainer(lr=1e-2)
    train, held_out = batches(3, seed=0), batches(1, seed=1)[0]
    before = trainer.eval_batch(held_out)
    train_loss = trainer.train_batch(train[0])
    after = trainer.eval_batch(held_out)
    assert after != before and after != train_loss
    assert 0.5 < after < 1.5 * math.log(512)


def test_eval_loss_of_a_random_model_is_near_ln_vocab():
    trainer = new_trainer()
    loss = trainer.evaluate(batches(2, seed=3))
    assert abs(loss - math.log(512)) < 0.1


def test_training_lowers_the_loss():
    trainer = new_trainer(lr=1e-2)
    batch = batches(1)[0]
    first = trainer.train_batch(batch)
    for _ in range(10):
        last = trainer.train_batch(batch)
    assert last < first - 1.0


def test_non_finite_loss_skips_the_update(monkeypatch):
    trainer = new_trainer()
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    monkeypatch.setattr(runtime.kernels, "cross_entropy_reference", lambda logits, targets: torch.tensor(float("nan")))
    assert math.isnan(trainer.train_batch(batches(1)[0]))
    assert trainer.nonfinite_losses == 1 and trainer.step == 0
    assert all(torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())


def test_learning_rate_schedule_warms_up_and_decays():
    trainer = new_trainer(lr=1e-2, warmup_steps=4, total_steps=20, min_lr=1e-3)
    rates = []
    for _ in range(20):
        rates.append(trainer.current_lr())
        trainer.step += 1
    assert rates[0] == pytest.approx(2.5e-3) and rates[3] == pytest.approx(1e-2)
    assert all(a >= b - 1e-12 for a, b in zip(rates[3:], rates[4:]))
    assert rates[-1] > 1e-3 - 1e-12 and trainer.current_lr() == pytest.approx(1e-3)


def test_resume_refuses_a_checkpoint_without_trainer_state(hf_qwen2_dir):
    with pytest.raises(errors.CheckpointError, match="trainer.json"):
        runtime.Trainer.resume(hf_qwen2_dir)


def test_bad_optimizer_settings_are_refused():
    model = runtime.init_model(config=tiny_config(), weights="random", seed=0)
    with pytest.raises(errors.ArgumentError):
        runtime.Trainer(model, lr=-1.0)


def test_compile_scope_names_what_is_compiled_and_refuses_anything_else():
    from pvlab.runtime import trainer as trainer_module

    assert [trainer_module.compile_scope(c) for c in (False, None, True, "layers", "model")] == \
        [None, None, "layers", "layers", "model"]
    with pytest.raises(errors.ArgumentError, match="compile must be"):
        new_trainer(compile="everything")
