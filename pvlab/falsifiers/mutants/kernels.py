"""Planted bugs of runtime.kernels: the linear layers, RMSNorm, RoPE, softmax and the next-token pick.

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

from typing import Any

from pv.mutation import mutant

from .planting import plant, swap


@mutant("fast_path_drops_qkv_bias")
def fast_path_drops_qkv_bias():
    """The fast path's linear kernel ignores the bias: Q/K/V biases of a Qwen2 model are never
    added (Llama's o_proj/MLP biases too, where a config has them).

    Imitates the bug hunt's CUDA forward path that silently dropped the Q/K/V biases
    (val_loss 18.55, above ln V = 17.21: worse than uniform). Seam: runtime.kernels.linear_fast,
    which the fast path runs on every device, so the CPU's fast path shows it as well."""
    from pvlab.runtime import kernels

    original = kernels.linear_fast

    def linear_fast(x, weight, bias):
        return original(x, weight, None)

    with plant("fast_path_drops_qkv_bias", swap(kernels, "linear_fast", linear_fast)):
        yield


@mutant("rms_norm_eps_outside_sqrt")
def rms_norm_eps_outside_sqrt():
    """RMSNorm divides by sqrt(mean(x^2)) + eps instead of sqrt(mean(x^2) + eps): invisible for
    activations of size 1, a factor of ten off for activations of size 1e-4.

    Imitates a common hand-written-norm defect (eps placement). Seam: runtime.kernels.rms_norm."""
    import torch

    from pvlab.runtime import kernels

    def rms_norm(x, weight, eps):
        x32 = x.to(torch.float32)
        normalised = x32 / (x32.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps)
        return weight * normalised.to(x.dtype)

    with plant("rms_norm_eps_outside_sqrt", swap(kernels, "rms_norm", rms_norm)):
        yield


@mutant("rms_norm_ignores_weight")
def rms_norm_ignores_weight():
    """RMSNorm normalises but never multiplies by its learned weight (every norm acts as if its
    weight were all ones).

    Imitates a loader/kernel defect where norm weights are dropped. Seam: runtime.kernels.rms_norm."""
    import torch

    from pvlab.runtime import kernels

    original = kernels.rms_norm

    def rms_norm(x, weight, eps):
        return original(x, torch.ones_like(weight), eps)

    with plant("rms_norm_ignores_weight", swap(kernels, "rms_norm", rms_norm)):
        yield


@mutant("rms_norm_statistic_in_fp16")
def rms_norm_statistic_in_fp16():
    """RMSNorm computes mean(x^2) in float16: activations above ~256 square past fp16's 65504 and
    the norm turns to 0 or NaN.

    Imitates the half-precision norm defect (statistics accumulated in the activation's
    reduced dtype). Seam: runtime.kernels.rms_norm."""
    import torch

    from pvlab.runtime import kernels

    def rms_norm(x, weight, eps):
        x16 = x.to(torch.float16)
        normalised = x16 * torch.rsqrt(x16.pow(2).mean(dim=-1, keepdim=True) + eps)
        return weight * normalised.to(x.dtype)

    with plant("rms_norm_statistic_in_fp16", swap(kernels, "rms_norm", rms_norm)):
        yield


@mutant("rope_wrong_theta")
def rope_wrong_theta():
    """RoPE ignores the configured θ and uses a hard-coded 1e6 (Qwen2's published value), so a
    model configured with θ = 10000 (the tiny preset, Llama) rotates at the wrong frequencies.

    Imitates the seed defect "wrong RoPE θ". Seam: runtime.kernels.rope_cos_sin."""
    from pvlab.runtime import kernels

    original = kernels.rope_cos_sin

    def rope_cos_sin(theta, head_dim, positions):
        return original(1_000_000.0, head_dim, positions)

    with plant("rope_wrong_theta", swap(kernels, "rope_cos_sin", rope_cos_sin)):
        yield


@mutant("rope_interleaved_pairs")
def rope_interleaved_pairs():
    """RoPE rotates adjacent pairs (x0, x1), (x2, x3), ... (the GPT-J/interleaved layout) while
    the cos/sin tables and the checkpoints use the rotate_half layout (x_i, x_{i+D/2}).

    Imitates the seed defect "wrong RoPE rotation" (a layout mismatch between an implementation
    and the weights). Seam: runtime.kernels.rotate_half."""
    import torch

    from pvlab.runtime import kernels

    def rotate_half(x):
        pairs = x.unflatten(-1, (-1, 2))
        return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)

    with plant("rope_interleaved_pairs", swap(kernels, "rotate_half", rotate_half)):
        yield


@mutant("rope_angles_in_bfloat16")
def rope_angles_in_bfloat16():
    """RoPE angles (position × frequency) are computed in bfloat16: positions above 256 round to
    multiples of 2, 4, 8, ... and every angle carries a ~0.4 % error, so rotations are wrong and
    no longer depend on relative distance alone.

    Imitates the known long-context defect of computing rotary angles under bf16 autocast.
    Seam: runtime.kernels.rope_cos_sin."""
    import torch

    from pvlab.runtime import kernels

    def rope_cos_sin(theta, head_dim, positions):
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device)
        inverse_frequency = (1.0 / (theta ** (exponents / head_dim))).to(torch.bfloat16)
        angles = positions.to(torch.bfloat16)[:, None] * inverse_frequency[None, :]
        angles = torch.cat((angles, angles), dim=-1).float()
        return angles.cos(), angles.sin()

    with plant("rope_angles_in_bfloat16", swap(kernels, "rope_cos_sin", rope_cos_sin)):
        yield


@mutant("softmax_without_max_subtraction")
def softmax_without_max_subtraction():
    """softmax and log-softmax exponentiate the raw logits, without subtracting the row maximum:
    exp(1e4) overflows to inf (NaN probabilities) and exp(-1e4) underflows to 0 (0/0).

    Imitates the seed defect "softmax without max subtraction". Seams:
    runtime.kernels.softmax_reference (reference attention, sampling) and
    runtime.kernels.log_softmax_reference (the reference cross-entropy)."""
    import torch

    from pvlab.runtime import kernels

    def softmax_reference(scores):
        exponentials = torch.exp(scores)
        return exponentials / exponentials.sum(dim=-1, keepdim=True)

    def log_softmax_reference(logits):
        return logits - torch.log(torch.exp(logits).sum(dim=-1, keepdim=True))

    with plant("softmax_without_max_subtraction",
               swap(kernels, "softmax_reference", softmax_reference),
               swap(kernels, "log_softmax_reference", log_softmax_reference)):
        yield


@mutant("softmax_normalises_wrong_axis")
def softmax_normalises_wrong_axis():
    """softmax normalises over the second-to-last dimension (columns) instead of the last:
    rows no longer sum to one.

    Imitates an axis mix-up in a hand-written softmax. Seam: runtime.kernels.softmax_reference."""
    import torch

    from pvlab.runtime import kernels

    def softmax_reference(scores):
        return torch.softmax(scores.float(), dim=-2 if scores.dim() > 1 else -1).to(scores.dtype)

    with plant("softmax_normalises_wrong_axis", swap(kernels, "softmax_reference", softmax_reference)):
        yield


@mutant("greedy_decode_samples")
def greedy_decode_samples():
    """Temperature 0 samples from softmax(logits) instead of taking the argmax (from a generator
    seeded once per run, so the draws differ from call to call but the run is reproducible).

    Imitates the seed defect "greedy decode samples" (the bug hunt's GPU decode printed gibberish
    while the CPU path answered "2 + 2 equals 4."). Seam: runtime.kernels.pick_next_token."""
    import torch

    from pvlab.runtime import kernels

    original = kernels.pick_next_token
    generators: dict[str, Any] = {}

    def pick_next_token(logits, temperature, generator, top_k=None):
        if temperature != 0:
            return original(logits, temperature, generator, top_k)
        key = str(logits.device)
        if key not in generators:
            generators[key] = torch.Generator(device=logits.device).manual_seed(1234)
        return kernels.sample_pick(logits, 1.0, generators[key], top_k)

    with plant("greedy_decode_samples", swap(kernels, "pick_next_token", pick_next_token)):
        yield

