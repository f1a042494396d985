"""pvlab.falsifiers.fused_gradients (FALSIFY-FUSED-GRADIENTS-001): holds on the runtime, false under
fused_projection_weights_stacked_without_grad, and sees both the missing gradients and the fused route."""

from __future__ import annotations

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers.mutants import registry

CONTRACT, FALSIFIER, BUG = "fused-projection-gradients", "FALSIFY-FUSED-GRADIENTS-001", "fused_projection_weights_stacked_without_grad"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_it_sees_the_missing_gradients_and_the_fused_route():
    with registry()[BUG]():
        observations, _ = observe(CONTRACT, FALSIFIER)
    assert observations["missing_gradients"] == 32          # q/k/v weight+bias, gate, up: 8 per layer x 4 layers
    assert observations["fused_calls"] == observations["expected_fused_calls"] == 8
