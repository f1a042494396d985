"""The checks of FALSIFY-FUSED-GRADIENTS-001 and FALSIFY-TIED-HEAD-GATE-001: they hold on the runtime
as it is, and their predictions are false under the planted bugs they declare."""

from __future__ import annotations

import pytest

from falsifier_helpers import observe
from pvlab.falsifiers.mutants import registry

CASES = [("fused-projection-gradients", "FALSIFY-FUSED-GRADIENTS-001", "fused_projection_weights_stacked_without_grad"),
         ("tied-head-gate", "FALSIFY-TIED-HEAD-GATE-001", "tied_checkpoint_conflicting_head_accepted")]


@pytest.mark.parametrize("contract_id, falsifier_id, bug", CASES)
def test_holds_on_the_runtime(contract_id, falsifier_id, bug):
    observations, judgement = observe(contract_id, falsifier_id)
    assert judgement.holds, observations


@pytest.mark.parametrize("contract_id, falsifier_id, bug", CASES)
def test_fails_under_its_planted_bug(contract_id, falsifier_id, bug):
    with registry()[bug]():
        observations, judgement = observe(contract_id, falsifier_id)
    assert not judgement.holds, observations


def test_the_fused_check_sees_the_missing_gradients_and_the_fused_route():
    with registry()["fused_projection_weights_stacked_without_grad"]():
        observations, _ = observe("fused-projection-gradients", "FALSIFY-FUSED-GRADIENTS-001")
    assert observations["missing_gradients"] == 32          # q/k/v weight+bias, gate, up: 8 per layer x 4 layers
    assert observations["fused_calls"] == observations["expected_fused_calls"] == 8


def test_the_tied_check_sees_each_conflicting_head_accepted():
    with registry()["tied_checkpoint_conflicting_head_accepted"]():
        observations, _ = observe("tied-head-gate", "FALSIFY-TIED-HEAD-GATE-001")
    assert observations["conflicting_accepted"] == 3 and observations["tolerated_refused"] == 0
