"""pvlab.falsifiers.resume_settings: a resume keeps every hyperparameter a run was given when none
is a constructor default; the planted bug and a second defect of its class are reported."""

from __future__ import annotations

from pvlab.falsifiers import resume_settings
from pvlab.falsifiers.mutants import registry


def holds(seen: dict) -> bool:
    """FALSIFY-RESUME-CONTINUITY-002's prediction."""
    return (seen["resumes"] == 4 and seen["steps_after_resume"] == 8 and seen["hyperparameter_mismatches"] == 0
            and seen["loss_mismatches"] == 0 and seen["parameter_mismatches"] == 0
            and seen["optimizer_mismatches"] == 0 and seen["clipped_steps"] == seen["clipping_steps_possible"] == 4)


def test_the_runtime_resumes_with_every_setting():
    seen = resume_settings.resume_keeps_every_setting(device="cpu")
    assert holds(seen), seen


def test_a_grad_clip_left_at_its_default_is_reported():
    with registry()["resume_drops_grad_clip"]():
        seen = resume_settings.resume_keeps_every_setting(device="cpu")
    assert not holds(seen) and seen["loss_mismatches"] > 0 and seen["hyperparameter_mismatches"] > 0


def test_a_weight_decay_left_at_its_default_is_reported(monkeypatch):
    """A second defect of the class: the resumed optimizer decays at the default 0.1 (what
    Trainer(...) builds without weight_decay), whatever the run saved."""
    from pvlab.runtime import trainer

    original = trainer.Trainer.resume.__func__

    def resume(cls, directory, *, device="cpu", path=None):
        resumed = original(cls, directory, device=device, path=path)
        resumed.hyperparameters["weight_decay"] = 0.1
        resumed.optimizer.param_groups[0]["weight_decay"] = 0.1
        return resumed

    monkeypatch.setattr(trainer.Trainer, "resume", classmethod(resume))
    seen = resume_settings.resume_keeps_every_setting(device="cpu")
    assert not holds(seen) and seen["parameter_mismatches"] > 0
