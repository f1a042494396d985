"""The fast path (bf16 autocast, SDPA, chunked linear+CE, fused AdamW) against the fp32
reference path: the same weights must give the same answers within bf16 tolerances, and the
fp32-compute variants of the fast kernels must agree with the reference almost exactly."""

from __future__ import annotations

import math

import pytest
import torch
from runtime_helpers import randomise, tiny_config

from pvlab import runtime
from pvlab.runtime import kernels
from pvlab.runtime.data import LMBatch
from pvlab.runtime.kernels import IGNORE_INDEX


def random_qkv(batch=2, heads=4, kv_heads=2, query_length=9, key_length=9, head_dim=16, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, query_length, head_dim, generator=generator)
    k = torch.randn(batch, kv_heads, key_length, head_dim, generator=generator)
    v = torch.randn(batch, kv_heads, key_length, head_dim, generator=generator)
    return q, k, v


@pytest.mark.parametrize("query_length,key_length", [(9, 9), (1, 9), (4, 9), (1, 1)])
def test_sdpa_attention_equals_explicit_attention_in_fp32(query_length, key_length):
    q, k, v = random_qkv(query_length=query_length, key_length=key_length)
    fast = kernels.attention_fast(q, k, v)
    reference = kernels.attention_reference(q, k, v)
    assert fast.shape == reference.shape == (2, 4, query_length, 16)
    assert (fast - reference).abs().max().item() < 1e-5


def test_attention_is_causal():
    q, k, v = random_qkv()
    full = kernels.attention_reference(q, k, v)
    changed_future = v.clone()
    changed_future[:, :, 5:] += 10.0
    partial = kernels.attention_reference(q, k, changed_future)
    assert torch.equal(full[:, :, :5], partial[:, :, :5])
    assert not torch.allclose(full[:, :, 5:], partial[:, :, 5:])


def test_reference_softmax_survives_huge_scores():
    scores = torch.tensor([[1000.0, 999.0, -1000.0]])
    probabilities = kernels.softmax_reference(scores)
    assert torch.isfinite(probabilities).all()
    assert torch.allclose(probabilities, torch.softmax(scores, dim=-1))


def test_reference_cross_entropy_equals_torch_and_ignores_padding():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 50, generator=generator) * 4
    targets = torch.randint(0, 50, (3, 5), generator=generator)
    targets[1, 3:] = IGNORE_INDEX
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 50), targets.reshape(-1), ignore_index=IGNORE_INDEX)
    assert abs(kernels.cross_entropy_reference(logits, targets).item() - expected.item()) < 1e-5


@pytest.mark.parametrize("chunk_tokens", [1, 7, 64])
def test_chunked_linear_cross_entropy_matches_full_logits_loss_and_gradients(chunk_tokens):
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 11, 32, generator=generator, requires_grad=True)
    weight = (torch.randn(97, 32, generator=generator) / 4).requires_grad_()
    targets = torch.randint(0, 97, (3, 11), generator=generator)
    targets[2, 6:] = IGNORE_INDEX

    reference = kernels.cross_entropy_reference(hidden @ weight.t(), targets)
    reference.backward()
    reference_grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None

    chunked = kernels.chunked_linear_cross_entropy(hidden, weight, targets, chunk_tokens=chunk_tokens,
                                                   compute_dtype=torch.float32)
    chunked.backward()
    assert abs(chunked.item() - reference.item()) < 1e-5
    assert (hidden.grad - reference_grads[0]).abs().max().item() < 1e-5
    assert (weight.grad - reference_grads[1]).abs().max().item() < 1e-5


def test_chunked_cross_entropy_in_bf16_is_within_bf16_tolerance():
    generator = torch.Generator().manual_seed(1)
    hidden = torch.randn(4, 16, 64, generator=generator)
    weight = torch.randn(300, 64, generator=generator) / 8
    targets = torch.randint(0, 300, (4, 16), generator=generator)
    reference = kernels.cross_entropy_reference(hidden @ weight.t(), targets).item()
    bf16 = kernels.chunked_linear_cross_entropy(hidden, weight, targets, chunk_tokens=10).item()
    assert abs(bf16 - reference) < 0.02 * reference


@pytest.fixture
def tiny_pair():
    """The same random weights on both paths (weights scaled up so logits are O(1))."""
    model = runtime.init_model(config=tiny_config(vocab_size=300), weights="random", seed=0)
    randomise(model, seed=5)
    ids = torch.randint(0, 300, (2, 40), generator=torch.Generator().manual_seed(2))
    return model, ids


def test_fast_path_logits_are_within_bf16_tolerance_of_reference(tiny_pair):
    model, ids = tiny_pair
    with torch.no_grad():
        reference = model.set_path("reference")(ids)
        fast = model.set_path("fast")(ids)
    report = runtime.parity.compare_logits(reference, fast, device="cpu", path="fast")
    assert report.min_cosine > 0.999
    assert (fast - reference).abs().max().item() < 0.05 * reference.abs().max().item()
    assert report.argmax_agreement > 0.9


def test_fast_path_loss_and_gradients_are_within_bf16_tolerance_of_reference(tiny_pair):
    model, ids = tiny_pair
    batch = LMBatch.from_sequences(ids)
    losses, grads = {}, {}
    for path in ("reference", "fast"):
        model.set_path(path).zero_grad()
        loss = model.loss(batch.inputs, batch.targets)
        loss.backward()
        losses[path] = loss.item()
        grads[path] = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert abs(losses["fast"] - losses["reference"]) < 0.01 * losses["reference"]
    cosine = torch.nn.functional.cosine_similarity(grads["fast"], grads["reference"], dim=0).item()
    assert cosine > 0.99


def test_fast_path_is_a_different_implementation(tiny_pair, monkeypatch):
    """Breaking a reference-only kernel must not affect the fast path, and vice versa."""
    model, ids = tiny_pair
    with torch.no_grad():
        fast_before = model.set_path("fast")(ids)
        monkeypatch.setattr(kernels, "attention_reference", lambda q, k, v: torch.zeros_like(q))
        assert torch.equal(model(ids), fast_before)
        monkeypatch.setattr(kernels, "attention_fast", lambda q, k, v: torch.zeros_like(q))
        assert not torch.equal(model(ids), fast_before)


def test_fast_trainer_uses_fused_adamw_and_reference_the_for_loop():
    model = runtime.init_model(config="tiny", weights="random", seed=0)
    fast = runtime.Trainer(model, path="fast")
    assert fast.optimizer.defaults["fused"] is True
    reference = runtime.Trainer(model, path="reference")
    assert not reference.optimizer.defaults["fused"] and reference.optimizer.defaults["foreach"] is False


def test_fast_path_trains_like_the_reference_path():
    ids = torch.randint(0, 512, (8, 33), generator=torch.Generator().manual_seed(0))
    batch = LMBatch.from_sequences(ids)
    final = {}
    for path in ("reference", "fast"):
        model = runtime.init_model(config="tiny", weights="random", seed=0)
        trainer = runtime.Trainer(model, lr=1e-2, path=path)
        for _ in range(5):
            loss = trainer.train_batch(batch)
        final[path] = loss
    assert final["reference"] < math.log(512) - 0.2
    assert abs(final["fast"] - final["reference"]) < 0.05 * final["reference"]


def test_rope_rotation_preserves_norms_and_depends_on_position():
    x = torch.randn(1, 2, 6, 16)
    cos, sin = kernels.rope_cos_sin(10000.0, 16, torch.arange(6))
    rotated = kernels.apply_rope(x, cos, sin)
    assert torch.allclose(rotated.norm(dim=-1), x.norm(dim=-1), atol=1e-5)
    assert torch.equal(rotated[:, :, 0], x[:, :, 0])  # position 0: identity
    assert not torch.allclose(rotated[:, :, 1:], x[:, :, 1:])
