"""pvlab.falsifiers.master_weights (contract master-weights, FALSIFY-MASTER-WEIGHTS-001..004): each
holds on the runtime, and each planted bug of the contract makes at least one of them false."""

from __future__ import annotations

import pytest

from falsifier_helpers import contract, observe
from pvlab.falsifiers.mutants import registry

CONTRACT = "master-weights"
FALSIFIERS = [f"FALSIFY-MASTER-WEIGHTS-00{i}" for i in range(1, 5)]
BUGS = ["master_bf16_copy_not_refreshed", "master_checkpoint_saves_bf16_rounding", "master_update_ignores_clip",
        "master_update_ignores_skip", "master_bias_correction_off_by_one"]


@pytest.mark.parametrize("falsifier", FALSIFIERS)
def test_holds_on_the_runtime(falsifier):
    observations, judgement = observe(CONTRACT, falsifier)
    assert judgement.holds, (falsifier, observations)


def test_the_update_ran_through_the_reference_implementation_on_the_cpu():
    observations, _ = observe(CONTRACT, "FALSIFY-MASTER-WEIGHTS-001")
    assert observations["reference_updates"] > 0 and observations["triton_updates"] == 0
    assert 0 < observations["max_error_ratio"] <= 1   # the runtime rounds, within the derived bound


@pytest.mark.parametrize("bug", BUGS)
def test_each_planted_bug_is_killed_by_the_falsifiers_declaring_it(bug):
    declaring = [f.id for f in contract(CONTRACT).falsification_tests if bug in (f.mutants or [])]
    assert declaring, f"{bug} is declared by no falsifier"
    for falsifier in declaring:
        with registry()[bug]():
            observations, judgement = observe(CONTRACT, falsifier)
        assert not judgement.holds, (falsifier, bug, observations)
