"""The kernel checks measure what their contracts claim: they pass on the runtime as it is, and
each FAILS when the kernel it watches is replaced by a plausibly broken one (a check that cannot
fail is a defect). The broken kernels are the registered planted bugs (pvlab.falsifiers.mutants),
never inline patches."""

from __future__ import annotations

import pytest

from pvlab.falsifiers.mutants import registry

from falsifier_helpers import all_falsifiers, observe

KERNEL_CONTRACTS = ("rmsnorm-kernel", "rope-kernel", "softmax-kernel", "cross-entropy-kernel",
                    "gqa-attention-kernel", "adamw-kernel", "kv-cache-kernel")
KERNEL_FALSIFIERS = [(c, f.id) for c, f in all_falsifiers() if c in KERNEL_CONTRACTS]


def test_every_kernel_contract_has_falsifiers():
    found = {c for c, _ in KERNEL_FALSIFIERS}
    assert found == set(KERNEL_CONTRACTS)
    for c in KERNEL_CONTRACTS:
        assert 3 <= sum(1 for cc, _ in KERNEL_FALSIFIERS if cc == c) <= 7


@pytest.mark.parametrize("contract_id,falsifier_id", KERNEL_FALSIFIERS, ids=[f for _, f in KERNEL_FALSIFIERS])
def test_kernel_falsifier_holds_on_cpu(contract_id, falsifier_id):
    observations, judgement = observe(contract_id, falsifier_id)
    assert set(judgement.observed) <= set(observations)
    assert all(isinstance(v, (int, float, bool)) for v in observations.values()), observations
    assert judgement.holds, judgement.describe()


PLANTED = registry()


def _fails(contract_id, falsifier_id, **overrides):
    observations, judgement = observe(contract_id, falsifier_id, **overrides)
    assert not judgement.holds, f"{falsifier_id} survived the planted bug: {judgement.describe()}"
    return observations


# (planted bug, contract, falsifiers that must FAIL under it)
CAUGHT = [
    ("rms_norm_eps_outside_sqrt", "rmsnorm-kernel", ["FALSIFY-RMSNORM-003"]),
    ("rms_norm_ignores_weight", "rmsnorm-kernel", ["FALSIFY-RMSNORM-001", "FALSIFY-RMSNORM-002"]),
    ("rms_norm_statistic_in_fp16", "rmsnorm-kernel", ["FALSIFY-RMSNORM-004"]),  # 1e15 overflows fp16
    ("rope_interleaved_pairs", "rope-kernel", ["FALSIFY-ROPE-001"]),
    ("cache_positions_restart_at_zero", "rope-kernel", ["FALSIFY-ROPE-003", "FALSIFY-ROPE-005"]),
    ("rope_wrong_theta", "rope-kernel", ["FALSIFY-ROPE-001"]),
    ("rope_sin_one_position_ahead", "rope-kernel", ["FALSIFY-ROPE-004"]),
    ("softmax_without_max_subtraction", "softmax-kernel",
     ["FALSIFY-SOFTMAX-002", "FALSIFY-SOFTMAX-003", "FALSIFY-SOFTMAX-005"]),
    ("softmax_normalises_wrong_axis", "softmax-kernel", ["FALSIFY-SOFTMAX-001"]),
    ("cross_entropy_off_by_one", "cross-entropy-kernel", ["FALSIFY-CROSS-ENTROPY-001"]),
    ("cross_entropy_counts_padding", "cross-entropy-kernel", ["FALSIFY-CROSS-ENTROPY-001"]),
    ("chunked_cross_entropy_drops_last_chunk", "cross-entropy-kernel", ["FALSIFY-CROSS-ENTROPY-002"]),
    ("chunked_cross_entropy_gradient_doubled", "cross-entropy-kernel",
     ["FALSIFY-CROSS-ENTROPY-003", "FALSIFY-CROSS-ENTROPY-005"]),
    ("chunked_cross_entropy_without_max_subtraction", "cross-entropy-kernel", ["FALSIFY-CROSS-ENTROPY-006"]),
    ("attention_not_causal", "gqa-attention-kernel", ["FALSIFY-GQA-ATTENTION-005", "FALSIFY-GQA-ATTENTION-001"]),
    ("attention_mask_ignores_cache_offset", "gqa-attention-kernel", ["FALSIFY-GQA-ATTENTION-003"]),
    ("gqa_kv_heads_tiled", "gqa-attention-kernel", ["FALSIFY-GQA-ATTENTION-002"]),
    ("causal_mask_sees_next_key", "gqa-attention-kernel", ["FALSIFY-GQA-ATTENTION-007"]),
    ("adamw_coupled_weight_decay", "adamw-kernel",
     ["FALSIFY-ADAMW-001", "FALSIFY-ADAMW-002", "FALSIFY-ADAMW-003", "FALSIFY-ADAMW-004"]),
    ("adamw_decays_norms_and_biases", "adamw-kernel", ["FALSIFY-ADAMW-001", "FALSIFY-ADAMW-003"]),
    ("cache_positions_restart_at_zero", "kv-cache-kernel", ["FALSIFY-KV-CACHE-001", "FALSIFY-KV-CACHE-003"]),
    ("kv_cache_evicts_oldest_entry", "kv-cache-kernel", ["FALSIFY-KV-CACHE-001", "FALSIFY-KV-CACHE-004"]),
    ("attention_mask_ignores_cache_offset", "kv-cache-kernel", ["FALSIFY-KV-CACHE-002"]),
]


@pytest.mark.parametrize("mutant,contract_id,falsifiers", CAUGHT,
                         ids=[f"{m}-{c}" for m, c, _ in CAUGHT])
def test_the_planted_bug_is_caught(mutant, contract_id, falsifiers):
    with PLANTED[mutant]():
        for falsifier_id in falsifiers:
            _fails(contract_id, falsifier_id)


def test_unsubtracted_softmax_shows_as_non_finite_values():
    with PLANTED["softmax_without_max_subtraction"]():
        assert _fails("softmax-kernel", "FALSIFY-SOFTMAX-002")["nonfinite"] > 0


def test_a_missing_causal_mask_shows_as_influence_of_the_future():
    with PLANTED["attention_not_causal"]():
        assert _fails("gqa-attention-kernel", "FALSIFY-GQA-ATTENTION-005")["future_influence_max_abs"] > 1e-3
