"""The training-equivalence checks (accumulation, packing, tied_embeddings, batched_generation,
compiled_training, attention_backends): each falsifier's prediction holds on the runtime as it is
and is false with the runtime broken the way it claims to detect (a registered planted bug)."""

from __future__ import annotations

import pytest

from falsifier_helpers import observe
from pvlab.falsifiers.mutants import registry

# (contract, falsifier, planted bug that must make it false); the compile case is slow (two
# torch.compile runs) and tested below on its own.
CASES = [
    ("gradient-accumulation", "FALSIFY-GRAD-ACCUM-001", "accumulation_averages_micro_batch_means"),
    ("gradient-accumulation", "FALSIFY-GRAD-ACCUM-002", "accumulation_averages_micro_batch_means"),
    ("sequence-packing", "FALSIFY-PACKING-001", "packing_attends_across_documents"),
    ("sequence-packing", "FALSIFY-PACKING-001", "packing_positions_do_not_restart"),
    ("sequence-packing", "FALSIFY-PACKING-002", "packing_attends_across_documents"),
    ("tied-embeddings", "FALSIFY-TIED-EMBEDDINGS-001", "tied_head_untied_on_load"),
    ("tied-embeddings", "FALSIFY-TIED-EMBEDDINGS-002", "untied_head_tied_on_load"),
    ("batched-generation", "FALSIFY-BATCHED-GENERATION-001", "positions_ignore_attention_mask"),
    ("batched-generation", "FALSIFY-BATCHED-GENERATION-002", "positions_ignore_attention_mask"),
    ("attention-backends", "FALSIFY-ATTENTION-BACKENDS-001", "fused_attention_backward_transposed"),
    ("attention-backends", "FALSIFY-ATTENTION-BACKENDS-004", "attention_not_causal"),
]


@pytest.mark.parametrize("contract_id, falsifier_id", sorted({(c, f) for c, f, _ in CASES}))
def test_prediction_holds_on_the_runtime(contract_id, falsifier_id):
    observations, judgement = observe(contract_id, falsifier_id)
    assert judgement.holds, (falsifier_id, observations)


@pytest.mark.parametrize("contract_id, falsifier_id, bug", CASES)
def test_prediction_is_false_under_the_planted_bug(contract_id, falsifier_id, bug):
    with registry()[bug]():
        observations, judgement = observe(contract_id, falsifier_id)
    assert not judgement.holds, (falsifier_id, bug, observations)


def test_position_restart_is_observed_although_rope_hides_it_from_the_logits():
    with registry()["packing_positions_do_not_restart"]():
        observations, _ = observe("sequence-packing", "FALSIFY-PACKING-001")
    assert observations["position_mismatches"] > 0
    assert observations["max_abs_diff"] <= observations["atol"] + observations["rtol"] * observations["max_abs_ref"]


def test_a_backend_the_device_lacks_is_a_skip_not_a_pass():
    from pv.harness import DeviceUnavailable

    from pvlab.falsifiers.attention_backends import backend_gradients_match_math

    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has the CUDA backends")
    with pytest.raises(DeviceUnavailable, match="efficient"):
        backend_gradients_match_math(device="cpu", backend="efficient")


@pytest.mark.slow
def test_compiled_training_holds_and_kills_its_planted_bug():
    observations, judgement = observe("compiled-training", "FALSIFY-COMPILED-TRAINING-001")
    assert judgement.holds, observations
    with registry()["compiled_layer_branch_scaled"]():
        observations, judgement = observe("compiled-training", "FALSIFY-COMPILED-TRAINING-001")
    assert not judgement.holds, observations


def test_a_resume_the_parity_gate_refuses_is_an_observed_failure_not_an_error(monkeypatch):
    # Seen on an H100 under tied_head_uninitialised: Trainer.resume on cuda runs the parity
    # gate, which refused the broken model; the check ERRORed instead of reporting the refusal.
    from pvlab.falsifiers import tied_embeddings
    from pvlab.runtime import errors, trainer

    def refuse(*args, **kwargs):
        raise errors.ParityGateError("parity gate: refusing")

    monkeypatch.setattr(trainer.Trainer, "resume", staticmethod(refuse))
    seen = tied_embeddings.tied_embeddings_stay_tied(device="cpu", steps=1)
    assert seen["resume_refused"] == 1 and seen["one_tensor_after_resume"] == 0
