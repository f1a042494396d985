"""pvlab.falsifiers.nonfinite_steps (FALSIFY-NONFINITE-STEP-001): holds on the runtime, false under
nonfinite_loss_step_still_applied, and shows what the bug does on each path."""

from __future__ import annotations

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers.mutants import registry

CONTRACT, FALSIFIER, BUG = "nonfinite-steps", "FALSIFY-NONFINITE-STEP-001", "nonfinite_loss_step_still_applied"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_each_path_shows_the_applied_step():
    """Reference path: the NaN update reaches every parameter; fast path (fused AdamW): the
    update is dropped but the step counter advances."""
    with registry()[BUG]():
        observations, _ = observe(CONTRACT, FALSIFIER)
    assert observations["reference_params_changed"] > 0 and observations["reference_step_advanced"] == 1
    assert observations["fast_fused"] == 1 and observations["fast_step_advanced"] == 1
