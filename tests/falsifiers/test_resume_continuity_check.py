"""pvlab.falsifiers.resume_continuity (FALSIFY-RESUME-CONTINUITY-001): holds on the runtime, false
under resume_forgets_lr_schedule, and reports another resume defect (a step counter restarted)."""

from __future__ import annotations

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers.mutants import registry
from pvlab.falsifiers.resume_continuity import MIN_LR, PEAK, TOTAL, WARMUP, documented_lr

CONTRACT, FALSIFIER, BUG = "resume-continuity", "FALSIFY-RESUME-CONTINUITY-001", "resume_forgets_lr_schedule"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_the_oracle_schedule_is_the_documented_one():
    assert documented_lr(0) == PEAK / WARMUP and documented_lr(WARMUP - 1) == PEAK
    assert abs(documented_lr(WARMUP) - PEAK) < 1e-15
    assert documented_lr(TOTAL) == documented_lr(TOTAL + 5) == MIN_LR
    assert MIN_LR < documented_lr(TOTAL - 1) < documented_lr(WARMUP + 1) < PEAK


def test_it_sees_the_lost_schedule_and_its_consequences():
    with registry()[BUG]():
        observations, _ = observe(CONTRACT, FALSIFIER)
    assert observations["lr_mismatches"] > 0 and observations["loss_mismatches"] > 0
    assert observations["parameter_mismatches"] > 0 and observations["hyperparameter_mismatches"] > 0
    assert observations["step_mismatches"] == 0 and observations["reference_lr_mismatches"] == 0


def test_it_reports_a_resume_that_restarts_the_step_counter(monkeypatch):
    """Another defect: weights, moments and schedule restored, the step counter back at 0 (the
    warmup replayed from its first rate)."""
    from pvlab.runtime.trainer import Trainer

    original = Trainer.resume.__func__

    def restarting(cls, directory, **kwargs):
        resumed = original(cls, directory, **kwargs)
        resumed.step = 0
        return resumed

    monkeypatch.setattr(Trainer, "resume", classmethod(restarting))
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    assert observations["step_mismatches"] > 0 and observations["lr_mismatches"] > 0
    assert observations["hyperparameter_mismatches"] == 0
