"""Resume continuity: a run saved and resumed continues exactly as the run never interrupted.

docs/runtime.md (Trainer): `save(dir)` / `Trainer.resume(dir)` keep "weights, optimizer moments,
step, schedule and hyperparameters. On the CPU the next loss after resuming is bit-for-bit the
loss the uninterrupted run computes". The resume falsifier of checkpoint-round-trip
(FALSIFY-CHECKPOINT-ROUNDTRIP-005) trains at the Trainer's default constant rate, where a resumed
trainer that loses its schedule (warmup_steps, total_steps, min_lr) trains exactly as one that
keeps it; only a run whose schedule still changes after the save can see the difference.

This check trains a tiny model with a warmup-then-cosine schedule past its total_steps, saves it
once inside the warmup and once inside the decay (through a temporary directory), resumes each,
and compares every following step with the uninterrupted run. Two oracles:

* the learning rate: the schedule written out here from docs/runtime.md's definition, in float64
  Python arithmetic ("lr·(s+1)/W while s < W; then min_lr + ½(lr − min_lr)(1 + cos(π(s − W)/(T − W)))
  while s < T; min_lr from s = T on"), independent of runtime.trainer.learning_rate; the rate
  read is the one the optimizer applied (every param group's lr after the step). The two
  formulas may round differently in the last bit, so the oracle admits 1e-12 of the peak rate;
  the resumed rate must equal the uninterrupted run's rate exactly.
* the trajectory: the uninterrupted run on the same batches. Losses, every parameter and the
  optimizer digest after the remaining steps must be equal bit for bit: docs/runtime.md promises
  the next loss bit for bit, and since weights, moments, step and schedule are all restored
  exactly, every later step is the same computation on the same inputs (CPU, deterministic).

The saved hyperparameters are compared with the settings the check gave the constructor (a dict
written here): read back from the first trainer.json, held by the resumed trainer, and read back
from the trainer.json the resumed trainer saves after its remaining steps. Both execution paths
(reference, fast) are run; the model and batches are the check's own (the tiny preset, seeded
random tokens), so no cached checkpoint is involved.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import torch

from ._util import torch_device

PEAK, MIN_LR, WARMUP, TOTAL = 1e-2, 1e-3, 3, 10
STEPS = 12                      # two steps past total_steps: min_lr's tail is read too
SAVE_AT = (1, 6)                # inside the warmup (1 < 3), inside the decay (3 <= 6 < 10)
BATCH, SEQ_LEN = 4, 16
LR_RTOL = 1e-12                 # oracle formula vs runtime formula: last-bit rounding only
PATHS = ("reference", "fast")


def documented_lr(step: int, *, peak: float = PEAK, warmup: int = WARMUP, total: int = TOTAL,
                  min_lr: float = MIN_LR) -> float:
    """docs/runtime.md's learning rate at step s (0-based, steps already taken), float64."""
    if step < warmup:
        return peak * (step + 1) / warmup
    if step < total:
        return min_lr + 0.5 * (peak - min_lr) * (1.0 + math.cos(math.pi * (step - warmup) / (total - warmup)))
    return min_lr


def _expected_hyperparameters(seed: int) -> dict:
    """The settings the check gives the Trainer, as trainer.json should hold them."""
    return {"lr": PEAK, "weight_decay": 0.1, "betas": [0.9, 0.95], "grad_clip": 1.0, "seed": seed,
            "warmup_steps": WARMUP, "total_steps": TOTAL, "min_lr": MIN_LR}


def _batches(seed: int, vocab_size: int) -> list:
    from pvlab.runtime.data import LMBatch

    generator = torch.Generator().manual_seed(seed)
    return [LMBatch.from_sequences(torch.randint(0, vocab_size, (BATCH, SEQ_LEN + 1), generator=generator))
            for _ in range(STEPS)]


def _fresh_trainer(path: str, seed: int):
    from pvlab.runtime import checkpoint
    from pvlab.runtime.config import preset
    from pvlab.runtime.trainer import Trainer

    model = checkpoint.init_model(config=preset("tiny"), weights="random", seed=seed, device="cpu", path=path,
                                  parity_gate=False)
    h = _expected_hyperparameters(seed)
    return Trainer(model, lr=h["lr"], weight_decay=h["weight_decay"], betas=tuple(h["betas"]),
                   grad_clip=h["grad_clip"], seed=seed, warmup_steps=h["warmup_steps"],
                   total_steps=h["total_steps"], min_lr=h["min_lr"])


def _applied_rates(trainer) -> list[float]:
    return [float(group["lr"]) for group in trainer.optimizer.param_groups]


def _saved_hyperparameters(directory: Path):
    from pvlab.runtime.trainer import TRAINER_STATE_NAME

    return json.loads((directory / TRAINER_STATE_NAME).read_text(encoding="utf-8"))["hyperparameters"]


def resume_continues_run(*, device: str, seed: int = 0) -> dict:
    """For each path and each save point s of SAVE_AT: train s steps, save, resume, train to
    STEPS; compare with one uninterrupted run of STEPS steps on the same batches.

    Observations: resumes (save/resume pairs made), steps_after_resume (steps compared in all),
    lr_mismatches (steps after a resume whose applied rate, in any param group, differs from the
    documented schedule by more than 1e-12 of the peak or from the uninterrupted run's rate at all),
    reference_lr_mismatches (steps of the uninterrupted runs whose applied rate is off the
    documented schedule), loss_mismatches (steps after a resume whose loss differs from the
    uninterrupted run's), parameter_mismatches (parameter tensors not bit-equal after the last
    step), optimizer_mismatches (resumed runs whose optimizer digest differs at the end),
    step_mismatches (a resumed trainer whose step is not s after resuming or not STEPS at the
    end), hyperparameter_mismatches (saved trainer.json, resumed trainer, and the resumed
    trainer's own trainer.json: each one whose hyperparameters differ from the settings given),
    schedule_rates (distinct rates the schedule takes over the run: it must not be constant)."""
    torch_device(device)   # CPU only: the bit-for-bit promise is the CPU's
    from pvlab.runtime.trainer import Trainer

    expected_hyper = _expected_hyperparameters(seed)
    oracle = [documented_lr(s) for s in range(STEPS)]
    tolerance = LR_RTOL * PEAK
    counts = dict.fromkeys(("resumes", "steps_after_resume", "lr_mismatches", "reference_lr_mismatches",
                            "loss_mismatches", "parameter_mismatches", "optimizer_mismatches",
                            "step_mismatches", "hyperparameter_mismatches"), 0)
    for path in PATHS:
        straight = _fresh_trainer(path, seed)
        batches = _batches(seed, straight.model.config.vocab_size)
        straight_losses, straight_rates = [], []
        for s, batch in enumerate(batches):
            straight_losses.append(straight.train_batch(batch))
            rates = _applied_rates(straight)
            straight_rates.append(rates)
            counts["reference_lr_mismatches"] += int(any(abs(r - oracle[s]) > tolerance for r in rates))
        for save_at in SAVE_AT:
            interrupted = _fresh_trainer(path, seed)
            for batch in batches[:save_at]:
                interrupted.train_batch(batch)
            with tempfile.TemporaryDirectory(prefix="pv-resume-continuity-") as tmp:
                first, again = Path(tmp) / "saved", Path(tmp) / "resaved"
                interrupted.save(first)
                counts["hyperparameter_mismatches"] += int(_saved_hyperparameters(first) != expected_hyper)
                resumed = Trainer.resume(first, device="cpu", path=path)
                counts["resumes"] += 1
                counts["hyperparameter_mismatches"] += int(resumed.hyperparameters != expected_hyper)
                counts["step_mismatches"] += int(resumed.step != save_at)
                for s in range(save_at, STEPS):
                    loss = resumed.train_batch(batches[s])
                    rates = _applied_rates(resumed)
                    counts["steps_after_resume"] += 1
                    counts["lr_mismatches"] += int(any(abs(r - oracle[s]) > tolerance for r in rates)
                                                   or rates != straight_rates[s])
                    counts["loss_mismatches"] += int(loss != straight_losses[s])
                counts["step_mismatches"] += int(resumed.step != STEPS)
                counts["parameter_mismatches"] += sum(
                    int(not torch.equal(a.detach(), b.detach()))
                    for a, b in zip(straight.model.parameters(), resumed.model.parameters()))
                counts["optimizer_mismatches"] += int(resumed.optimizer_digest() != straight.optimizer_digest())
                resumed.save(again)
                counts["hyperparameter_mismatches"] += int(_saved_hyperparameters(again) != expected_hyper)
    return {**counts, "schedule_rates": len(set(oracle)), "paths": len(PATHS)}
