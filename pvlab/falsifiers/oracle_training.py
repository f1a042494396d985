"""A textbook training loop as the oracle of `pvlab.runtime.trainer.Trainer`.

The loop below is written from the documented hyperparameters only (docs/runtime.md, Training):

* AdamW (`torch.optim.AdamW`, torch's single-tensor implementation, eps 1e-8) with two parameter
  groups: weight decay on matrices, none on norms and biases (chosen here by parameter *name*,
  not by the runtime's `trainer.decays`);
* the learning rate at step s (0-based): linear warmup lr·(s+1)/W for s < W, then cosine
  min_lr + ½(lr − min_lr)(1 + cos(π (s − W)/(T − W))) until s = T, and min_lr from then on;
* plain autograd on the model's loss, then `torch.nn.utils.clip_grad_norm_` (clip by the global
  L2 norm, factor min(1, max_norm / (norm + 1e-6))), then the optimizer step.

The loop and the Trainer start from copies of one model and see the same batches; what is
compared step by step is everything the trainer reports or keeps: the learning rate it used, the
grad norm it reports, the clip factor it applied (read from the clipped .grad it leaves), the
loss, the optimizer state (exp_avg, exp_avg_sq, step) of every parameter by name, the weight
decay of every parameter's group, and every parameter after the last step.

Independent of the trainer (schedule, grouping, clipping, step accounting, optimizer
construction); not of the model's forward and loss, which both sides call (the transformers
oracle covers those).
"""

from __future__ import annotations

import math

import torch

from . import fixtures
from ._util import rtol_atol, torch_device


def textbook_lr(step: int, *, lr: float, warmup_steps: int, total_steps: int, min_lr: float) -> tuple[float, str]:
    """The documented schedule, and which branch of it `step` is in."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps, "warmup"
    if step < total_steps:
        progress = (step - warmup_steps) / (total_steps - warmup_steps)
        return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress)), "decay"
    return min_lr, "floor"


def _decays_by_name(name: str) -> bool:
    """Documented: weight decay applies to matrices, never to norms or biases."""
    return not (name.endswith(".bias") or name.endswith("norm.weight"))


def _global_norm(gradients) -> float:
    return math.sqrt(sum(float(g.detach().double().pow(2).sum()) for g in gradients))


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """max|a - b| / max|b| in float64 on the CPU (0 when both are zero; NaN if anything is)."""
    a, b = a.detach().to("cpu", torch.float64), b.detach().to("cpu", torch.float64)
    if a.shape != b.shape or not bool(torch.isfinite(a).all()):
        return float("nan")
    diff, scale = float((a - b).abs().max()), float(b.abs().max())
    return diff / scale if scale else (0.0 if diff == 0 else float("inf"))


def _start_model(device: str, path: str, seed: int):
    from pvlab.runtime import checkpoint
    from pvlab.runtime.config import ModelConfig

    config = ModelConfig.from_json_file(fixtures.checkpoint_dir("tiny-trained") / "config.json")
    return checkpoint.init_model(config=config, weights="random", seed=seed, device=device, path=path,
                                 parity_gate=False)


def _state_of(optimizer, parameter) -> dict[str, torch.Tensor]:
    state = optimizer.state.get(parameter, {})
    return {key: value if isinstance(value, torch.Tensor) else torch.tensor(float(value))
            for key, value in state.items()}


def _group_decay(optimizer, parameter) -> float | None:
    for group in optimizer.param_groups:
        if any(p is parameter for p in group["params"]):
            return float(group["weight_decay"])
    return None


def trainer_matches_textbook_loop(*, device: str, path: str | None = None, steps: int = 10, lr: float = 3e-3,
                                  min_lr: float = 3e-4, warmup_steps: int = 3, total_steps: int = 8,
                                  weight_decay: float = 0.1, beta1: float = 0.9, beta2: float = 0.95,
                                  grad_clip: float = 1.0, seed: int = 0, tolerance=None) -> dict:
    """`steps` Trainer.train_batch steps against the textbook loop (module docstring), from the
    runtime's random init of the tiny architecture (seed), on the tiny corpus' training batches.

    Observations (relative differences are max|trainer - textbook| / max|textbook|, worst over
    the steps): steps, trainer_steps (the trainer's own step counter), lr_max_rel_diff,
    grad_norm_max_rel_diff, clip_factor_max_abs_diff, loss_max_rel_diff, state_max_rel_diff
    (exp_avg / exp_avg_sq of every parameter, every step), state_step_mismatches (per-parameter
    step counts that differ), state_missing (parameters without optimizer state in the trainer),
    decay_group_mismatches (parameters whose group weight decay differs from the documented
    one), param_max_rel_diff (every parameter after the last step), parameters; the branches
    exercised: warmup_steps_seen, decay_steps_seen, floor_steps_seen, clipped_steps,
    unclipped_steps; rtol (float32, or bfloat16 on the fast path)."""
    from pvlab.runtime.devices import default_path

    dev = torch_device(device)
    path = path or default_path(dev)
    rtol, _ = rtol_atol(tolerance, "bfloat16" if path == "fast" else "float32")
    observations = _compare_runs(device, path, steps, lr, min_lr, warmup_steps, total_steps, weight_decay, beta1,
                                 beta2, grad_clip, seed)
    return {**observations, "rtol": rtol}


@fixtures.cached
def _compare_runs(device: str, path: str, steps: int, lr: float, min_lr: float, warmup_steps: int, total_steps: int,
                  weight_decay: float, beta1: float, beta2: float, grad_clip: float, seed: int) -> dict:
    """The two runs and their comparison (cached: two falsifiers judge one run)."""
    from pvlab.runtime.trainer import Trainer

    dev = torch.device(device)
    start = _start_model(device, path, seed)
    batches = fixtures.train_batches("tiny-trained", steps, seed=seed)

    trainer = Trainer(fixtures.fresh_copy(start), lr=lr, weight_decay=weight_decay, betas=(beta1, beta2),
                      grad_clip=grad_clip, seed=seed, warmup_steps=warmup_steps, total_steps=total_steps,
                      min_lr=min_lr)
    model = fixtures.fresh_copy(start)
    named = list(model.named_parameters())
    optimizer = torch.optim.AdamW(
        [{"params": [p for n, p in named if _decays_by_name(n)], "weight_decay": weight_decay},
         {"params": [p for n, p in named if not _decays_by_name(n)], "weight_decay": 0.0}],
        lr=lr, betas=(beta1, beta2), eps=1e-8, foreach=False)

    worst = {"lr": 0.0, "grad_norm": 0.0, "clip": 0.0, "loss": 0.0, "state": 0.0}
    branches = {"warmup": 0, "decay": 0, "floor": 0}
    clipped = unclipped = step_mismatches = missing = 0
    trainer_named = dict(trainer.model.named_parameters())
    for step, batch in enumerate(batches):
        rate, branch = textbook_lr(step, lr=lr, warmup_steps=warmup_steps, total_steps=total_steps, min_lr=min_lr)
        branches[branch] += 1
        for group in optimizer.param_groups:
            group["lr"] = rate
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss = model.loss(batch.inputs.to(dev), batch.targets.to(dev))
        loss.backward()
        params = [p for _, p in named if p.grad is not None]
        norm = float(torch.nn.utils.clip_grad_norm_(params, grad_clip, foreach=False))
        factor = _global_norm(p.grad for p in params) / norm
        optimizer.step()
        clipped, unclipped = clipped + (factor < 1 - 1e-6), unclipped + (factor >= 1 - 1e-6)

        trainer_loss = trainer.train_batch(batch)
        trainer_rates = {g["lr"] for g in trainer.optimizer.param_groups}
        trainer_norm = float(trainer.last_grad_norm)
        trainer_grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
        trainer_factor = _global_norm(trainer_grads) / trainer_norm if trainer_norm else float("nan")
        worst["lr"] = max(worst["lr"], max(abs(r - rate) / rate for r in trainer_rates))
        worst["grad_norm"] = max(worst["grad_norm"], abs(trainer_norm - norm) / norm)
        worst["clip"] = max(worst["clip"], abs(trainer_factor - factor))
        worst["loss"] = max(worst["loss"], abs(trainer_loss - float(loss.detach())) / abs(float(loss.detach())))
        for name, parameter in named:
            theirs, ours = _state_of(optimizer, parameter), _state_of(trainer.optimizer, trainer_named[name])
            if not ours:
                missing += 1
                continue
            for key in ("exp_avg", "exp_avg_sq"):
                worst["state"] = max(worst["state"], _relative(ours[key], theirs[key]) if key in ours else math.inf)
            step_mismatches += int(float(ours.get("step", -1)) != float(theirs["step"]))

    decay_mismatches = sum(int(_group_decay(trainer.optimizer, trainer_named[n]) != _group_decay(optimizer, p))
                           for n, p in named if n in trainer_named)
    decay_mismatches += sum(1 for n, _ in named if n not in trainer_named)
    param_worst = max(_relative(trainer_named[n], p) for n, p in named if n in trainer_named)
    return {"steps": len(batches), "trainer_steps": trainer.step, "lr_max_rel_diff": worst["lr"],
            "grad_norm_max_rel_diff": worst["grad_norm"], "clip_factor_max_abs_diff": worst["clip"],
            "loss_max_rel_diff": worst["loss"], "state_max_rel_diff": worst["state"],
            "state_step_mismatches": step_mismatches, "state_missing": missing,
            "decay_group_mismatches": decay_mismatches, "param_max_rel_diff": param_worst,
            "parameters": len(named), "warmup_steps_seen": branches["warmup"], "decay_steps_seen": branches["decay"],
            "floor_steps_seen": branches["floor"], "clipped_steps": clipped, "unclipped_steps": unclipped}
