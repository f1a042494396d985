"""CausalLM.set_fused_projections: Q/K/V and gate/up as one product each on the fast path —
the same function of the same parameters, the same checkpoint, the same gradients."""

from __future__ import annotations

import pytest
import torch

from pvlab import runtime
from pvlab.runtime import kernels
from runtime_helpers import randomise


@pytest.fixture()
def model():
    m = runtime.init_model(config="tiny", weights="random", seed=0, device="cpu", path="fast")
    randomise(m, seed=1)
    return m


def _loss_and_grads(m, ids, targets):
    m.zero_grad(set_to_none=True)
    loss = m.loss(ids, targets)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


def test_fused_projections_compute_the_same_logits_loss_and_gradients(model):
    """bf16 products either way, fp32 accumulation: one stacked GEMM differs from five only by
    the order of the same rounded terms, far inside the fast path's bf16 tolerance."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (2, 24), generator=generator)
    targets = torch.randint(0, model.config.vocab_size, (2, 24), generator=generator)
    with torch.no_grad():
        separate = model(ids)
    loss_separate, grads_separate = _loss_and_grads(model, ids, targets)
    model.set_fused_projections(True)
    with torch.no_grad():
        fused = model(ids)
    loss_fused, grads_fused = _loss_and_grads(model, ids, targets)
    scale = separate.abs().max()
    assert (fused - separate).abs().max() <= 0.02 * scale
    assert loss_fused == pytest.approx(loss_separate.item(), rel=1e-2)
    assert grads_fused.keys() == grads_separate.keys()
    for name, grad in grads_separate.items():  # every projection still gets its own gradient
        assert torch.allclose(grads_fused[name], grad, rtol=0.05, atol=0.05 * grad.abs().max().item() + 1e-6), name


def test_fused_projections_change_no_parameter_name_and_no_saved_tensor(model, tmp_path):
    names = [n for n, _ in model.named_parameters()]
    model.set_fused_projections(True)
    assert [n for n, _ in model.named_parameters()] == names
    runtime.save_checkpoint(model, tmp_path)
    reloaded = runtime.load(tmp_path, device="cpu")
    for (name, a), (_, b) in zip(model.state_dict().items(), reloaded.state_dict().items()):
        assert torch.equal(a, b), name


def test_fused_projections_keep_the_qkv_biases():
    """Qwen2's Q/K/V biases go into the stacked product (the seed bug 'fast path ignores the
    Q/K/V biases' must not come back through fusion)."""
    x = torch.randn(3, 8)
    weights = [torch.randn(4, 8), torch.randn(2, 8), torch.randn(2, 8)]
    biases = [torch.randn(4), torch.randn(2), torch.randn(2)]
    outs = kernels.fused_linear_fast(x, weights, biases)
    for out, w, b in zip(outs, weights, biases):
        assert torch.allclose(out, x @ w.T + b, atol=1e-5)
    no_bias = kernels.fused_linear_fast(x, weights[:2], [None, None])
    assert torch.allclose(no_bias[1], x @ weights[1].T, atol=1e-5)


def test_the_reference_path_never_fuses(model):
    model.set_fused_projections(True).set_path("reference")
    calls = []
    model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda *a: calls.append(1))
    model(torch.zeros(1, 4, dtype=torch.long))
    assert calls == [1]


def test_trainer_refuses_an_unknown_compile_mode(model):
    from pvlab.runtime.errors import ArgumentError

    with pytest.raises(ArgumentError, match="compile_mode"):
        runtime.Trainer(model, compile="model", compile_mode="turbo")
