"""The kernel checks measure what their contracts claim: they pass on the runtime as it is, and
each FAILS when the kernel it watches is replaced by a plausibly broken one (a check that cannot
fail is a defect)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from pvlab.runtime import kernels, trainer
from pvlab.runtime.model import KVCache

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


def _fails(contract_id, falsifier_id, **overrides):
    observations, judgement = observe(contract_id, falsifier_id, **overrides)
    assert not judgement.holds, f"{falsifier_id} survived the planted bug: {judgement.describe()}"
    return observations


# ---- rmsnorm -----------------------------------------------------------------------------------

def test_rmsnorm_eps_outside_sqrt_is_caught(monkeypatch):
    def broken(x, weight, eps):
        x32 = x.float()
        return weight * (x32 / (x32.pow(2).mean(-1, keepdim=True).sqrt() + eps)).to(x.dtype)
    monkeypatch.setattr(kernels, "rms_norm", broken)
    _fails("rmsnorm-kernel", "FALSIFY-RMSNORM-003")


def test_rmsnorm_without_weight_is_caught(monkeypatch):
    original = kernels.rms_norm
    monkeypatch.setattr(kernels, "rms_norm", lambda x, w, eps: original(x, torch.ones_like(w), eps))
    _fails("rmsnorm-kernel", "FALSIFY-RMSNORM-001")
    _fails("rmsnorm-kernel", "FALSIFY-RMSNORM-002")


def test_rmsnorm_fp16_statistic_is_caught(monkeypatch):
    def broken(x, weight, eps):  # the statistic in fp16: x^2 = 1e30 overflows to inf
        x16 = x.to(torch.float16)
        return weight * (x16 * torch.rsqrt(x16.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    monkeypatch.setattr(kernels, "rms_norm", broken)
    _fails("rmsnorm-kernel", "FALSIFY-RMSNORM-004")  # 1e15 overflows fp16


# ---- rope --------------------------------------------------------------------------------------

def test_rope_interleaved_pairs_are_caught(monkeypatch):
    def interleaved(x):
        pairs = x.unflatten(-1, (-1, 2))
        return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    monkeypatch.setattr(kernels, "rotate_half", interleaved)
    _fails("rope-kernel", "FALSIFY-ROPE-001")


def test_rope_positions_restarting_after_cache_are_caught(monkeypatch):
    monkeypatch.setattr(kernels, "positions_for", lambda past, n, device: torch.arange(n, device=device))
    _fails("rope-kernel", "FALSIFY-ROPE-003")
    _fails("rope-kernel", "FALSIFY-ROPE-005")


def test_rope_wrong_theta_is_caught(monkeypatch):
    original = kernels.rope_cos_sin
    monkeypatch.setattr(kernels, "rope_cos_sin", lambda theta, d, p: original(theta * 10, d, p))
    _fails("rope-kernel", "FALSIFY-ROPE-001")


def test_rope_non_rotation_is_caught(monkeypatch):
    original = kernels.rope_cos_sin
    monkeypatch.setattr(kernels, "rope_cos_sin", lambda theta, d, p: (original(theta, d, p)[0], original(theta, d, p + 1)[1]))
    _fails("rope-kernel", "FALSIFY-ROPE-004")


# ---- softmax -----------------------------------------------------------------------------------

def test_softmax_without_max_subtraction_is_caught(monkeypatch):
    def naive(scores):
        e = torch.exp(scores)
        return e / e.sum(dim=-1, keepdim=True)
    monkeypatch.setattr(kernels, "softmax_reference", naive)
    observations = _fails("softmax-kernel", "FALSIFY-SOFTMAX-002")
    assert observations["nonfinite"] > 0
    _fails("softmax-kernel", "FALSIFY-SOFTMAX-003")


def test_naive_log_softmax_is_caught(monkeypatch):
    monkeypatch.setattr(kernels, "log_softmax_reference", lambda x: torch.log(torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)))
    _fails("softmax-kernel", "FALSIFY-SOFTMAX-005")


def test_softmax_over_wrong_axis_is_caught(monkeypatch):
    monkeypatch.setattr(kernels, "softmax_reference", lambda s: torch.softmax(s.float(), dim=0).to(s.dtype))
    _fails("softmax-kernel", "FALSIFY-SOFTMAX-001")


# ---- cross-entropy -----------------------------------------------------------------------------

def test_cross_entropy_off_by_one_position_is_caught(monkeypatch):
    original = kernels.cross_entropy_reference

    def shifted(logits, targets):
        rolled = torch.roll(targets, shifts=-1, dims=-1)
        return original(logits, rolled)
    monkeypatch.setattr(kernels, "cross_entropy_reference", shifted)
    _fails("cross-entropy-kernel", "FALSIFY-CROSS-ENTROPY-001")


def test_cross_entropy_counting_padding_is_caught(monkeypatch):
    original = kernels.cross_entropy_reference
    monkeypatch.setattr(kernels, "cross_entropy_reference",
                        lambda logits, targets: original(logits, targets.clamp(min=0)))
    _fails("cross-entropy-kernel", "FALSIFY-CROSS-ENTROPY-001")


def test_chunked_cross_entropy_dropping_last_chunk_is_caught(monkeypatch):
    original = kernels.chunked_linear_cross_entropy

    def drops_tail(hidden, weight, targets, *, chunk_tokens=None, compute_dtype=torch.bfloat16):
        n = targets.numel() // chunk_tokens * chunk_tokens
        flat_h, flat_t = hidden.reshape(-1, hidden.shape[-1])[:n], targets.reshape(-1)[:n]
        return original(flat_h, weight, flat_t, chunk_tokens=chunk_tokens, compute_dtype=compute_dtype)
    monkeypatch.setattr(kernels, "chunked_linear_cross_entropy", drops_tail)
    _fails("cross-entropy-kernel", "FALSIFY-CROSS-ENTROPY-002")


def test_chunked_cross_entropy_gradient_scale_is_caught(monkeypatch):
    class Doubled(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return 2 * g
    original = kernels.chunked_linear_cross_entropy
    monkeypatch.setattr(kernels, "chunked_linear_cross_entropy",
                        lambda h, w, t, **kw: original(Doubled.apply(h), w, t, **kw))
    _fails("cross-entropy-kernel", "FALSIFY-CROSS-ENTROPY-003")
    _fails("cross-entropy-kernel", "FALSIFY-CROSS-ENTROPY-005")


def test_log_of_sum_of_exps_is_caught(monkeypatch):
    def naive(hidden, weight, targets, *, chunk_tokens=None, compute_dtype=torch.bfloat16):
        logits = hidden.reshape(-1, hidden.shape[-1]).to(compute_dtype) @ weight.to(compute_dtype).t()
        flat = targets.reshape(-1)
        keep = flat != kernels.IGNORE_INDEX
        logits = logits.float()[keep]
        lse = torch.log(torch.exp(logits).sum(-1))
        return (lse - logits.gather(1, flat[keep][:, None]).squeeze(1)).mean()
    monkeypatch.setattr(kernels, "chunked_linear_cross_entropy", naive)
    _fails("cross-entropy-kernel", "FALSIFY-CROSS-ENTROPY-006")


# ---- attention ---------------------------------------------------------------------------------

def test_attention_without_causal_mask_is_caught(monkeypatch):
    monkeypatch.setattr(kernels, "attention_fast",
                        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[1] != k.shape[1]))
    observations = _fails("gqa-attention-kernel", "FALSIFY-GQA-ATTENTION-005")
    assert observations["future_influence_max_abs"] > 1e-3
    _fails("gqa-attention-kernel", "FALSIFY-GQA-ATTENTION-001")


def test_attention_top_left_mask_after_cache_is_caught(monkeypatch):
    monkeypatch.setattr(kernels, "attention_fast",
                        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[-2] > 1,
                                                                        enable_gqa=q.shape[1] != k.shape[1]))
    _fails("gqa-attention-kernel", "FALSIFY-GQA-ATTENTION-003")


def test_attention_wrong_head_grouping_is_caught(monkeypatch):
    def interleaved_repeat(x, groups):
        return x.repeat(1, groups, 1, 1)  # head h gets KV head h % KV instead of h // groups
    monkeypatch.setattr(kernels, "repeat_kv", interleaved_repeat)
    _fails("gqa-attention-kernel", "FALSIFY-GQA-ATTENTION-002")


def test_reference_mask_off_by_one_is_caught(monkeypatch):
    def sees_next(query_length, key_length, device):  # every query also sees the following key
        query = torch.arange(query_length, device=device)[:, None] + key_length - query_length
        return torch.arange(key_length, device=device)[None, :] <= query + 1
    monkeypatch.setattr(kernels, "causal_mask", sees_next)
    _fails("gqa-attention-kernel", "FALSIFY-GQA-ATTENTION-007")


# ---- AdamW -------------------------------------------------------------------------------------

def test_coupled_weight_decay_is_caught(monkeypatch):
    def adam_l2(named_parameters, *, lr, weight_decay, betas, path, device):
        decayed = [p for n, p in named_parameters if trainer.decays(n, p)]
        rest = [p for n, p in named_parameters if not trainer.decays(n, p)]
        return torch.optim.Adam([{"params": decayed, "weight_decay": weight_decay},
                                 {"params": rest, "weight_decay": 0.0}], lr=lr, betas=betas, eps=1e-8)
    monkeypatch.setattr(trainer, "build_optimizer", adam_l2)
    for falsifier in ("FALSIFY-ADAMW-001", "FALSIFY-ADAMW-002", "FALSIFY-ADAMW-003", "FALSIFY-ADAMW-004"):
        _fails("adamw-kernel", falsifier)


def test_decay_on_biases_and_norms_is_caught(monkeypatch):
    monkeypatch.setattr(trainer, "decays", lambda name, p: True)
    _fails("adamw-kernel", "FALSIFY-ADAMW-001")
    _fails("adamw-kernel", "FALSIFY-ADAMW-003")


# ---- KV cache ----------------------------------------------------------------------------------

def test_cache_positions_from_zero_are_caught(monkeypatch):
    monkeypatch.setattr(kernels, "positions_for", lambda past, n, device: torch.arange(n, device=device))
    _fails("kv-cache-kernel", "FALSIFY-KV-CACHE-001")
    _fails("kv-cache-kernel", "FALSIFY-KV-CACHE-003")


def test_cache_dropping_its_first_entry_is_caught(monkeypatch):
    original = KVCache.update

    def forgetful(self, layer_index, k, v):
        k_all, v_all = original(self, layer_index, k, v)
        if k_all.shape[-2] > 8:  # an eviction bug: the oldest position falls out
            self.keys[layer_index], self.values[layer_index] = k_all[..., 1:, :], v_all[..., 1:, :]
        return self.keys[layer_index], self.values[layer_index]
    monkeypatch.setattr(KVCache, "update", forgetful)
    _fails("kv-cache-kernel", "FALSIFY-KV-CACHE-001")
    _fails("kv-cache-kernel", "FALSIFY-KV-CACHE-004")


def test_cache_mask_aligned_to_the_start_is_caught(monkeypatch):
    def top_left(query_length, key_length, device):  # forgets the offset of the cached positions
        return torch.arange(key_length, device=device)[None, :] <= torch.arange(query_length, device=device)[:, None]
    monkeypatch.setattr(kernels, "causal_mask", top_left)
    _fails("kv-cache-kernel", "FALSIFY-KV-CACHE-002")
