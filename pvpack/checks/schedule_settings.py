"""The learning-rate schedule under every combination of TrainSettings' schedule fields.

pvpack.checks.schedule compares one schedule (warmup, cosine decay, floor) step by step with its
definition. A runtime can honour that one and still get another combination wrong: the warmup
dropped when no `total_steps` is given (a constant rate after warmup, TrainSettings says), a
floor of None not read as the peak, no warmup at all mishandled at step 0, a decay that starts
where the warmup was meant to end. This check walks a grid of those combinations through the
same definition, extended with TrainSettings' two documented defaults: without total_steps the
rate stays at the peak after warmup, and min_lr None is the peak.

The oracle is pvpack.checks.schedule.documented_lr (float64, sharing no code with any runtime's
schedule) and TrainSettings' own documentation of total_steps None and min_lr None. Assumes what
pvpack.checks.schedule assumes: the runtime reports the rate it applies at step s through
`learning_rate(step)` of a model loaded with the settings.
"""

from __future__ import annotations

from ..protocol import LEARNING_RATE, LOAD, TrainSettings
from ._base import load, subject_of, uses
from .schedule import documented_lr

# (warmup_steps, total_steps, min_lr): every schedule field set and unset, the warmup alone, the
# decay alone, a decay as long as the warmup leaves room for, and a floor equal to the peak.
SETTINGS_GRID = ((4, None, None), (3, None, 1e-4), (0, None, None), (0, 8, 1e-4), (3, 10, 3e-4), (2, 3, None))


def settings_lr(step: int, settings: TrainSettings) -> float:
    """TrainSettings' schedule in float64: documented_lr, with total_steps None read as "constant
    after warmup" and min_lr None as the peak."""
    if settings.total_steps is None:
        if settings.warmup_steps and step < settings.warmup_steps:
            return settings.lr * (step + 1) / settings.warmup_steps
        return settings.lr
    return documented_lr(step, lr=settings.lr, min_lr=settings.floor_lr, warmup_steps=settings.warmup_steps,
                         total_steps=settings.total_steps)


@uses(LOAD, LEARNING_RATE)
def lr_schedule_settings(*, runtime, device: str, subject: str, lr: float = 3e-3, steps: int = 14) -> dict:
    """The runtime's learning rate at steps 0..steps-1 for every schedule of SETTINGS_GRID.

    Observations: lr_max_rel_diff (over every step of every schedule), worst_schedule (the
    settings and step of the largest difference, as text), settings_checked,
    warmup_without_total_checked (schedules with a warmup and no total_steps), steps_checked."""
    worst, where, checked = 0.0, "none", 0
    for warmup_steps, total_steps, min_lr in SETTINGS_GRID:
        settings = TrainSettings(lr=lr, warmup_steps=warmup_steps, total_steps=total_steps, min_lr=min_lr)
        model = load(runtime, subject_of(subject), device, train=settings)
        try:
            applied = [float(model.learning_rate(step)) for step in range(steps)]
        finally:
            model.close()
        for step, rate in enumerate(applied):
            expected = settings_lr(step, settings)
            difference = abs(rate - expected) / expected
            if difference > worst:
                worst, where = difference, (f"warmup_steps={warmup_steps}, total_steps={total_steps}, min_lr={min_lr}: "
                                            f"step {step} ran at {rate:.6g}, documented {expected:.6g}")
        checked += 1
    return {"lr_max_rel_diff": worst, "worst_schedule": where, "settings_checked": checked,
            "warmup_without_total_checked": sum(1 for w, t, _ in SETTINGS_GRID if w and t is None),
            "steps_checked": steps}
