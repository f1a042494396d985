"""Numerical kernels of both execution paths, as plain module-level functions.

The model, trainer and generator call every function here as `kernels.NAME(...)`, i.e. by
attribute lookup at call time. That is deliberate: a planted bug (a "mutant") or a bisecting
tool can `unittest.mock.patch("pvlab.runtime.kernels.rms_norm", ...)` for one run and the whole
runtime picks the patched version up, with no import-time binding to defeat it.

Two families live side by side:

* `*_reference`: fp32, explicit math that reads like the paper (softmax with max subtraction,
  log-softmax cross-entropy over full logits). Slow and obviously right.
* `*_fast`: what a GPU trainer runs — bf16 autocast, `scaled_dot_product_attention`, a chunked
  linear+cross-entropy that never holds the full-vocabulary logits of a batch.

Shapes use B = batch, T = query positions, S = key positions (past + T), H = query heads,
KV = key/value heads, D = head dim, C = hidden size, V = vocabulary, N = B*T tokens.
"""

from __future__ import annotations

import contextlib
import functools
import math

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100  # target id excluded from the loss (padding), as in torch and transformers


# ---- execution-path plumbing -------------------------------------------------------------------

def autocast_for(path: str, device_type: str):
    """bf16 autocast on the fast path; autocast explicitly *off* on the reference path, so an
    outer autocast region cannot silently turn reference math into bf16 math."""
    if path == "fast":
        return torch.autocast(device_type=device_type, dtype=torch.bfloat16)
    if path == "reference":
        return torch.autocast(device_type=device_type, enabled=False)
    raise ValueError(f"unknown execution path {path!r}")


# ---- normalisation -----------------------------------------------------------------------------

def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm: x / sqrt(mean(x^2) + eps) * weight, computed in fp32 whatever the input dtype
    (bf16 squares lose too much precision), then cast back before the weight as Qwen2/Llama do."""
    input_dtype = x.dtype
    x32 = x.to(torch.promote_types(input_dtype, torch.float32))  # fp32 at least (fp64 stays fp64)
    mean_square = x32.pow(2).mean(dim=-1, keepdim=True)          # (..., 1)
    normalised = x32 * torch.rsqrt(mean_square + eps)
    return weight * normalised.to(input_dtype)


# ---- rotary position embedding -----------------------------------------------------------------

def positions_for(past_length: int, num_new: int, device: torch.device | str) -> torch.Tensor:
    """Absolute positions of `num_new` tokens appended after `past_length` cached ones: (T,).
    With a KV cache, the first new token sits at position past_length, not 0."""
    return torch.arange(past_length, past_length + num_new, device=device)


def rope_cos_sin(theta: float, head_dim: int, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables for rotary embeddings at `positions` (T,): each (T, D), fp32. Per-row
    positions (B, T) (padded or packed batches) give (B, T, D).

    Frequencies theta^(-2i/D) for i < D/2, duplicated across the two halves of the head
    dimension (the "rotate_half" layout that Qwen2 and Llama checkpoints are trained with).
    """
    # Built on the positions' device: an arange on the host copied over would be a blocking copy
    # (a wait for the whole GPU queue) in every forward. int64 then fp32, as transformers does.
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=positions.device).to(torch.float32)
    inverse_frequency = 1.0 / (theta ** (exponents / head_dim))              # (D/2,)
    angles = positions.to(torch.float32)[..., None] * inverse_frequency     # (T, D/2) or (B, T, D/2)
    angles = torch.cat((angles, angles), dim=-1)                             # (T, D) or (B, T, D)
    return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) over the two halves of the last dimension."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate queries or keys x (B, heads, T, D) by the position angles (T, D), or by per-row
    angles (B, T, D), which are shared by every head."""
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]                                # (B, 1, T, D)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin


# ---- projections and MLP -----------------------------------------------------------------------

def linear_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """y = x W^T + b, spelled out."""
    y = torch.matmul(x, weight.t())
    if bias is not None:
        y = y + bias
    return y


def linear_fast(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """y = x W^T + b via the fused addmm kernel (bf16 under autocast). The bias argument is the
    fast path's own bias application: dropping it here is the seed bug 'CUDA path ignores Q/K/V
    biases'."""
    return F.linear(x, weight, bias)


def fused_linear_fast(x: torch.Tensor, weights: list[torch.Tensor],
                      biases: list[torch.Tensor | None]) -> tuple[torch.Tensor, ...]:
    """Several products of one input (Q, K and V; gate and up) as one: the weights stacked along
    the output dimension (W = [W1; W2; ...], b likewise), one linear_fast, the result split
    back. Each output element is the same dot product as in its own linear_fast; one large GEMM
    replaces several small ones (K and V of a grouped-query model are narrow). The stacking is a
    copy of the (bf16-cast) weights per call, which torch.compile fuses with the cast; the
    parameters, their names and the checkpoint format stay the separate HF tensors."""
    weight = torch.cat(weights)
    bias = None if all(b is None for b in biases) else torch.cat(
        [b if b is not None else w.new_zeros(w.shape[0]) for w, b in zip(weights, biases)])
    return linear_fast(x, weight, bias).split([w.shape[0] for w in weights], dim=-1)


def swiglu_reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up with SiLU written out as gate * sigmoid(gate)."""
    return gate * torch.sigmoid(gate) * up


def swiglu_fast(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


# ---- attention ---------------------------------------------------------------------------------

def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Share each key/value head with `groups` query heads: (B, KV, S, D) -> (B, KV*groups, S, D)."""
    if groups == 1:
        return x
    batch, kv_heads, seq, head_dim = x.shape
    x = x[:, :, None, :, :].expand(batch, kv_heads, groups, seq, head_dim)  # (B, KV, groups, S, D)
    return x.reshape(batch, kv_heads * groups, seq, head_dim)               # (B, H, S, D)


def causal_mask(query_length: int, key_length: int, device: torch.device | str) -> torch.Tensor:
    """Boolean (T, S) mask, True where query i may attend key j.

    The T queries are the *last* T of the S key positions (the earlier S - T come from the KV
    cache), so query i sits at absolute position S - T + i and sees keys j <= S - T + i.
    """
    offset = key_length - query_length
    query_positions = torch.arange(query_length, device=device)[:, None] + offset  # (T, 1)
    key_positions = torch.arange(key_length, device=device)[None, :]               # (1, S)
    return key_positions <= query_positions


def positions_from_attention_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions of a left-padded batch: attention_mask (B, S), 1 for a real token and 0 for
    padding, -> (B, S). Each row's first real token is position 0 however much padding precedes
    it (what the row gets alone); padding itself sits at 0 and is never attended to."""
    positions = attention_mask.long().cumsum(dim=-1) - 1                    # (B, S)
    return positions.clamp(min=0)


def padded_causal_mask(attention_mask: torch.Tensor, query_length: int) -> torch.Tensor:
    """Boolean (B, 1, T, S) mask for the last T of S positions of a padded batch: causal, and
    never a padding key. A padding query would then see no key at all (a NaN softmax row), so
    every query also sees itself; no real query is affected, its own key being real."""
    key_length = attention_mask.shape[-1]
    allowed = causal_mask(query_length, key_length, attention_mask.device)[None]     # (1, T, S)
    allowed = allowed & attention_mask.bool()[:, None, :]                           # (B, T, S)
    query_positions = torch.arange(query_length, device=attention_mask.device) + key_length - query_length
    itself = query_positions[:, None] == torch.arange(key_length, device=attention_mask.device)[None, :]
    return (allowed | itself[None])[:, None]                                        # (B, 1, T, S)


def document_positions(document_ids: torch.Tensor) -> torch.Tensor:
    """Positions in a packed batch: document_ids (B, T) labels each token with its document
    (contiguous runs); -> (B, T) positions that restart at 0 where each document starts."""
    batch, length = document_ids.shape
    index = torch.arange(length, device=document_ids.device).expand(batch, length)     # (B, T)
    starts = torch.ones_like(document_ids, dtype=torch.bool)
    starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]                        # (B, T)
    start_of_run = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=-1).values
    return index - start_of_run


def document_causal_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """Block-diagonal causal mask of a packed batch: (B, T) document ids -> (B, 1, T, T), True
    where query i may attend key j: j <= i and both in the same document."""
    length = document_ids.shape[-1]
    same_document = document_ids[:, :, None] == document_ids[:, None, :]              # (B, T, T)
    return (same_document & causal_mask(length, length, document_ids.device)[None])[:, None]


def softmax_reference(scores: torch.Tensor) -> torch.Tensor:
    """softmax over the last dimension, subtracting the row maximum first so exp cannot overflow."""
    row_max = scores.amax(dim=-1, keepdim=True)
    exponentials = torch.exp(scores - row_max)
    return exponentials / exponentials.sum(dim=-1, keepdim=True)


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        mask: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(Q K^T / sqrt(D) + mask) V, explicitly, in fp32.

    q: (B, H, T, D); k, v: (B, KV, S, D) -> (B, H, T, D). mask: boolean, broadcastable to
    (B, H, T, S), True where attending is allowed (padded or packed batches); None means the
    causal mask.
    """
    groups = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, groups), repeat_kv(v, groups)                        # (B, H, S, D)
    compute = torch.promote_types(q.dtype, torch.float32)  # fp32, or fp64 for a float64 model
    q, k, v = q.to(compute), k.to(compute), v.to(compute)
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])   # (B, H, T, S)
    allowed = causal_mask(q.shape[-2], k.shape[-2], q.device) if mask is None else mask  # (T, S) / (B, 1, T, S)
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = softmax_reference(scores)                                      # (B, H, T, S)
    return torch.matmul(weights, v)                                          # (B, H, T, D)


def attention_fast(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   mask: torch.Tensor | None = None) -> torch.Tensor:
    """The same attention through torch's fused scaled_dot_product_attention (flash / memory-
    efficient kernels where available, or the one `sdpa_backend` selects), with native
    grouped-query support.

    q: (B, H, T, D); k, v: (B, KV, S, D) -> (B, H, T, D). mask as for attention_reference.
    """
    query_length, key_length = q.shape[-2], k.shape[-2]
    enable_gqa = q.shape[1] != k.shape[1]
    if mask is not None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=enable_gqa)
    if query_length == key_length:
        # No cache: the standard lower-triangular mask, which SDPA builds itself.
        return F.scaled_dot_product_attention(q, k, v, is_causal=query_length > 1, enable_gqa=enable_gqa)
    if query_length == 1:
        # One new token after a cache: it may see every key.
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=enable_gqa)
    # Several new tokens after a cache: SDPA's is_causal aligns top-left, which would be wrong.
    allowed = causal_mask(query_length, key_length, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=enable_gqa)


# ---- SDPA backends -----------------------------------------------------------------------------

# The fused attention kernels behind scaled_dot_product_attention, by the names the runtime
# accepts. Only "math" and "flash" exist on the CPU; "efficient" and "cudnn" are CUDA kernels.
ATTENTION_BACKENDS = ("math", "flash", "efficient", "cudnn")


def sdpa_backend(name: str | None):
    """Context in which scaled_dot_product_attention may use only backend `name` (None: torch
    chooses, the default). Inside it, a call the backend cannot serve raises RuntimeError
    instead of silently falling back to another kernel."""
    if name is None:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    choices = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    if name not in choices:
        raise ValueError(f"unknown attention backend {name!r}; choose one of {', '.join(ATTENTION_BACKENDS)}")
    return sdpa_kernel([choices[name]])


def sdpa_backend_available(name: str, device: torch.device | str, dtype: torch.dtype = torch.bfloat16) -> bool:
    """Whether backend `name` runs a small causal attention, forward and backward, on `device`."""
    q = torch.zeros(1, 2, 4, 64, device=device, dtype=dtype, requires_grad=True)
    try:
        with sdpa_backend(name), torch.enable_grad():  # the probe needs a backward even under no_grad
            F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    except RuntimeError:
        return False
    return True


# ---- loss --------------------------------------------------------------------------------------

def log_softmax_reference(logits: torch.Tensor) -> torch.Tensor:
    """log softmax over the last dimension: x - max - log(sum(exp(x - max)))."""
    row_max = logits.amax(dim=-1, keepdim=True)
    shifted = logits - row_max
    return shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))


def cross_entropy_reference(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of `targets` under full logits, over non-ignored positions.

    logits: (..., V) any float dtype (computed in fp32); targets: (...) int64 with IGNORE_INDEX
    marking padding. Position t's logits score target t; the caller has already shifted
    targets by one relative to the inputs.
    """
    vocab = logits.shape[-1]
    log_probs = log_softmax_reference(logits.reshape(-1, vocab).float())     # (N, V)
    flat_targets = targets.reshape(-1)                                        # (N,)
    counted = flat_targets != IGNORE_INDEX
    safe_targets = flat_targets.clamp(min=0)                                  # gather needs valid ids
    target_log_probs = log_probs.gather(1, safe_targets[:, None]).squeeze(1)  # (N,)
    return -(target_log_probs * counted).sum() / counted.sum().clamp(min=1)


def default_loss_chunk_tokens(vocab_size: int) -> int:
    """Tokens per chunk of the fused loss: 128 Mi logits a chunk (256 MiB of bf16 logits since
    they are computed in the compute dtype; the figure was set when they were fp32, 512 MiB).

    Why not smaller: every chunk adds its share of d loss / d weight into the one (V, C) fp32
    gradient buffer, and each such in-place product reads and writes that whole buffer (545 MB
    for Qwen2's 151,936 x 896 head), so the buffer traffic scales with the number of chunks;
    longer chunks also give the (V, c) x (c, C) product a deeper reduction, which the GEMM runs
    closer to peak. Why not larger: the chunk's logits and their bf16 gradient are the
    loss's transient memory (~1.5 x this figure when the chunk steps are compiled); for Qwen2
    this gives 883 tokens, 10 chunks of a batch of 8 x 1024. Measured on an H100
    (bench/bench_loss.py, docs/performance.md): 441-token chunks ran the loss at 1.19x the
    full-logits reference, 883 at 1.50x, 1,766 at 1.64x for 1 GiB more memory (fp32 logits).
    bench/bench_vs_hf.py and FALSIFY-PERF-HF-001 name chunk=4096 (0.9 ms a step faster than
    1,766 on an H100 with bf16 logits); the default is left as it is because this function
    runs whenever a model is built, so changing its code stales every record that built one."""
    return max(16, (128 * 1024 * 1024) // vocab_size)


@functools.lru_cache(maxsize=None)
def _mixed_precision_matmul_available(device_type: str) -> bool:
    """Whether torch multiplies low-precision operands into an fp32 result in one GEMM
    (`torch.mm(..., out_dtype=)`, `torch.addmm(..., out_dtype=, out=acc)`: cuBLAS accumulates
    in fp32 anyway) on this device, correctly, including the in-place accumulation form.
    Probed once per device type: torch builds without the kernel raise, and a wrong answer
    is refused too, so the fused loss falls back to a low-precision product plus an add."""
    try:
        generator = torch.Generator().manual_seed(0)
        # Transposed operands, as the loss passes them (W^T, g^T).
        a = torch.randn(16, 8, generator=generator).to(device_type).bfloat16().t()      # (8, 16) view
        b = torch.randn(4, 16, generator=generator).to(device_type).bfloat16().t()      # (16, 4) view
        accumulator = torch.randn(8, 4, generator=generator).to(device_type)
        expected = accumulator + a.float() @ b.float()
        product = torch.mm(a, b, out_dtype=torch.float32)
        torch.addmm(accumulator, a, b, out_dtype=torch.float32, out=accumulator)
    except (RuntimeError, TypeError, NotImplementedError):
        return False
    return (product.dtype == torch.float32 and accumulator.dtype == torch.float32
            and bool(torch.allclose(product, a.float() @ b.float(), atol=1e-4))
            and bool(torch.allclose(accumulator, expected, atol=1e-4)))


@functools.lru_cache(maxsize=None)
def _mixed_precision_overwrite_available(device_type: str) -> bool:
    """Whether the mixed-precision addmm honours beta=0 (writes the product without reading the
    accumulator: NaN left in it must not come through), so the first chunk can skip zero-filling."""
    try:
        generator = torch.Generator().manual_seed(1)
        a = torch.randn(8, 16, generator=generator).to(device_type).bfloat16()
        b = torch.randn(16, 4, generator=generator).to(device_type).bfloat16()
        accumulator = torch.full((8, 4), float("nan"), device=device_type)
        torch.addmm(accumulator, a, b, out_dtype=torch.float32, beta=0, out=accumulator)
    except (RuntimeError, TypeError, NotImplementedError):
        return False
    return bool(torch.allclose(accumulator, a.float() @ b.float(), atol=1e-4))


def _matmul_into(result_dtype: torch.dtype, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b (both in the compute dtype) as a `result_dtype` tensor, in one GEMM where the
    device has a mixed-precision one (no low-precision intermediate, no cast kernel)."""
    if a.dtype == result_dtype:
        return a @ b
    if _mixed_precision_matmul_available(a.device.type):
        return torch.mm(a, b, out_dtype=result_dtype)
    return (a @ b).to(result_dtype)


def _accumulate_product(accumulator: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, first: bool = False) -> None:
    """accumulator += a @ b in place (accumulator = a @ b when `first`: the buffer's old contents,
    uninitialised memory included, are never read). With a mixed-precision GEMM the product is
    added inside the GEMM (beta=1, beta=0 for the first): no (V, C) temporary at all; otherwise
    one low-precision temporary."""
    if a.dtype == accumulator.dtype:
        accumulator.addmm_(a, b, beta=0 if first else 1)
    elif _mixed_precision_matmul_available(a.device.type):
        if first and not _mixed_precision_overwrite_available(a.device.type):
            accumulator.zero_()
            first = False
        torch.addmm(accumulator, a, b, out_dtype=accumulator.dtype, beta=0 if first else 1, out=accumulator)
    elif first:
        accumulator.copy_(a @ b)
    else:
        accumulator.add_(a @ b)


def chunk_loss_sum(logits: torch.Tensor, targets: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:
    """sum over one chunk's counted rows of logsumexp(z) - z[target]: the loss-only step.
    logits (c, V) in the compute dtype (bf16 on the fast path; read as fp32, never rounded
    further), targets (c,) valid ids, counted (c,) 1 for a scored row, 0 for padding."""
    logits = logits.to(counted.dtype)                                                    # fused into the loads
    log_sum_exp = torch.logsumexp(logits, dim=-1)                                       # (c,)
    target_logits = logits.gather(1, targets[:, None]).squeeze(1)                        # (c,)
    return ((log_sum_exp - target_logits) * counted).sum()


def chunk_loss_and_logit_gradient(logits: torch.Tensor, targets: torch.Tensor, counted: torch.Tensor,
                                  row_scale: torch.Tensor, gradient_dtype: torch.dtype
                                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk's loss sum and d mean-loss / d logits = (softmax(z) - onehot(target)) * row_scale,
    returned in `gradient_dtype` (the dtype of the two gradient GEMMs that consume it).

    logits (c, V) in the compute dtype, upcast to the statistics dtype (counted's: fp32, or fp64
    for an fp64 computation) as they are read; targets (c,) valid ids; counted (c,) 1/0;
    row_scale (c,) 1/n or 0. Written as pure elementwise + row reductions so that torch.compile
    can make it one pass to find the row statistics and one pass writing the low-precision
    gradient, the upcast fused into both passes' loads; eager, it is the same arithmetic in a
    few more kernels."""
    logits = logits.to(counted.dtype)
    if torch.compiler.is_compiling():
        # The row max, then the sum of exp(z - max): the softmax pattern torch.compile turns
        # into one online pass over the logits. torch.logsumexp's decomposition guards an
        # infinite max, which hides that pattern and costs a third read of the (c, V) logits
        # (~0.7 ms a step at 0.5B on an H100).
        row_max = logits.amax(dim=-1, keepdim=True)                                      # (c, 1)
        shifted = logits - row_max                                                       # (c, V)
        sum_exp = shifted.exp().sum(dim=-1, keepdim=True)                                # (c, 1)
        log_sum_exp = row_max + sum_exp.log()                                            # (c, 1)
        probabilities = shifted.exp() / sum_exp                                          # (c, V)
    else:
        # Eager (the CPU), torch.logsumexp's own kernel. Run eagerly, the separate amax, exp
        # and sum kernels above did not give the plain and the graphed trainer the same bits
        # on the same batches (the replays drifted from the second on); this kernel does
        # (tests/runtime/test_runtime_step_graph.py).
        log_sum_exp = torch.logsumexp(logits, dim=-1, keepdim=True)                      # (c, 1)
        probabilities = torch.exp(logits - log_sum_exp)                                  # (c, V)
    target_logits = logits.gather(1, targets[:, None])                                   # (c, 1)
    loss_sum = ((log_sum_exp - target_logits).squeeze(1) * counted).sum()
    is_target = torch.arange(logits.shape[1], device=logits.device) == targets[:, None]  # (c, V)
    gradient = torch.where(is_target, probabilities - 1.0, probabilities) * row_scale[:, None]
    return loss_sum, gradient.to(gradient_dtype)


# Whether the fused loss runs its per-chunk steps through torch.compile on CUDA (Triton kernels:
# the (c, V) logits are read twice and the gradient written once, instead of ~a dozen passes of
# eager elementwise kernels). Off: the same functions, eager. The CPU always runs them eager.
COMPILE_LOSS_CHUNKS = True


@functools.lru_cache(maxsize=None)
def _compiled(function):
    return torch.compile(function, fullgraph=True)


def _chunk_step(function, device: torch.device):
    """`function` compiled for CUDA when COMPILE_LOSS_CHUNKS (and Triton is importable), else as is.
    The function is looked up by the caller at call time, so a patched kernel is compiled too."""
    if COMPILE_LOSS_CHUNKS and device.type == "cuda" and _triton_available():
        return _compiled(function)
    return function


@functools.lru_cache(maxsize=None)
def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _fused_loss_and_gradients(flat_hidden: torch.Tensor, weight: torch.Tensor, flat_targets: torch.Tensor,
                              chunk_tokens: int, compute_dtype: torch.dtype, *, grad_hidden: bool,
                              grad_weight: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """mean CE of (N, C) hidden states under the (V, C) head, and, when asked, its gradients
    with respect to both, one chunk of rows at a time (Liger-style: gradients in the forward).

    Per chunk: logits = h_c W^T in the compute dtype (as transformers and Liger compute them
    under bf16 autocast: half the bytes an fp32 result writes and the two passes below read, the
    step's largest elementwise traffic), log-sum-exp and target logit in fp32, then d loss / d logits = (softmax - onehot) * counted / num_counted in fp32,
    cast to the compute dtype for the two gradient products: d hidden rows = g W, and
    d weight += g^T h_c into ONE buffer (the first chunk's product writes it). The per-chunk elementwise work is
    chunk_loss_and_logit_gradient (chunk_loss_sum under no_grad), compiled on CUDA. The weight gradient sums over every token, so that buffer is fp32 (fp64 for an fp64 weight)
    whatever the compute dtype: adding 20-odd chunk products in bf16 would round the running
    sum to 8 bits at every chunk. No host synchronisation: the token count stays a tensor."""
    tokens = flat_hidden.shape[0]
    device = flat_hidden.device
    statistics_dtype = torch.promote_types(compute_dtype, torch.float32)
    counted = (flat_targets != IGNORE_INDEX).to(statistics_dtype)             # (N,): 1 scored, 0 padding
    num_counted = counted.sum().clamp(min=1)
    row_scale = counted / num_counted                                         # (N,): 1/n, 0 for padding
    safe_targets = flat_targets.clamp(min=0)                                  # (N,): gather needs ids
    head = weight.to(compute_dtype)                                           # (V, C)
    total = torch.zeros((), dtype=statistics_dtype, device=device)
    hidden_gradient = weight_gradient = None
    if grad_hidden:
        hidden_gradient = torch.empty(flat_hidden.shape, device=device,
                                      dtype=torch.promote_types(flat_hidden.dtype, torch.float32))
    if grad_weight:
        weight_gradient = torch.empty(weight.shape, device=device,
                                      dtype=torch.promote_types(weight.dtype, torch.float32))
    with torch.autocast(device_type=device.type, enabled=False):
        for start in range(0, tokens, chunk_tokens):
            stop = min(start + chunk_tokens, tokens)
            chunk_hidden = flat_hidden[start:stop].to(compute_dtype)                      # (c, C)
            logits = chunk_hidden @ head.t()                                              # (c, V)
            rows = (safe_targets[start:stop], counted[start:stop])
            if not (grad_hidden or grad_weight):
                total += _chunk_step(chunk_loss_sum, device)(logits, *rows)
                continue
            loss_sum, grad_logits = _chunk_step(chunk_loss_and_logit_gradient, device)(
                logits, *rows, row_scale[start:stop], compute_dtype)                      # (c, V)
            total += loss_sum
            del logits   # the (c, V) logits are dead once the gradient is out: free them first
            if grad_hidden:
                hidden_gradient[start:stop] = _matmul_into(hidden_gradient.dtype, grad_logits, head)
            if grad_weight:
                _accumulate_product(weight_gradient, grad_logits.t(), chunk_hidden, first=start == 0)
    return total / num_counted, hidden_gradient, weight_gradient


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """mean CE(hidden @ weight^T, targets) whose forward already computed the gradients
    (_fused_loss_and_gradients); backward only scales them by the incoming gradient. Nothing
    of size N x V is ever held: at most one chunk of logits, and the two gradient buffers."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk_tokens, compute_dtype, grad_hidden, grad_weight):
        loss, hidden_gradient, weight_gradient = _fused_loss_and_gradients(
            hidden.reshape(-1, hidden.shape[-1]), weight, targets.reshape(-1), chunk_tokens, compute_dtype,
            grad_hidden=grad_hidden, grad_weight=grad_weight)
        ctx.hidden_shape, ctx.hidden_dtype, ctx.weight_dtype = hidden.shape, hidden.dtype, weight.dtype
        ctx.gradients = (hidden_gradient, weight_gradient)
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss):
        if ctx.gradients is None:
            raise RuntimeError("the fused linear cross-entropy was differentiated twice; its gradients are "
                               "computed once, in the forward (do not backward through it with retain_graph)")
        hidden_gradient, weight_gradient = ctx.gradients
        ctx.gradients = None   # the buffers are scaled in place below: a second backward would be wrong
        scale = grad_loss.to(torch.float32 if hidden_gradient is None else hidden_gradient.dtype)
        if hidden_gradient is not None:
            hidden_gradient = hidden_gradient.mul_(scale).to(ctx.hidden_dtype).reshape(ctx.hidden_shape)
        if weight_gradient is not None:
            weight_gradient = weight_gradient.mul_(scale.to(weight_gradient.dtype)).to(ctx.weight_dtype)
        return hidden_gradient, weight_gradient, None, None, None, None, None


def chunked_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                                 chunk_tokens: int | None = None,
                                 compute_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Fused output head + cross-entropy for the fast path.

    hidden: (..., C) final-norm output; weight: (V, C) output head (the embedding itself when
    tied: autograd adds this gradient to the embedding's); targets: (...) with IGNORE_INDEX for
    padding; the mean is over non-ignored targets (0, with zero gradients, when there are none).
    Matmuls run in `compute_dtype`, softmax statistics and gradient accumulation in fp32. When
    autograd will want gradients, they are computed in the same pass over the chunks (no
    second pass recomputing the logits); under no_grad only the loss is.
    """
    if chunk_tokens is None:
        chunk_tokens = default_loss_chunk_tokens(weight.shape[0])
    chunk_tokens = int(chunk_tokens)
    if chunk_tokens <= 0:
        raise ValueError(f"chunk_tokens must be positive, got {chunk_tokens}")
    recording = torch.is_grad_enabled()
    grad_hidden, grad_weight = recording and hidden.requires_grad, recording and weight.requires_grad
    if not (grad_hidden or grad_weight):
        loss, _, _ = _fused_loss_and_gradients(hidden.reshape(-1, hidden.shape[-1]), weight, targets.reshape(-1),
                                               chunk_tokens, compute_dtype, grad_hidden=False, grad_weight=False)
        return loss
    return _FusedLinearCrossEntropy.apply(hidden, weight, targets, chunk_tokens, compute_dtype,
                                          grad_hidden, grad_weight)


# ---- next-token choice -------------------------------------------------------------------------

def greedy_pick(logits: torch.Tensor) -> torch.Tensor:
    """Most likely token per row: (B, V) -> (B,)."""
    return torch.argmax(logits, dim=-1)


def sample_pick(logits: torch.Tensor, temperature: float, generator: torch.Generator,
                top_k: int | None = None) -> torch.Tensor:
    """Draw one token per row from softmax(logits / temperature), optionally among the top k."""
    scaled = logits.float() / temperature                                     # (B, V)
    if top_k is not None and top_k < scaled.shape[-1]:
        kth_best = torch.topk(scaled, top_k, dim=-1).values[:, -1:]           # (B, 1)
        scaled = scaled.masked_fill(scaled < kth_best, float("-inf"))
    probabilities = softmax_reference(scaled)
    return torch.multinomial(probabilities, num_samples=1, generator=generator).squeeze(-1)


def pick_next_token(logits: torch.Tensor, temperature: float, generator: torch.Generator | None,
                    top_k: int | None = None) -> torch.Tensor:
    """Temperature 0 means greedy, exactly; anything else samples."""
    if temperature == 0:
        return greedy_pick(logits)
    return sample_pick(logits, temperature, generator, top_k)
