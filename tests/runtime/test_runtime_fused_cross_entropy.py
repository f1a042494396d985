"""The fast path's fused linear + cross-entropy (kernels.chunked_linear_cross_entropy: gradients
computed in the forward, one chunk of rows at a time) against the float64 textbook definition
written here: mean over non-ignored positions of logsumexp(z) - z[target], z = h W^T, with
gradients from float64 autograd of that expression."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pvlab.runtime import kernels

IGNORE_INDEX = -100


def textbook_loss(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    z = hidden.reshape(-1, hidden.shape[-1]) @ weight.t()                   # (N, V), float64
    flat = targets.reshape(-1)
    keep = flat != IGNORE_INDEX
    if not keep.any():
        return z.sum() * 0.0
    z, flat = z[keep], flat[keep]
    return (torch.logsumexp(z, dim=-1) - z.gather(1, flat[:, None]).squeeze(1)).mean()


def problem(seed: int, *, batch=3, seq=11, hidden=32, vocab=97, padded=5):
    generator = torch.Generator().manual_seed(seed)
    h = torch.randn(batch, seq, hidden, generator=generator)
    w = torch.randn(vocab, hidden, generator=generator) * (3.0 / hidden ** 0.5)   # logits of std ~3
    targets = torch.randint(0, vocab, (batch, seq), generator=generator)
    targets[1, seq - padded:] = IGNORE_INDEX                                  # padding mid-stream
    return h, w, targets


def fused_with_gradients(h, w, targets, **kwargs):
    h, w = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
    loss = kernels.chunked_linear_cross_entropy(h, w, targets, **kwargs)
    loss.backward()
    return loss.detach(), h.grad, w.grad


def textbook_with_gradients(h, w, targets):
    h, w = h.double().requires_grad_(True), w.double().requires_grad_(True)
    loss = textbook_loss(h, w, targets)
    loss.backward()
    return loss.detach(), h.grad, w.grad


def assert_close(actual, expected, rtol):
    """max |actual - expected| <= rtol * max |expected| (+ a floor for an all-zero expectation)."""
    error = (actual.double() - expected).abs().max().item()
    assert error <= rtol * expected.abs().max().item() + 1e-12, (error, expected.abs().max().item())


@pytest.mark.parametrize("chunk_tokens", [1, 4, 7, 33, 1000])
def test_float32_loss_and_both_gradients_equal_the_float64_definition(chunk_tokens):
    h, w, targets = problem(0)
    loss, grad_h, grad_w = fused_with_gradients(h, w, targets, chunk_tokens=chunk_tokens, compute_dtype=torch.float32)
    ref_loss, ref_h, ref_w = textbook_with_gradients(h, w, targets)
    assert abs(loss.item() - ref_loss.item()) <= 1e-5 * abs(ref_loss.item())
    assert_close(grad_h, ref_h, 1e-5)
    assert_close(grad_w, ref_w, 1e-5)
    padded = (targets.reshape(-1) == IGNORE_INDEX)
    assert grad_h.reshape(-1, h.shape[-1])[padded].abs().max().item() == 0.0


def test_float64_operands_are_exact_to_float64_rounding():
    h, w, targets = problem(1)
    loss, grad_h, grad_w = fused_with_gradients(h.double(), w.double(), targets, chunk_tokens=5,
                                                compute_dtype=torch.float64)
    ref_loss, ref_h, ref_w = textbook_with_gradients(h, w, targets)
    assert grad_h.dtype == grad_w.dtype == torch.float64
    assert abs(loss.item() - ref_loss.item()) <= 1e-12
    assert_close(grad_h, ref_h, 1e-12)
    assert_close(grad_w, ref_w, 1e-12)


def test_bfloat16_matmuls_stay_within_the_contracts_bf16_bound():
    # cross-entropy-kernel-v1 FALSIFY-CROSS-ENTROPY-005 measured the bound: rtol 6e-2 of max |gradient|.
    h, w, targets = problem(2)
    loss, grad_h, grad_w = fused_with_gradients(h, w, targets, chunk_tokens=7, compute_dtype=torch.bfloat16)
    ref_loss, ref_h, ref_w = textbook_with_gradients(h, w, targets)
    assert grad_h.dtype == grad_w.dtype == torch.float32   # gradients come back in the parameters' dtype
    assert abs(loss.item() - ref_loss.item()) <= 1.6e-2 * abs(ref_loss.item())
    assert_close(grad_h, ref_h, 6e-2)
    assert_close(grad_w, ref_w, 6e-2)


def test_under_bf16_autocast_with_bf16_hidden_states():
    # What the fast path hands the loss on a GPU: bf16 activations, fp32 master weights, autocast on.
    h, w, targets = problem(3)
    h_bf16 = h.bfloat16().requires_grad_(True)
    w32 = w.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = kernels.chunked_linear_cross_entropy(h_bf16, w32, targets, chunk_tokens=6)
    loss.backward()
    assert loss.dtype == torch.float32 and h_bf16.grad.dtype == torch.bfloat16 and w32.grad.dtype == torch.float32
    ref_loss, ref_h, ref_w = textbook_with_gradients(h_bf16.detach().float(), w, targets)
    assert abs(loss.item() - ref_loss.item()) <= 1.6e-2 * abs(ref_loss.item())
    assert_close(h_bf16.grad, ref_h, 6e-2)
    assert_close(w32.grad, ref_w, 6e-2)


def test_tied_head_gradient_adds_to_the_embedding_gradient():
    # One Parameter used twice, as a tied checkpoint does: embedding lookup, then output head.
    generator = torch.Generator().manual_seed(4)
    vocab, width = 53, 16
    table = torch.randn(vocab, width, generator=generator)
    ids = torch.randint(0, vocab, (2, 9), generator=generator)
    targets = torch.randint(0, vocab, (2, 9), generator=generator)
    targets[0, :3] = IGNORE_INDEX
    mixer = torch.randn(width, width, generator=generator) / width ** 0.5

    tied = table.clone().requires_grad_(True)
    hidden = torch.tanh(tied[ids] @ mixer)
    kernels.chunked_linear_cross_entropy(hidden, tied, targets, chunk_tokens=5, compute_dtype=torch.float32).backward()

    reference = table.double().requires_grad_(True)
    textbook_loss(torch.tanh(reference[ids] @ mixer.double()), reference, targets).backward()
    assert_close(tied.grad, reference.grad, 1e-5)
    # Both uses contribute: the head alone would leave the looked-up rows' embedding part out.
    head_only = table.double().requires_grad_(True)
    textbook_loss(torch.tanh(table.double()[ids] @ mixer.double()), head_only, targets).backward()
    assert (tied.grad.double() - head_only.grad).abs().max().item() > 1e-3


def test_no_valid_target_gives_zero_loss_and_zero_gradients():
    h, w, targets = problem(5)
    loss, grad_h, grad_w = fused_with_gradients(h, w, torch.full_like(targets, IGNORE_INDEX), chunk_tokens=4,
                                                compute_dtype=torch.float32)
    assert loss.item() == 0.0
    assert torch.count_nonzero(grad_h).item() == 0 and torch.count_nonzero(grad_w).item() == 0


def test_backward_scales_the_forward_gradients_by_the_incoming_gradient():
    # The trainer weights each micro-batch's loss (loss * weight).backward(): gradients must follow.
    h, w, targets = problem(6)
    _, grad_h, grad_w = fused_with_gradients(h, w, targets, chunk_tokens=8, compute_dtype=torch.float32)
    h2, w2 = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
    (0.25 * kernels.chunked_linear_cross_entropy(h2, w2, targets, chunk_tokens=8, compute_dtype=torch.float32)).backward()
    torch.testing.assert_close(h2.grad, 0.25 * grad_h, rtol=1e-6, atol=0)
    torch.testing.assert_close(w2.grad, 0.25 * grad_w, rtol=1e-6, atol=0)


def test_a_second_backward_is_refused_not_silently_rescaled():
    h, w, targets = problem(7)
    h = h.requires_grad_(True)
    loss = kernels.chunked_linear_cross_entropy(h, w, targets, chunk_tokens=8, compute_dtype=torch.float32)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="differentiated twice"):
        loss.backward()


def test_without_autograd_no_gradient_is_computed(monkeypatch):
    h, w, targets = problem(8)
    expected = textbook_loss(h.double(), w.double(), targets).item()

    def refuse(*args, **kwargs):
        raise AssertionError("a gradient product ran for a loss nobody differentiates")

    monkeypatch.setattr(kernels, "_accumulate_product", refuse)
    with torch.no_grad():
        loss = kernels.chunked_linear_cross_entropy(h.requires_grad_(True), w.requires_grad_(True), targets,
                                                    chunk_tokens=8, compute_dtype=torch.float32)
    assert loss.grad_fn is None
    assert abs(loss.item() - expected) <= 1e-5 * abs(expected)


def test_a_frozen_head_gets_no_weight_gradient_product(monkeypatch):
    h, w, targets = problem(9)
    calls = []
    original = kernels._accumulate_product
    monkeypatch.setattr(kernels, "_accumulate_product", lambda *a: calls.append(1) or original(*a))
    h = h.requires_grad_(True)
    kernels.chunked_linear_cross_entropy(h, w, targets, chunk_tokens=8, compute_dtype=torch.float32).backward()
    assert calls == [] and w.grad is None and h.grad is not None


class LargestTensors(TorchDispatchMode):
    """Records every op's output sizes and the distinct storages of a given element count."""

    def __init__(self, watched_numel: int):
        super().__init__()
        self.watched_numel, self.largest, self.watched_storages = watched_numel, 0, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
                if tensor.numel() == self.watched_numel:
                    self.watched_storages.add(tensor.untyped_storage().data_ptr())
        return out


def test_no_full_logits_and_one_weight_sized_buffer_for_every_chunk():
    # 8 chunks of 8 rows: the old backward allocated a (V, C) product and its fp32 copy per chunk.
    batch, seq, width, vocab, chunk = 4, 16, 24, 211, 8
    h, w, targets = problem(10, batch=batch, seq=seq, hidden=width, vocab=vocab, padded=3)
    h, w = h.requires_grad_(True), w.requires_grad_(True)
    with LargestTensors(vocab * width) as seen:
        loss = kernels.chunked_linear_cross_entropy(h, w, targets, chunk_tokens=chunk, compute_dtype=torch.float32)
        loss.backward()
    assert seen.largest <= max(chunk * vocab, vocab * width)     # never (N, V) logits
    new_storages = seen.watched_storages - {w.untyped_storage().data_ptr()}   # views of W (W^T) are not new
    assert len(new_storages) == 1, new_storages                   # the one gradient accumulator


def test_the_mixed_precision_products_equal_the_plain_ones_whichever_route_the_device_takes():
    # kernels._matmul_into / _accumulate_product take torch's out_dtype GEMM where the probe
    # found one, else a low-precision product: either way the same product of the same operands.
    generator = torch.Generator().manual_seed(11)
    a = torch.randn(5, 7, generator=generator).bfloat16()
    b = torch.randn(3, 7, generator=generator).bfloat16().t()
    expected = a.double() @ b.double()
    product = kernels._matmul_into(torch.float32, a, b)
    assert product.dtype == torch.float32
    torch.testing.assert_close(product.double(), expected, rtol=2 ** -7, atol=1e-6)
    accumulator = torch.ones(5, 3)
    kernels._accumulate_product(accumulator, a, b)
    torch.testing.assert_close(accumulator.double(), expected + 1, rtol=2 ** -7, atol=1e-6)


def test_compiled_chunk_steps_equal_the_float64_definition():
    """The per-chunk steps as torch.compile builds them (what CUDA runs; inductor's C++ backend
    here) against float64 arithmetic written in this test: loss sum, and (softmax - onehot) / n."""
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 50, generator=generator) * 4
    targets = torch.randint(0, 50, (6,), generator=generator)
    counted = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    row_scale = counted / counted.sum()
    z = logits.double()
    expected_terms = torch.logsumexp(z, -1) - z.gather(1, targets[:, None]).squeeze(1)
    expected_sum = (expected_terms * counted.double()).sum()
    onehot = torch.nn.functional.one_hot(targets, 50).double()
    expected_gradient = (torch.softmax(z, -1) - onehot) * row_scale.double()[:, None]
    loss_sum, gradient = kernels._compiled(kernels.chunk_loss_and_logit_gradient)(
        logits, targets, counted, row_scale, torch.float32)
    assert gradient.dtype == torch.float32
    assert abs(loss_sum.item() - expected_sum.item()) <= 1e-5 * abs(expected_sum.item())
    assert (gradient.double() - expected_gradient).abs().max().item() <= 1e-6
    only_loss = kernels._compiled(kernels.chunk_loss_sum)(logits, targets, counted)
    assert abs(only_loss.item() - expected_sum.item()) <= 1e-5 * abs(expected_sum.item())
    low = kernels._compiled(kernels.chunk_loss_and_logit_gradient)(logits, targets, counted, row_scale, torch.bfloat16)[1]
    assert low.dtype == torch.bfloat16
    assert (low.double() - expected_gradient).abs().max().item() <= 2 ** -8 * expected_gradient.abs().max().item()


def test_first_chunk_overwrites_whatever_the_weight_gradient_buffer_held(monkeypatch):
    """The weight-gradient buffer is allocated uninitialised and the first chunk's product is
    written, not added: garbage in the buffer (NaN here) must not reach the gradient."""
    real_empty = torch.empty

    def poisoned_empty(*args, **kwargs):
        return real_empty(*args, **kwargs).fill_(float("nan"))

    monkeypatch.setattr(torch, "empty", poisoned_empty)
    h, w, targets = problem(4)
    for dtype in (torch.float32, torch.bfloat16):
        loss, grad_h, grad_w = fused_with_gradients(h, w, targets, chunk_tokens=7, compute_dtype=dtype)
        assert torch.isfinite(grad_w).all() and torch.isfinite(grad_h).all()
    ref_loss, ref_h, ref_w = textbook_with_gradients(h, w, targets)
    loss, grad_h, grad_w = fused_with_gradients(h, w, targets, chunk_tokens=7, compute_dtype=torch.float32)
    assert_close(grad_w, ref_w, 1e-5)


def test_chunk_steps_are_compiled_only_for_cuda_and_only_when_enabled(monkeypatch):
    """Which implementation of a chunk step runs: compiled on CUDA (with Triton), the plain
    function on the CPU or with COMPILE_LOSS_CHUNKS off; a patched step is compiled as itself."""
    monkeypatch.setattr(kernels, "_triton_available", lambda: True)
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    step = kernels.chunk_loss_and_logit_gradient
    assert kernels._chunk_step(step, cpu) is step
    assert kernels._chunk_step(step, cuda) is kernels._compiled(step)
    assert kernels._chunk_step(step, cuda) is not step

    def planted(*args):
        return step(*args)

    assert kernels._chunk_step(planted, cuda) is kernels._compiled(planted)
    assert kernels._compiled(planted) is not kernels._compiled(step)
    monkeypatch.setattr(kernels, "COMPILE_LOSS_CHUNKS", False)
    assert kernels._chunk_step(step, cuda) is step
    monkeypatch.setattr(kernels, "COMPILE_LOSS_CHUNKS", True)
    monkeypatch.setattr(kernels, "_triton_available", lambda: False)
    assert kernels._chunk_step(step, cuda) is step


def test_the_loss_looks_its_chunk_steps_up_at_call_time(monkeypatch):
    """A planted bug in a chunk step reaches the fused loss (the seam works): zeroing the
    one-hot term changes the gradients, and the loss-only step is the one used under no_grad."""
    h, w, targets = problem(5)
    _, clean_h, _ = fused_with_gradients(h, w, targets, chunk_tokens=8, compute_dtype=torch.float32)
    original = kernels.chunk_loss_and_logit_gradient

    def no_onehot(logits, targets, counted, row_scale, gradient_dtype):
        loss_sum, _ = original(logits, targets, counted, row_scale, gradient_dtype)
        probabilities = torch.softmax(logits, dim=-1) * row_scale[:, None]
        return loss_sum, probabilities.to(gradient_dtype)

    monkeypatch.setattr(kernels, "chunk_loss_and_logit_gradient", no_onehot)
    _, planted_h, _ = fused_with_gradients(h, w, targets, chunk_tokens=8, compute_dtype=torch.float32)
    assert (planted_h - clean_h).abs().max().item() > 1e-3
    monkeypatch.setattr(kernels, "chunk_loss_sum", lambda logits, targets, counted: logits.sum() * 0)
    with torch.no_grad():
        assert kernels.chunked_linear_cross_entropy(h, w, targets, chunk_tokens=8).item() == 0.0
