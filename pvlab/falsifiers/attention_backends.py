"""Every SDPA backend the device has gives the attention gradients of the math definition.

The fused kernels behind scaled_dot_product_attention (flash, memory-efficient, cuDNN) have their
own backward passes, and the public record holds backwards that returned NaN or gradients in the
wrong layout (a (B, H, S, D) tensor read as (B, S, H, D)). With num_heads == seq_len such a
transposed gradient has exactly the right shape, so only its values can tell. The check runs the
runtime's attention kernel (kernels.attention_fast, causal) under kernels.sdpa_backend(name),
backpropagates a random upstream gradient, and compares dq, dk, dv (and the output) with float64
autograd of softmax(QK^T/sqrt(D) + causal mask)V written out here, on the same rounded inputs.
"""

from __future__ import annotations

import math

import torch

from ._util import compared, device_unavailable, randn, rtol_atol, torch_device, torch_dtype


def _float64_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])                          # (B, H, T, T)
    length = q.shape[-2]
    future = torch.ones(length, length, dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v         # (B, H, T, D)


def backend_gradients_match_math(*, device: str, backend: str = "flash", heads: int = 16, seq_len: int = 16,
                                 head_dim: int = 64, batch: int = 2, dtype: str = "bfloat16", seed: int = 0,
                                 tolerance: dict | None = None) -> dict:
    """Forward and backward of kernels.attention_fast(q, k, v) with only `backend` allowed, inputs
    (batch, heads, seq_len, head_dim) in `dtype` on `device`; K/V have as many heads as Q.

    Raises DeviceUnavailable when the backend cannot run on this device (e.g. efficient or cudnn
    on a CPU): a SKIP, never a pass. Observations: grad_q_max_abs_diff, grad_k_max_abs_diff,
    grad_v_max_abs_diff, grad_max_abs_diff (the worst), grad_max_abs_ref, output_max_abs_diff,
    output_max_abs_ref, nonfinite (non-finite values in output and gradients), rtol, atol (of
    `dtype`), heads, seq_len."""
    from pvlab.runtime import kernels

    dev = torch_device(device)
    compute = torch_dtype(dtype)
    if not kernels.sdpa_backend_available(backend, dev, compute):
        raise device_unavailable(f"SDPA backend {backend!r} does not run {dtype} attention on {device} "
                                 f"(torch {torch.__version__})")
    rtol, atol = rtol_atol(tolerance, dtype)
    shape = (batch, heads, seq_len, head_dim)
    inputs = [randn(shape, seed=seed + i, dtype=compute, device=dev).requires_grad_() for i in range(3)]
    upstream = randn(shape, seed=seed + 3, dtype=compute, device=dev)
    with kernels.sdpa_backend(backend):
        output = kernels.attention_fast(*inputs)
        output.backward(upstream)
    exact = [x.detach().to("cpu", torch.float64).requires_grad_() for x in inputs]
    expected = _float64_attention(*exact)
    expected.backward(upstream.to("cpu", torch.float64))
    obs: dict = {}
    nonfinite = 0
    for name, got, want in zip("qkv", inputs, exact):
        stats = compared(got.grad, want.grad, rtol=rtol, atol=atol)
        obs[f"grad_{name}_max_abs_diff"] = stats["max_abs_diff"]
        obs[f"grad_{name}_max_abs_ref"] = stats["max_abs_ref"]
        nonfinite += stats["nonfinite"]
    out = compared(output, expected, rtol=rtol, atol=atol)
    nonfinite += out["nonfinite"]
    obs.update(grad_max_abs_diff=max(obs[f"grad_{n}_max_abs_diff"] for n in "qkv"),
               grad_max_abs_ref=max(obs[f"grad_{n}_max_abs_ref"] for n in "qkv"),
               output_max_abs_diff=out["max_abs_diff"], output_max_abs_ref=out["max_abs_ref"],
               nonfinite=nonfinite, rtol=rtol, atol=atol, heads=heads, seq_len=seq_len)
    return obs
