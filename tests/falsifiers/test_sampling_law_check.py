"""pvlab.falsifiers.sampling_law (FALSIFY-SAMPLING-LAW-001 and -002): hold on the runtime, false
under their planted bugs (sampling_temperature_multiplies_logits, top_k_threshold_from_kthvalue),
-001 blind to a bug of another seam, -002 false on a sampler that ignores top_k."""

from __future__ import annotations

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers.mutants import registry

CONTRACT, FALSIFIER, BUG = "sampling-law", "FALSIFY-SAMPLING-LAW-001", "sampling_temperature_multiplies_logits"
TOP_K_FALSIFIER, TOP_K_BUG = "FALSIFY-SAMPLING-LAW-002", "top_k_threshold_from_kthvalue"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_a_bug_elsewhere_leaves_it_passing():
    with registry()["nonfinite_loss_step_still_applied"]():
        observations, judgement = observe(CONTRACT, FALSIFIER)
    assert judgement.holds, observations


def test_top_k_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, TOP_K_FALSIFIER, TOP_K_BUG)


def test_top_k_fails_on_a_sampler_that_ignores_top_k(monkeypatch):
    from pvlab.runtime import kernels

    sample_pick = kernels.sample_pick
    monkeypatch.setattr(kernels, "sample_pick",
                        lambda logits, temperature, generator, top_k=None: sample_pick(logits, temperature, generator))
    observations, judgement = observe(CONTRACT, TOP_K_FALSIFIER)
    assert not judgement.holds
    assert observations["outside_top_k"] > 0 and observations["max_tv"] > observations["tv_bound"], observations
