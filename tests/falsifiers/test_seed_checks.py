"""The checks bound to the seed contracts: every falsifier is bound, every check returns the
observations its prediction names and holds on the runtime as it is (on the CPU), CUDA-only
claims skip visibly here, and each check FAILS under a planted bug of the kind it claims to see.
The planted bugs are the registered ones (pvlab.falsifiers.mutants), never inline patches: they
are lifted while the zoo builds a checkpoint, and the check fixtures drop their caches when the
planted bug changes.

These use the cached trained tiny checkpoint (runtime.zoo; built once into .pv-cache/).
"""

from __future__ import annotations

import math

import pytest
import torch

from pv.harness import DeviceUnavailable
from pvlab.falsifiers.mutants import registry

from falsifier_helpers import all_falsifiers, observe

pytestmark = pytest.mark.slow

KERNEL_CONTRACTS = ("rmsnorm-kernel", "rope-kernel", "softmax-kernel", "cross-entropy-kernel",
                    "gqa-attention-kernel", "adamw-kernel", "kv-cache-kernel")
SEED = [(c, f) for c, f in all_falsifiers() if c not in KERNEL_CONTRACTS]
SEED_CPU = [(c, f.id) for c, f in SEED if "cpu" in f.devices]


PLANTED = registry()


def test_every_falsifier_of_every_contract_is_bound():
    unbound = [f.id for _, f in all_falsifiers() if not f.check]
    assert not unbound


def test_cuda_claims_require_cuda():
    by_id = {f.id: f for _, f in all_falsifiers()}
    assert by_id["FALSIFY-CPU-GPU-004"].devices == ["cuda"]
    for falsifier in ("FALSIFY-CUDA-FORWARD-PARITY-001", "FALSIFY-CUDA-FORWARD-PARITY-002",
                      "FALSIFY-CUDA-FORWARD-PARITY-003", "FALSIFY-CPU-GPU-001", "FALSIFY-CPU-GPU-002"):
        assert "cuda" in by_id[falsifier].devices


@pytest.mark.parametrize("contract_id,falsifier_id", SEED_CPU, ids=[f for _, f in SEED_CPU])
def test_seed_falsifier_holds_on_cpu(contract_id, falsifier_id):
    observations, judgement = observe(contract_id, falsifier_id)
    assert set(judgement.observed) == set(judgement.observed) & set(observations)
    # numbers and booleans are judged; text (a backend name) is recorded as it is, like the harness does
    assert all(isinstance(v, (int, float, bool, str)) for v in observations.values()), observations
    assert judgement.holds, judgement.describe()


ALL_CUDA = [(c, f.id) for c, f in all_falsifiers() if "cuda" in f.devices]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")
@pytest.mark.parametrize("contract_id,falsifier_id", ALL_CUDA, ids=[f for _, f in ALL_CUDA])
def test_cuda_checks_raise_device_unavailable_without_a_gpu(contract_id, falsifier_id):
    with pytest.raises(DeviceUnavailable):
        observe(contract_id, falsifier_id, device="cuda")


def _fails(contract_id, falsifier_id, **overrides):
    observations, judgement = observe(contract_id, falsifier_id, **overrides)
    assert not judgement.holds, f"{falsifier_id} survived the planted bug: {judgement.describe()}"
    return observations


# (planted bug, [(contract, falsifier that must FAIL under it)])
CAUGHT = [
    ("final_norm_outputs_zeros", [("apr-cpu-forward-sanity", "FALSIFY-CPU-FORWARD-SANITY-002"),
                                  ("apr-cpu-forward-sanity", "FALSIFY-CPU-FORWARD-SANITY-003")]),
    ("tied_head_replaced_by_random_rows", [("apr-pretrain-cuda-forward-parity", "FALSIFY-CUDA-FORWARD-PARITY-001")]),
    ("populate_drops_optional_tensors", [("apr-cpu-forward-sanity", "FALSIFY-CPU-FORWARD-SANITY-005")]),
    ("fast_path_drops_qkv_bias", [("apr-cpu-vs-gpu-output-parity", "FALSIFY-CPU-GPU-002")]),
    ("greedy_decode_samples", [("apr-cpu-vs-gpu-output-parity", "FALSIFY-CPU-GPU-001")]),
    ("parity_gate_refuses_everything", [("apr-cpu-vs-gpu-output-parity", "FALSIFY-CPU-GPU-003")]),
    ("cross_entropy_mean_over_batch_not_tokens",
     [("apr-pretrain-eval-methodology", "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-001")]),
    ("heldout_split_leaks_into_training",
     [("apr-pretrain-eval-methodology", "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-004")]),
    ("eval_batch_reports_a_rescaled_loss",
     [("apr-pretrain-eval-methodology", "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-005")]),
    ("encoder_read_as_decoder", [("apr-pretrain-init", "FALSIFY-APR-PRETRAIN-INIT-CUDA-003")]),
    ("llama_370m_preset_tied_head", [("gpu-training-backend", "FALSIFY-INV-ARCH-370M-001")]),
    ("rms_norm_returns_nan", [("gpu-training-backend", "FALSIFY-INV-TRAIN-007")]),
    ("grad_norm_reported_after_clipping", [("gpu-training-backend", "FALSIFY-INV-TRAIN-008")]),
    ("grad_norm_per_tensor_not_global", [("gpu-training-backend", "FALSIFY-INV-TRAIN-008")]),
    ("init_weights_unseeded", [("gpu-training-backend", "FALSIFY-INV-TRAIN-003")]),
    ("optimizer_holds_stale_parameters",
     [("apr-pretrain-init-finetune", "FALSIFY-APR-PRETRAIN-INIT-FINETUNE-002")]),
]


@pytest.mark.parametrize("mutant,falsifiers", CAUGHT, ids=[m for m, _ in CAUGHT])
def test_the_planted_bug_is_caught(mutant, falsifiers):
    with PLANTED[mutant]():
        for contract_id, falsifier_id in falsifiers:
            _fails(contract_id, falsifier_id)


# ---- planted bugs whose observations say how they were seen --------------------------------------

# (planted bug, the falsifier it makes fail, the observation that says how it was seen, and what
# that observation is under the bug)
SEEN_AS = [
    ("rms_norm_returns_nan", "apr-cpu-forward-sanity",
     "FALSIFY-CPU-FORWARD-SANITY-001", "nonfinite_logits", lambda value: value > 0),
    ("populate_drops_optional_tensors", "apr-pretrain-cuda-forward-parity",
     "FALSIFY-CUDA-FORWARD-PARITY-002", "qkv_bias_on_device", lambda value: value == 0),
    ("fast_path_drops_qkv_bias", "apr-pretrain-cuda-forward-parity",
     "FALSIFY-CUDA-FORWARD-PARITY-003", "bias_effect_max_abs", lambda value: value == 0),
    ("parity_gate_compares_device_with_itself", "apr-cpu-vs-gpu-output-parity",
     "FALSIFY-CPU-GPU-003", "gate_refused_diverging", lambda value: value == 0),
    ("eval_targets_equal_inputs", "apr-pretrain-eval-methodology",
     "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-003", "eval_mismatched_batches", lambda value: value > 0),
    ("eval_reads_stale_train_buffer", "apr-pretrain-eval-methodology",
     "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-002", "after_vs_recomputed", lambda value: value > 0.5),
    ("init_accepts_unpaired_arguments", "apr-pretrain-init",
     "FALSIFY-APR-PRETRAIN-INIT-CUDA-002", "accepted_cases", lambda value: value >= 2),
    ("finetune_starts_from_random_init", "apr-pretrain-init-finetune",
     "FALSIFY-APR-PRETRAIN-INIT-FINETUNE-001", "first_val_loss", lambda value: value > 0.9 * math.log(512)),
]


@pytest.mark.parametrize("mutant,contract_id,falsifier_id,observation,under_the_bug", SEEN_AS,
                         ids=[row[3] for row in SEEN_AS])
def test_the_observations_say_how_the_bug_was_seen(mutant, contract_id, falsifier_id, observation, under_the_bug):
    with PLANTED[mutant]():
        observations = _fails(contract_id, falsifier_id)
    assert under_the_bug(observations[observation]), (observation, observations[observation])


def test_a_random_head_is_invisible_to_peak_to_mean_on_the_tiny_model():
    # peak_to_mean > 1.5 (the seed threshold, from a real Qwen2 at V = 151936) does NOT see this on
    # the tiny model: a N(0, 0.02) head over unit-RMS hidden states still peaks at ~1.7. The loss
    # bound and the fine-tune's independent load do (CAUGHT above).
    with PLANTED["tied_head_replaced_by_random_rows"]():
        observations, _ = observe("apr-cpu-forward-sanity", "FALSIFY-CPU-FORWARD-SANITY-003")
    assert observations["peak_to_mean"] < 5


# ---- resume (checked, not yet bound by a contract) ------------------------------------------------

def test_checkpoint_resume_round_trip_is_exact():
    from pvlab.falsifiers.training import checkpoint_resume

    observations = checkpoint_resume(device="cpu")
    assert observations["max_param_diff"] == 0 and observations["digest_equal"] == 1
    assert observations["step_after_resume"] == observations["steps_before"]


def test_checkpoint_resume_losing_optimizer_state_is_seen():
    from pvlab.falsifiers.training import checkpoint_resume

    with PLANTED["resume_drops_optimizer_state"]():
        observations = checkpoint_resume(device="cpu")
    assert observations["max_param_diff"] > 0 and observations["digest_equal"] == 0
