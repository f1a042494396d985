"""The checks written against two survivors of the third blind batch: a non-finite step that is
counted but applied (nonfinite_steps) and a temperature that multiplies the logits
(sampling_law). Each falsifier holds on the runtime as it is (CPU) and FAILS with its planted bug
in effect."""

from __future__ import annotations

import pytest

from falsifier_helpers import observe
from pvlab.falsifiers import fixtures
from pvlab.falsifiers.mutants import registry

CASES = [("nonfinite-steps", "FALSIFY-NONFINITE-STEP-001", "nonfinite_loss_step_still_applied"),
         ("sampling-law", "FALSIFY-SAMPLING-LAW-001", "sampling_temperature_multiplies_logits")]


@pytest.fixture(autouse=True)
def _fresh_fixtures():
    fixtures.clear()
    yield
    fixtures.clear()


@pytest.mark.parametrize("contract_id,falsifier_id,bug", CASES)
def test_holds_on_the_runtime(contract_id, falsifier_id, bug):
    observations, judgement = observe(contract_id, falsifier_id)
    assert judgement.holds, (falsifier_id, observations)


@pytest.mark.parametrize("contract_id,falsifier_id,bug", CASES)
def test_fails_with_the_planted_bug(contract_id, falsifier_id, bug):
    with registry()[bug]():
        observations, judgement = observe(contract_id, falsifier_id)
    assert not judgement.holds, (falsifier_id, observations)


def test_each_path_shows_the_applied_step():
    """Reference path: the NaN update reaches every parameter; fast path (fused AdamW): the
    update is dropped but the step counter advances."""
    with registry()["nonfinite_loss_step_still_applied"]():
        observations, _ = observe("nonfinite-steps", "FALSIFY-NONFINITE-STEP-001")
    assert observations["reference_params_changed"] > 0 and observations["reference_step_advanced"] == 1
    assert observations["fast_fused"] == 1 and observations["fast_step_advanced"] == 1


def test_each_bug_leaves_the_other_check_passing():
    for contract_id, falsifier_id, _ in CASES:
        other = [b for _, f, b in CASES if f != falsifier_id][0]
        with registry()[other]():
            observations, judgement = observe(contract_id, falsifier_id)
        assert judgement.holds, (falsifier_id, other, observations)
