"""The learning rate a runtime's schedule applies, step by step, against the documented schedule.

The oracle is the definition pvpack.protocol.TrainSettings documents, written here in float64:
linear warmup to the peak over `warmup_steps` (step s < warmup runs at lr * (s + 1) / warmup),
then cosine decay from the peak to `min_lr` at `total_steps`, the floor after. It shares no code
with any runtime's schedule (pvlab's runtime.trainer.learning_rate, the transformers adapter's
`schedule`), so a warmup that never warms, a floor ignored or a decay one step late shows as a
difference at some step.

Assumes: the runtime reports the rate it applies at optimizer step s (0-based) through
`learning_rate(step)` of a model loaded with TrainSettings — read from what its trainer applies
(an optimizer's param groups, its own schedule function), not a copy of the formula in the
adapter, which would test the copy. Assumes the schedule's shape is TrainSettings': warmup from
lr / warmup_steps at step 0 (not from 0, as Hugging Face's get_cosine_schedule_with_warmup
starts), cosine decay over total_steps - warmup_steps steps, min_lr from total_steps on. A
runtime whose schedule has another shape (warmup from 0, linear or stepwise decay, no floor)
converts in its adapter or raises CapabilityMissing for the settings it cannot honour
(TrainSettings says so); no choice of this check's parameters makes another shape fit.
"""

from __future__ import annotations

import math

from ..protocol import LEARNING_RATE, LOAD, TrainSettings
from ._base import load, subject_of, uses


def documented_lr(step: int, *, lr: float, min_lr: float, warmup_steps: int, total_steps: int) -> float:
    """The schedule of pvpack.protocol.TrainSettings, in float64."""
    if warmup_steps and step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


@uses(LOAD, LEARNING_RATE)
def lr_schedule(*, runtime, device: str, subject: str, lr: float = 3e-3, min_lr: float = 3e-4,
                warmup_steps: int = 4, total_steps: int = 12, steps: int = 16) -> dict:
    """The runtime's learning rate at steps 0..steps-1 of a model loaded for training with this
    schedule, against the documented one.

    Observations: lr_max_rel_diff (over every step), warmup_max_rel_diff (warmup steps only),
    warmup_first_lr_ratio (the runtime's lr at step 0 / the peak; 1 / warmup_steps as documented),
    steps_checked, warmup_steps_checked."""
    if not 0 < warmup_steps < total_steps < steps:
        raise ValueError(f"need 0 < warmup_steps < total_steps < steps to cover warmup, decay and floor; got "
                         f"{warmup_steps}, {total_steps}, {steps}")
    settings = TrainSettings(lr=lr, min_lr=min_lr, warmup_steps=warmup_steps, total_steps=total_steps)
    model = load(runtime, subject_of(subject), device, train=settings)
    applied = [float(model.learning_rate(step)) for step in range(steps)]
    model.close()
    expected = [documented_lr(s, lr=lr, min_lr=min_lr, warmup_steps=warmup_steps, total_steps=total_steps)
                for s in range(steps)]
    rel = [abs(a - e) / e for a, e in zip(applied, expected)]
    return {"lr_max_rel_diff": max(rel), "warmup_max_rel_diff": max(rel[:warmup_steps]),
            "warmup_first_lr_ratio": applied[0] / lr, "steps_checked": steps, "warmup_steps_checked": warmup_steps}
