"""pvlab.falsifiers.tied_checkpoint (FALSIFY-TIED-HEAD-GATE-001): holds on the runtime, false under
tied_checkpoint_conflicting_head_accepted, and counts each conflicting head accepted."""

from __future__ import annotations

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers.mutants import registry

CONTRACT, FALSIFIER, BUG = "tied-head-gate", "FALSIFY-TIED-HEAD-GATE-001", "tied_checkpoint_conflicting_head_accepted"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_it_sees_each_conflicting_head_accepted():
    with registry()[BUG]():
        observations, _ = observe(CONTRACT, FALSIFIER)
    assert observations["conflicting_accepted"] == 3 and observations["tolerated_refused"] == 0
