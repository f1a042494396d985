"""A pre-norm GPT decoder with two execution paths over one set of weights.

- "reference": separate Q/K/V projections and attention written out (softmax of masked scores),
  float32 — slow and obvious.
- "fast": one fused QKV matmul and torch's scaled_dot_product_attention (flash/memory-efficient
  kernels on a GPU), under bf16 autocast on CUDA.

Both paths must compute the same function; the fast one is what trains on a GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

IGNORE_INDEX = -100  # labels with this value are not scored (padding), as in Hugging Face


@dataclass
class GPTConfig:
    vocab_size: int = 64
    max_seq_len: int = 64
    n_layer: int = 2
    n_head: int = 2
    d_model: int = 32
    qkv_bias: bool = True
    positions: str = "rotary"  # "rotary" or "learned"
    rope_theta: float = 10000.0
    tie_embeddings: bool = True


def rotary(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate (B, H, T, D) channel pairs (i, i + D/2) by position-dependent angles (RoFormer)."""
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = torch.arange(x.shape[-2], device=x.device, dtype=torch.float32)[:, None] * freqs
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def fused_qkv(x: torch.Tensor, attn: "Attention") -> torch.Tensor:
    """Q, K and V in one matmul: the three weights (and biases) concatenated."""
    weight = torch.cat([attn.q.weight, attn.k.weight, attn.v.weight])
    bias = torch.cat([attn.q.bias, attn.k.bias, attn.v.bias]) if attn.q.bias is not None else None
    return F.linear(x, weight, bias)


def fast_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.q = nn.Linear(d, d, bias=cfg.qkv_bias)
        self.k = nn.Linear(d, d, bias=cfg.qkv_bias)
        self.v = nn.Linear(d, d, bias=cfg.qkv_bias)
        self.o = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor, fast: bool) -> torch.Tensor:
        B, T, C = x.shape
        H = self.cfg.n_head
        if fast:
            q, k, v = fused_qkv(x, self).split(C, dim=-1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        if self.cfg.positions == "rotary":
            q, k = rotary(q, self.cfg.rope_theta), rotary(k, self.cfg.rope_theta)
        if fast:
            y = fast_attention(q, k, v)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(C // H)
            y = scores.masked_fill(future_keys(T, x.device), float("-inf")).softmax(dim=-1) @ v
        return self.o(merge_heads(y))


def merge_heads(y: torch.Tensor) -> torch.Tensor:
    """(B, H, T, D) attention outputs -> (B, T, H * D), each position's heads side by side."""
    B, H, T, D = y.shape
    return y.transpose(1, 2).reshape(B, T, H * D)


def output_head(model: "GPT", h: torch.Tensor) -> torch.Tensor:
    """(B, T, d_model) final hidden states -> (B, T, V) logits (the head, tied to the embedding
    when the config says so)."""
    return model.head(h)


def future_keys(length: int, device: torch.device) -> torch.Tensor:
    """(T, T) True where key j lies after query i: what the reference path's attention masks."""
    return torch.ones(length, length, dtype=torch.bool, device=device).triu(1)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(), nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x: torch.Tensor, fast: bool) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), fast)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.fast = False  # the execution path: set_path("fast") for the fused kernels
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_seq_len, cfg.d_model) if cfg.positions == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.weight

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def set_path(self, path: str) -> "GPT":
        if path not in ("reference", "fast"):
            raise ValueError(f"unknown path {path!r}: reference or fast")
        self.fast = path == "fast"
        return self

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) in float32 for token ids (B, T)."""
        if ids.shape[1] > self.cfg.max_seq_len:
            raise ValueError(f"sequence of {ids.shape[1]} tokens is longer than max_seq_len {self.cfg.max_seq_len}")
        autocast = self.fast and ids.device.type == "cuda"
        with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=autocast):
            x = self.embed(ids)
            if self.pos is not None:
                x = x + self.pos(torch.arange(ids.shape[1], device=ids.device))
            for block in self.blocks:
                x = block(x, self.fast)
            return output_head(self, self.ln_f(x)).float()

    def loss(self, ids: torch.Tensor, labels: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        """Next-token cross-entropy: position t predicts labels[t + 1]; IGNORE_INDEX is not scored."""
        logits = self(ids)[:, :-1]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                               ignore_index=IGNORE_INDEX, reduction=reduction)
