"""Resume keeps every setting, not only the ones a run leaves at their defaults.

FALSIFY-RESUME-CONTINUITY-001 (pvlab.falsifiers.resume_continuity) resumes runs whose
grad_clip (1.0), weight_decay (0.1) and betas ((0.9, 0.95)) are the Trainer constructor's
defaults: a resume that rebuilds the trainer without one of them gets the default back, which is
the value the run had, and nothing differs. This check gives every hyperparameter a value no
default has and asks the same of the resume: the hyperparameters saved, held by the resumed
trainer and saved again are the ones given (a dict written in the check), and the losses,
parameters and optimizer digest after the resume are the uninterrupted run's bit for bit
(docs/runtime.md, Trainer: save / resume keep "weights, optimizer moments, step, schedule and
hyperparameters"; on the CPU the continuation is bit for bit).

Two settings, each on the reference and the fast path: clipping at 0.05 (below the tiny model's
gradient norms, so every step clips: counted, the non-vacuity) with weight decay 0.3 and betas
(0.8, 0.99) at a constant rate; and clipping off (0.0) with no weight decay, betas (0.85, 0.9)
and a warmup + cosine schedule. The model and batches are the check's own (the tiny preset,
seeded random tokens).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from ._util import torch_device

SETTINGS = (
    {"lr": 1e-2, "weight_decay": 0.3, "betas": [0.8, 0.99], "grad_clip": 0.05, "warmup_steps": 0,
     "total_steps": None, "min_lr": 1e-2},
    {"lr": 1e-2, "weight_decay": 0.0, "betas": [0.85, 0.9], "grad_clip": 0.0, "warmup_steps": 1,
     "total_steps": 4, "min_lr": 2e-3},
)
STEPS, SAVE_AT = 4, 2
BATCH, SEQ_LEN = 4, 16
PATHS = ("reference", "fast")


def _trainer(settings: dict, path: str, seed: int):
    from pvlab.runtime import checkpoint
    from pvlab.runtime.config import preset
    from pvlab.runtime.trainer import Trainer

    model = checkpoint.init_model(config=preset("tiny"), weights="random", seed=seed, device="cpu", path=path,
                                  parity_gate=False)
    return Trainer(model, lr=settings["lr"], weight_decay=settings["weight_decay"], betas=tuple(settings["betas"]),
                   grad_clip=settings["grad_clip"], seed=seed, warmup_steps=settings["warmup_steps"],
                   total_steps=settings["total_steps"], min_lr=settings["min_lr"])


def _batches(seed: int, vocab_size: int) -> list:
    from pvlab.runtime.data import LMBatch

    generator = torch.Generator().manual_seed(seed)
    return [LMBatch.from_sequences(torch.randint(0, vocab_size, (BATCH, SEQ_LEN + 1), generator=generator))
            for _ in range(STEPS)]


def _saved(directory: Path) -> dict:
    from pvlab.runtime.trainer import TRAINER_STATE_NAME

    return json.loads((directory / TRAINER_STATE_NAME).read_text(encoding="utf-8"))["hyperparameters"]


def resume_keeps_every_setting(*, device: str, seed: int = 0) -> dict:
    """For each of SETTINGS and each path: train SAVE_AT steps, save, resume, train to STEPS;
    compare with one uninterrupted run of STEPS steps on the same batches.

    Observations: resumes, steps_after_resume, hyperparameter_mismatches (the first trainer.json,
    the resumed trainer, the trainer.json the resumed trainer saves: each whose hyperparameters
    differ from the settings given plus the seed), loss_mismatches, parameter_mismatches,
    optimizer_mismatches (bit for bit against the uninterrupted run), clipped_steps (steps after
    a resume, with clipping at 0.05, whose pre-clip gradient norm in the uninterrupted run exceeds
    it: where a lost clip would show), clipping_steps_possible (those steps in all)."""
    torch_device(device)   # CPU only: the bit-for-bit promise is the CPU's
    from pvlab.runtime.trainer import Trainer

    counts = dict.fromkeys(("resumes", "steps_after_resume", "hyperparameter_mismatches", "loss_mismatches",
                            "parameter_mismatches", "optimizer_mismatches", "clipped_steps",
                            "clipping_steps_possible"), 0)
    for settings in SETTINGS:
        expected = {**settings, "seed": seed}
        for path in PATHS:
            straight = _trainer(settings, path, seed)
            batches = _batches(seed, straight.model.config.vocab_size)
            losses, norms = [], []
            for batch in batches:
                losses.append(straight.train_batch(batch))
                norms.append(straight.last_grad_norm)
            interrupted = _trainer(settings, path, seed)
            for batch in batches[:SAVE_AT]:
                interrupted.train_batch(batch)
            with tempfile.TemporaryDirectory(prefix="pv-resume-settings-") as tmp:
                first, again = Path(tmp) / "saved", Path(tmp) / "resaved"
                interrupted.save(first)
                counts["hyperparameter_mismatches"] += int(_saved(first) != expected)
                resumed = Trainer.resume(first, device="cpu", path=path)
                counts["resumes"] += 1
                counts["hyperparameter_mismatches"] += int(resumed.hyperparameters != expected)
                for s in range(SAVE_AT, STEPS):
                    counts["steps_after_resume"] += 1
                    counts["loss_mismatches"] += int(resumed.train_batch(batches[s]) != losses[s])
                    if settings["grad_clip"] > 0:
                        counts["clipping_steps_possible"] += 1
                        counts["clipped_steps"] += int(norms[s] > settings["grad_clip"])
                counts["parameter_mismatches"] += sum(
                    int(not torch.equal(a.detach(), b.detach()))
                    for a, b in zip(straight.model.parameters(), resumed.model.parameters()))
                counts["optimizer_mismatches"] += int(resumed.optimizer_digest() != straight.optimizer_digest())
                resumed.save(again)
                counts["hyperparameter_mismatches"] += int(_saved(again) != expected)
    return {**counts, "settings": len(SETTINGS), "paths": len(PATHS)}
