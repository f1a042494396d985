"""pvpack.checks.accumulation_steps: three steps in micro-batches, with clipping and a schedule on,
against the same steps over whole batches, on pvlab's runtime and on transformers (tiny-trained,
CPU); the two planted defects (a clip inside the accumulation loop, a schedule advanced per
micro-batch) and pvlab's twin of the second are reported."""

from __future__ import annotations

import pytest

from pvlab.falsifiers.mutants import registry
from pvpack.checks import accumulation_steps

REFERENCE = dict(device="cpu", subject="tiny-trained", path="reference", micro_batches=3, steps=3, rows=7,
                 min_len=3, max_len=40, lr=1e-2, warmup_steps=2, total_steps=6, grad_clip=1e-2, seed=0)


def holds(seen: dict) -> bool:
    """FALSIFY-GRAD-ACCUM-PACK-003 (and -004 with its own bounds)."""
    return (seen["worst_grad_ratio"] <= seen["rtol"] and seen["worst_loss_ratio"] <= seen["rtol"]
            and seen["clipped_steps"] == seen["steps"] == 3 and seen["grad_nonfinite"] == 0
            and seen["grad_names_differ"] == 0 and seen["min_micro_tokens"] < seen["max_micro_tokens"])


@pytest.mark.parametrize("runtime", ["pvlab", "transformers"])
def test_an_accumulated_run_is_the_whole_batch_run(runtime):
    seen = accumulation_steps.accumulated_run_matches_full_batch_run(runtime=runtime, **REFERENCE)
    assert holds(seen), seen


@pytest.mark.parametrize("runtime, bug", [("pvlab", "clip_inside_accumulation_loop"),
                                          ("transformers", "hf_schedule_advances_per_micro_batch")])
def test_the_planted_defects_are_reported(runtime, bug):
    with registry()[bug]():
        seen = accumulation_steps.accumulated_run_matches_full_batch_run(runtime=runtime, **REFERENCE)
    assert not holds(seen) and seen["worst_grad_ratio"] > 100 * seen["rtol"], seen


def test_pvlabs_schedule_advanced_per_micro_batch_is_reported(monkeypatch):
    """The second defect of the class, in pvlab's Trainer: the step counter (which the schedule
    reads) advanced once per micro-batch. The first step is right; later ones run at the wrong rate."""
    from pvlab.runtime import trainer

    original = trainer.Trainer.train_step

    def train_step(self, micro_batches):
        loss = original(self, micro_batches)
        self.step += len(micro_batches) - 1
        return loss

    monkeypatch.setattr(trainer.Trainer, "train_step", train_step)
    seen = accumulation_steps.accumulated_run_matches_full_batch_run(runtime="pvlab", **REFERENCE)
    assert seen["grad_ratio_step_1"] <= seen["rtol"] < seen["grad_ratio_last"], seen
