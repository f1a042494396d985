"""pvlab.falsifiers.sampling_law (FALSIFY-SAMPLING-LAW-001): holds on the runtime, false under
sampling_temperature_multiplies_logits, and blind to a bug of another seam."""

from __future__ import annotations

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers.mutants import registry

CONTRACT, FALSIFIER, BUG = "sampling-law", "FALSIFY-SAMPLING-LAW-001", "sampling_temperature_multiplies_logits"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_a_bug_elsewhere_leaves_it_passing():
    with registry()["nonfinite_loss_step_still_applied"]():
        observations, judgement = observe(CONTRACT, FALSIFIER)
    assert judgement.holds, observations
