"""pvlab/falsifiers/captured_step.py on the CPU: the check of contract captured-training-step,
with the one CUDA-only call (step_graph.capture) replaced by what a replay does with the
captured kernels (re-running the recorded step). Its contract runs it on cuda only; these say
that the check passes a correct GraphedTrainer and fails the planted bugs a CPU can show."""

from __future__ import annotations

from unittest import mock

import pytest

from pvlab.falsifiers import captured_step, mutants as planted
from pvlab.runtime import step_graph

TOLERANCE = {"bfloat16": {"rtol": 1.0e-2, "atol": 0.0}}


def judged(mutant: str | None = None) -> dict:
    with mock.patch.object(step_graph, "capture", lambda step, stream, pool: step), \
            mock.patch.object(step_graph, "graphs_available", lambda device: True):
        if mutant is None:
            return captured_step.captured_step_matches_plain(device="cpu", tolerance=TOLERANCE)
        with planted.registry()[mutant].factory():
            return captured_step.captured_step_matches_plain(device="cpu", tolerance=TOLERANCE)


def holds(r: dict) -> bool:
    """The contract's prediction, written out."""
    return (r["trajectory_rel_diff"] <= r["rtol"] and r["eval_max_rel_diff"] <= r["rtol"]
            and r["replayed_steps"] == 5 and r["plain_steps"] == 3 and r["replayed_evals"] == 14
            and r["steps"] == 8)


def test_a_correct_graphed_trainer_passes():
    r = judged()
    assert holds(r), r
    assert r["trajectory_rel_diff"] < 1e-6 and r["lr_max_rel_diff"] == 0.0


@pytest.mark.parametrize("mutant, observation", [("graph_replays_the_captured_batch", "trajectory_rel_diff"),
                                                 ("graph_eval_scores_the_captured_batch", "eval_max_rel_diff")])
def test_the_planted_bugs_a_cpu_can_show_fail_it(mutant, observation):
    r = judged(mutant)
    assert not holds(r) and r[observation] > 3 * r["rtol"], r


def test_a_trainer_that_never_replays_fails_it():
    with mock.patch.object(step_graph.GraphedTrainer, "_route", lambda self, graph, batch, plain: "plain"):
        r = judged()
    assert r["replayed_steps"] == 0 and not holds(r)
