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
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(device=positions.device, dtype=torch.float32)
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
    """Tokens per chunk so that one chunk's fp32 logits stay near 128 MiB."""
    return max(16, (32 * 1024 * 1024) // vocab_size)


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """mean CE(hidden @ weight^T, targets), holding at most `chunk` tokens' logits at a time.

    Forward keeps only each token's log-sum-exp (N floats); backward recomputes each chunk's
    logits and turns them into d loss / d logits = softmax - onehot on the fly.
    """

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk_tokens, compute_dtype):
        flat_hidden = hidden.reshape(-1, hidden.shape[-1])                    # (N, C)
        flat_targets = targets.reshape(-1)                                    # (N,)
        counted = flat_targets != IGNORE_INDEX
        num_counted = counted.sum().clamp(min=1)
        log_sum_exp = torch.empty(flat_hidden.shape[0], dtype=torch.float32, device=hidden.device)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        head = weight.to(compute_dtype)
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            for start in range(0, flat_hidden.shape[0], chunk_tokens):
                stop = start + chunk_tokens
                logits = (flat_hidden[start:stop].to(compute_dtype) @ head.t()).float()  # (chunk, V)
                chunk_lse = torch.logsumexp(logits, dim=-1)                              # (chunk,)
                chunk_targets = flat_targets[start:stop].clamp(min=0)
                target_logits = logits.gather(1, chunk_targets[:, None]).squeeze(1)
                total += ((chunk_lse - target_logits) * counted[start:stop]).sum()
                log_sum_exp[start:stop] = chunk_lse
        ctx.save_for_backward(hidden, weight, targets, log_sum_exp, num_counted)
        ctx.chunk_tokens, ctx.compute_dtype = chunk_tokens, compute_dtype
        return total / num_counted

    @staticmethod
    def backward(ctx, grad_loss):
        hidden, weight, targets, log_sum_exp, num_counted = ctx.saved_tensors
        flat_hidden = hidden.reshape(-1, hidden.shape[-1])                    # (N, C)
        flat_targets = targets.reshape(-1)
        counted = (flat_targets != IGNORE_INDEX).float()
        scale = grad_loss.float() / num_counted
        head = weight.to(ctx.compute_dtype)
        grad_hidden = torch.zeros(flat_hidden.shape, dtype=torch.float32, device=hidden.device)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            for start in range(0, flat_hidden.shape[0], ctx.chunk_tokens):
                stop = start + ctx.chunk_tokens
                chunk_hidden = flat_hidden[start:stop].to(ctx.compute_dtype)             # (chunk, C)
                logits = (chunk_hidden @ head.t()).float()                                # (chunk, V)
                grad_logits = torch.exp(logits - log_sum_exp[start:stop, None])           # softmax
                rows = torch.arange(grad_logits.shape[0], device=grad_logits.device)
                grad_logits[rows, flat_targets[start:stop].clamp(min=0)] -= 1.0           # - onehot
                grad_logits *= (counted[start:stop] * scale)[:, None]
                grad_logits = grad_logits.to(ctx.compute_dtype)
                grad_hidden[start:stop] = (grad_logits @ head).float()                    # (chunk, C)
                grad_weight += (grad_logits.t() @ chunk_hidden).float()                   # (V, C)
        return (grad_hidden.to(hidden.dtype).reshape(hidden.shape), grad_weight.to(weight.dtype),
                None, None, None)


def chunked_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                                 chunk_tokens: int | None = None,
                                 compute_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Fused output head + cross-entropy for the fast path.

    hidden: (..., C) final-norm output; weight: (V, C) output head; targets: (...) with
    IGNORE_INDEX for padding. Matmuls run in `compute_dtype`, softmax statistics in fp32.
    """
    if chunk_tokens is None:
        chunk_tokens = default_loss_chunk_tokens(weight.shape[0])
    return _ChunkedLinearCrossEntropy.apply(hidden, weight, targets, int(chunk_tokens), compute_dtype)


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
