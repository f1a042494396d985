"""pvpack.checks.schedule_settings: TrainSettings' schedule under every combination of its fields."""

from __future__ import annotations

import pytest

from pvpack.checks import schedule_settings
from pvpack.protocol import TrainSettings


def test_settings_lr_reads_the_unset_fields_as_documented():
    warmup_only = TrainSettings(lr=1.0, warmup_steps=4)
    assert [schedule_settings.settings_lr(s, warmup_only) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert schedule_settings.settings_lr(0, TrainSettings(lr=2.0)) == 2.0            # no warmup, no decay
    no_floor = TrainSettings(lr=1.0, warmup_steps=0, total_steps=4)                  # min_lr None: the peak
    assert all(schedule_settings.settings_lr(s, no_floor) == 1.0 for s in range(8))
    decay = TrainSettings(lr=1.0, warmup_steps=0, total_steps=4, min_lr=0.0)
    assert schedule_settings.settings_lr(2, decay) == pytest.approx(0.5) and schedule_settings.settings_lr(9, decay) == 0.0


class _Model:
    def __init__(self, settings, rule):
        self.settings, self.rule = settings, rule

    def learning_rate(self, step):
        return self.rule(step, self.settings)

    def close(self):
        pass


def _run(monkeypatch, rule):
    monkeypatch.setattr(schedule_settings, "load", lambda runtime, subject, device, train: _Model(train, rule))
    monkeypatch.setattr(schedule_settings, "subject_of", lambda subject: subject)
    return schedule_settings.lr_schedule_settings(runtime=None, device="cpu", subject="s")


def test_a_runtime_following_the_documented_schedule_passes(monkeypatch):
    seen = _run(monkeypatch, schedule_settings.settings_lr)
    assert seen["lr_max_rel_diff"] == 0 and seen["settings_checked"] == len(schedule_settings.SETTINGS_GRID)
    assert seen["warmup_without_total_checked"] >= 2 and seen["worst_schedule"] == "none"


def test_a_warmup_dropped_without_total_steps_is_named(monkeypatch):
    def rule(step, settings):
        if settings.total_steps is None:
            return settings.lr                                       # the defect: no warmup then
        return schedule_settings.settings_lr(step, settings)

    seen = _run(monkeypatch, rule)
    assert seen["lr_max_rel_diff"] > 1 and "total_steps=None" in seen["worst_schedule"]


def test_a_floor_of_none_read_as_zero_is_named(monkeypatch):
    def rule(step, settings):
        if settings.min_lr is None and settings.total_steps is not None:
            settings = TrainSettings(lr=settings.lr, warmup_steps=settings.warmup_steps,
                                     total_steps=settings.total_steps, min_lr=0.0)   # the defect
        return schedule_settings.settings_lr(step, settings)

    seen = _run(monkeypatch, rule)
    assert seen["lr_max_rel_diff"] > 1e-3 and "min_lr=None" in seen["worst_schedule"]
