"""pvlab.falsifiers.reported_results (FALSIFY-REPORTED-RESULTS-001): holds on the runtime, false
under final_eval_skipped_off_cadence, and reports another defect of what a run records: the final
evaluation run before the last optimizer step (the right step label, the previous model's losses)."""

from __future__ import annotations

import importlib
import time

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers.mutants import registry

CONTRACT, FALSIFIER, BUG = "reported-results", "FALSIFY-REPORTED-RESULTS-001", "final_eval_skipped_off_cadence"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_it_sees_the_off_cadence_final_step_unevaluated():
    with registry()[BUG]():
        observations, _ = observe(CONTRACT, FALSIFIER)
    # 5 at 2, 3 at 7 and 7 at 3 end off the cadence: each reports an earlier step's losses
    assert observations["final_step_mismatches"] == observations["schedule_wrong"] == 3
    assert observations["worst_rel_diff"] > 1e-3
    assert observations["tokens_wrong"] == observations["parameters_wrong"] == 0


def test_it_sees_the_final_eval_taken_before_the_last_step(monkeypatch):
    """A second defect of the class: the loop evaluates step s before training it, so every
    eval, the final one included, scores the model one step short; the step labels and counts
    are all right, only the losses betray it (on and off the cadence alike)."""
    pretrain = importlib.import_module("pvlab.runtime.pretrain")

    def train_steps(trainer, batches, recipe, bar, evaluate):
        evaluate(0)
        seconds = 0.0
        for step in range(1, recipe.steps + 1):
            if step % recipe.eval_every == 0 or step == recipe.steps:
                evaluate(step)   # the defect: before the step it is labelled with
            tick = time.monotonic()
            bar.update(step, trainer.train_batch(next(batches)))
            seconds += time.monotonic() - tick
        return seconds

    monkeypatch.setattr(pretrain, "train_steps", train_steps)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    assert observations["worst_rel_diff"] > 1e-3
    assert observations["final_step_mismatches"] == observations["schedule_wrong"] == 0
    assert observations["tokens_wrong"] == observations["returned_differs"] == 0
