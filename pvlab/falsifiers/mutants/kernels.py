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



@mutant("rope_sin_one_position_ahead")
def rope_sin_one_position_ahead():
    """RoPE takes its cos table at position p but its sin table at p + 1: the "rotation" is no
    longer a rotation (it changes vector norms) and no longer depends on relative distance only.

    Imitates a table-indexing slip between separately cached cos and sin buffers.
    Seam: runtime.kernels.rope_cos_sin."""
    from pvlab.runtime import kernels

    original = kernels.rope_cos_sin

    def rope_cos_sin(theta, head_dim, positions):
        return original(theta, head_dim, positions)[0], original(theta, head_dim, positions + 1)[1]

    with plant("rope_sin_one_position_ahead", swap(kernels, "rope_cos_sin", rope_cos_sin)):
        yield


@mutant("rms_norm_returns_nan")
def rms_norm_returns_nan():
    """Every RMSNorm returns NaN (its output divided by zero): logits, losses and gradients of
    every forward are NaN.

    Imitates a division by a zero statistic (eps forgotten on an all-zero row, an fp16 underflow)
    that poisons the whole forward. Seam: runtime.kernels.rms_norm."""
    from pvlab.runtime import kernels

    original = kernels.rms_norm

    def rms_norm(x, weight, eps):
        return original(x, weight, eps) / 0.0 * 0.0

    with plant("rms_norm_returns_nan", swap(kernels, "rms_norm", rms_norm)):
        yield


@mutant("fast_path_reverses_output_features")
def fast_path_reverses_output_features():
    """The fast path's linear layers return their output features in reverse order: the device
    path computes gibberish while the CPU reference path is intact.

    Imitates the bug hunt's GPU decode that printed gibberish next to a correct CPU answer (a
    layout mismatch of device weights). The parity gate's own falsifier plants it to prove the
    gate refuses a diverging device. Seam: runtime.kernels.linear_fast."""
    from pvlab.runtime import kernels

    original = kernels.linear_fast

    def linear_fast(x, weight, bias):
        return original(x, weight, bias).flip(-1)

    with plant("fast_path_reverses_output_features", swap(kernels, "linear_fast", linear_fast)):
        yield


# ---- third blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/independent-mutants.md, "Third batch"; probes in tests/falsifiers/third_mutant_probes.py)


@mutant("fused_projection_weights_stacked_without_grad")
def fused_projection_weights_stacked_without_grad():
    """The fused Q/K/V and gate/up product stacks its weights (and biases) under no_grad: the
    forward is bit-identical, but the stacked copy is cut from the parameters, so on the fast
    path with fused projections q/k/v/gate/up never receive a gradient (.grad stays None and
    AdamW skips them) while o_proj, down_proj, norms and embeddings still train.

    Imitates wrapping a per-call weight copy in `torch.no_grad()` "so the copy is not recorded"
    (a memory optimisation that also severs autograd). Seam: runtime.kernels.fused_linear_fast."""
    import torch

    from pvlab.runtime import kernels

    def fused_linear_fast(x, weights, biases):
        with torch.no_grad():                                                # the defect
            weight = torch.cat(weights)
            bias = None if all(b is None for b in biases) else torch.cat(
                [b if b is not None else w.new_zeros(w.shape[0]) for w, b in zip(weights, biases)])
        return kernels.linear_fast(x, weight, bias).split([w.shape[0] for w in weights], dim=-1)

    with plant("fused_projection_weights_stacked_without_grad",
               swap(kernels, "fused_linear_fast", fused_linear_fast)):
        yield


@mutant("swiglu_fast_uses_tanh_gelu")
def swiglu_fast_uses_tanh_gelu():
    """The fast path's gated MLP activates the gate with tanh-approximated GELU instead of SiLU
    (GeGLU for SwiGLU). The two curves are close (both ~x for large x, ~0 for very negative x),
    so at small random-init activations the logits barely move; trained weights drift from the
    reference path.

    Imitates an MLP kernel copied from a GeGLU model (Gemma) into a SwiGLU runtime. Seam:
    runtime.kernels.swiglu_fast."""
    import torch.nn.functional as F

    from pvlab.runtime import kernels

    def swiglu_fast(gate, up):
        return F.gelu(gate, approximate="tanh") * up                        # the defect: not F.silu

    with plant("swiglu_fast_uses_tanh_gelu", swap(kernels, "swiglu_fast", swiglu_fast)):
        yield


@mutant("sdpa_boolean_mask_cast_to_float")
def sdpa_boolean_mask_cast_to_float():
    """The fast attention casts an explicit boolean mask to the query dtype before handing it to
    scaled_dot_product_attention. SDPA *adds* a float mask to the scores: allowed keys get +1,
    forbidden keys +0, so nothing is masked at all. Plain causal batches are untouched (no mask
    is passed: is_causal); padded and packed batches on the fast path see padding, other
    documents and the future.

    Imitates `attn_mask=mask.to(q.dtype)` written to silence a dtype complaint. Seam:
    runtime.kernels.attention_fast."""
    import torch.nn.functional as F

    from pvlab.runtime import kernels

    original = kernels.attention_fast

    def attention_fast(q, k, v, mask=None):
        if mask is None:
            return original(q, k, v)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype),   # the defect
                                              enable_gqa=q.shape[1] != k.shape[1])

    with plant("sdpa_boolean_mask_cast_to_float", swap(kernels, "attention_fast", attention_fast)):
        yield


@mutant("fused_loss_gradient_normalised_per_chunk")
def fused_loss_gradient_normalised_per_chunk():
    """Each chunk of the fused linear cross-entropy scales its logit gradient by 1 / (the
    chunk's own counted tokens) instead of 1 / (all counted tokens): the loss value is exact,
    the gradient is the sum of per-chunk means (about n_chunks times too large, and tokens of a
    mostly padded chunk weigh more). With a single chunk (a small vocabulary's default chunk
    size) it is exact, so it only shows where the batch spans several chunks.

    Imitates a normalisation moved inside the chunk loop during a refactor. Seam:
    runtime.kernels.chunk_loss_and_logit_gradient."""
    from pvlab.runtime import kernels

    original = kernels.chunk_loss_and_logit_gradient

    def chunk_loss_and_logit_gradient(logits, targets, counted, row_scale, gradient_dtype):
        row_scale = counted / counted.sum().clamp(min=1)                     # the defect: this chunk's count
        return original(logits, targets, counted, row_scale, gradient_dtype)

    with plant("fused_loss_gradient_normalised_per_chunk",
               swap(kernels, "chunk_loss_and_logit_gradient", chunk_loss_and_logit_gradient)):
        yield


@mutant("sampling_temperature_multiplies_logits")
def sampling_temperature_multiplies_logits():
    """Sampling multiplies the logits by the temperature instead of dividing: at temperature 1
    nothing changes, below 1 the distribution is flattened instead of sharpened (0.2 samples
    almost uniformly), above 1 it is sharpened. Greedy decoding (temperature 0) is untouched.

    Imitates `logits * temperature` for `logits / temperature` (an inverse temperature beta
    mistaken for T). Seam: runtime.kernels.sample_pick."""
    import torch

    from pvlab.runtime import kernels

    def sample_pick(logits, temperature, generator, top_k=None):
        scaled = logits.float() * temperature                                # the defect
        if top_k is not None and top_k < scaled.shape[-1]:
            kth_best = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
            scaled = scaled.masked_fill(scaled < kth_best, float("-inf"))
        probabilities = kernels.softmax_reference(scaled)
        return torch.multinomial(probabilities, num_samples=1, generator=generator).squeeze(-1)

    with plant("sampling_temperature_multiplies_logits", swap(kernels, "sample_pick", sample_pick)):
        yield


# ---- fourth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Fourth blind batch"; probes in tests/falsifiers/fourth_mutant_probes.py)


@mutant("top_k_threshold_from_kthvalue")
def top_k_threshold_from_kthvalue():
    """Top-k sampling takes its threshold from torch.kthvalue(scaled, k), which is the k-th
    *smallest* logit, not the k-th largest: only the k - 1 least likely tokens are removed, so
    top_k=5 samples from almost the whole vocabulary (and top_k=1 is no longer greedy). Sampling
    without top_k, and greedy decoding, are untouched.

    Imitates reaching for torch.kthvalue where torch.topk(...).values[..., -1] is meant. Seam:
    runtime.kernels.sample_pick."""
    import torch

    from pvlab.runtime import kernels

    def sample_pick(logits, temperature, generator, top_k=None):
        scaled = logits.float() / temperature
        if top_k is not None and top_k < scaled.shape[-1]:
            kth_best = torch.kthvalue(scaled, top_k, dim=-1, keepdim=True).values    # the defect: k-th smallest
            scaled = scaled.masked_fill(scaled < kth_best, float("-inf"))
        probabilities = kernels.softmax_reference(scaled)
        return torch.multinomial(probabilities, num_samples=1, generator=generator).squeeze(-1)

    with plant("top_k_threshold_from_kthvalue", swap(kernels, "sample_pick", sample_pick)):
        yield


# ---- eighth blind batch ----
# Written from pvlab/runtime and docs/runtime.md alone, before any kill was measured (docs/mutants.md,
# "Eighth blind batch"; probes in tests/falsifiers/eighth_mutant_probes.py).


@mutant("sampling_generator_reseeded_each_step")
def sampling_generator_reseeded_each_step():
    """Sampled decoding (temperature > 0) reseeds its generator with the request's seed before
    every token: each step draws from the same uniform random numbers, so the tokens of one
    continuation are correlated (a token at the same quantile of each step's distribution) rather
    than independent draws. Still seeded and reproducible; greedy decoding unaffected.

    Imitates building `torch.Generator().manual_seed(seed)` inside the per-token loop instead of
    once per request. Quiet: every token is still drawn from softmax(logits / T), top-k
    included, and the text looks sampled. Seam: runtime.kernels.sample_pick (wrapped: the
    generator rewound to its seed first)."""
    from pvlab.runtime import kernels

    original = kernels.sample_pick

    def sample_pick(logits, temperature, generator, top_k=None):
        if generator is not None:
            generator.manual_seed(generator.initial_seed())   # the defect: a fresh generator each step
        return original(logits, temperature, generator, top_k)

    with plant("sampling_generator_reseeded_each_step", swap(kernels, "sample_pick", sample_pick)):
        yield


@mutant("fast_path_autocasts_to_float16")
def fast_path_autocasts_to_float16():
    """The fast path autocasts to float16 instead of bfloat16 (on the CPU and on CUDA): every
    projection, SDPA and the logits run in fp16. On a tiny model the numbers are close to bf16's
    (fp16 has more mantissa, less range); there is no GradScaler, so on a real model small
    gradients underflow and large activations can overflow. The fused loss (explicit bf16 compute
    dtype) and the reference path are unaffected.

    Imitates `dtype=torch.half` where `torch.bfloat16` was meant. Quiet: the parity gate's
    cosine stays above 0.99 and training proceeds. Seam: runtime.kernels.autocast_for."""
    import torch

    from pvlab.runtime import kernels

    original = kernels.autocast_for

    def autocast_for(path, device_type):
        if path == "fast":
            return torch.autocast(device_type=device_type, dtype=torch.float16)   # the defect: fp16
        return original(path, device_type)

    with plant("fast_path_autocasts_to_float16", swap(kernels, "autocast_for", autocast_for)):
        yield


# ---- ninth blind batch ----
# Written from pvlab/runtime and docs/runtime.md alone, before any kill was measured (docs/mutants.md,
# "Ninth blind batch"; probes in tests/falsifiers/ninth_mutant_probes.py).


@mutant("rope_rotates_backwards")
def rope_rotates_backwards():
    """apply_rope rotates queries and keys by minus their position angle: x*cos - rotate_half(x)*sin
    instead of x*cos + rotate_half(x)*sin. The rotation is still a rotation (norms kept) and still
    depends on relative position only, so attention is a valid relative encoding - the mirror
    image of the one Qwen2 and Llama checkpoints were trained with.

    Imitates mixing two sign conventions of the rotate-half layout ((x2, -x1) vs (-x2, x1)) and
    "fixing" it on the wrong side. Quiet: a model trained from scratch trains exactly as well
    (the flipped rotation is as good a position code), cached and uncached decoding agree, and
    nothing is NaN; only the logits of a real HF checkpoint (or any reference RoPE) differ.
    Seam: runtime.kernels.apply_rope (wrapped: the sin table negated)."""
    from pvlab.runtime import kernels

    original = kernels.apply_rope

    def apply_rope(x, cos, sin):
        return original(x, cos, -sin)   # the defect: rotation by -angle

    with plant("rope_rotates_backwards", swap(kernels, "apply_rope", apply_rope)):
        yield


@mutant("greedy_pick_in_bfloat16")
def greedy_pick_in_bfloat16():
    """greedy_pick takes the argmax of the logits rounded to bfloat16: logits closer than bf16's
    resolution (8 bits of mantissa: 0.06 at a logit of 10) tie, and the tie goes to the lowest
    token id, not to the truly most likely token. Sampling is unaffected.

    Imitates computing the decoding choice in the model's low-precision compute dtype ("the
    logits are bf16 on the fast path anyway") although the runtime hands fp32 logits over.
    Quiet: the chosen token is always one of the near-best; text stays fluent, cached and uncached
    greedy decoding agree with each other; only exact agreement with an fp32 argmax breaks on
    near-ties. Seam: runtime.kernels.greedy_pick (wrapped: logits cast to bf16 first)."""
    import torch

    from pvlab.runtime import kernels

    original = kernels.greedy_pick

    def greedy_pick(logits):
        return original(logits.to(torch.bfloat16))   # the defect: argmax after bf16 rounding

    with plant("greedy_pick_in_bfloat16", swap(kernels, "greedy_pick", greedy_pick)):
        yield


# ---- independent rows (contract independent-rows)


@mutant("rms_norm_statistic_over_rows")
def rms_norm_statistic_over_rows():
    """RMSNorm's mean(x^2) of a (B, T, C) input is taken over the batch axis and the features
    (dim=(0, -1)) instead of the features alone: every position of every row is divided by a
    statistic shared across the batch's rows, so a row's output depends on what else is in the
    batch. A batch of one row, and every 2-D input, is untouched.

    Imitates a norm written for flattened (tokens, features) input and reused unflattened, or a
    batch-norm habit (a statistic over the batch) in a layer norm. Quiet: no error, every value
    finite and of the right scale. Seam: runtime.kernels.rms_norm (both paths)."""
    import torch

    from pvlab.runtime import kernels

    def rms_norm(x, weight, eps):
        x32 = x.to(torch.promote_types(x.dtype, torch.float32))
        dims = (0, -1) if x.dim() == 3 else (-1,)                          # the defect: rows pooled
        normalised = x32 * torch.rsqrt(x32.pow(2).mean(dim=dims, keepdim=True) + eps)
        return weight * normalised.to(x.dtype)

    with plant("rms_norm_statistic_over_rows", swap(kernels, "rms_norm", rms_norm)):
        yield
