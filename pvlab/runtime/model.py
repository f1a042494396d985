"""The decoder-only transformer behind Qwen2 and Llama, in one file, top to bottom.

    token ids -> embed_tokens -> [ x + attn(norm(x)) ; x + mlp(norm(x)) ] * L -> norm -> lm_head

Module names follow Hugging Face so that `state_dict()` keys are exactly the tensor names in a
transformers `model.safetensors` (`model.layers.3.self_attn.q_proj.bias`, ...), and so that
forward hooks on `embed_tokens`, `input_layernorm`, `self_attn.q_proj`, `self_attn`, `mlp`,
`model.norm` and `lm_head` see the activations a bisecting tool wants to compare.

Every numerical step is a call into `kernels` (looked up at call time, so it can be patched).
Each module that has two implementations carries `path` ("reference" or "fast"), set for the
whole tree by `CausalLM.set_path`; the fast path's SDPA backend is set by
`CausalLM.set_attention_backend`, and `CausalLM.set_fused_projections` makes the fast path
compute Q/K/V and gate/up as one product each (the parameters stay HF's separate tensors).

Batches of unequal sequences come in two layouts (`attention_layout` below): left-padded rows
with an `attention_mask` (batched generation) and packed rows with `document_ids` (training on
whole documents). Both give per-row positions and a boolean attention mask; a plain batch
uses neither (positions 0..T-1 after the cache, the causal mask).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import kernels
from .config import ModelConfig
from .errors import ArgumentError, DeviceError

EXECUTION_PATHS = ("reference", "fast")


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels.rms_norm(x, self.weight, self.eps)


class Linear(nn.Module):
    """nn.Linear's parameters (`weight` (out, in), optional `bias` (out,)) with the product routed
    through the kernel of the current execution path."""

    def __init__(self, in_features: int, out_features: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        self.path = "reference"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.path == "fast":
            return kernels.linear_fast(x, self.weight, self.bias)
        return kernels.linear_reference(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in={self.weight.shape[1]}, out={self.weight.shape[0]}, bias={self.bias is not None}"


class Embedding(nn.Module):
    """Token id -> row of `weight` (V, C). Like nn.Embedding, minus its eager random init:
    weights come from a checkpoint or from init_weights, never from construction."""

    def __init__(self, num_embeddings: int, embedding_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.weight)                                       # (B, T, C)


class KVCache:
    """Keys and values of every layer for the positions already processed.

    Each entry is (B, KV, S, D) with RoPE already applied to the keys; a new step appends
    along S. `length` is the number of cached positions, i.e. the position of the next token.
    """

    def __init__(self, num_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    @property
    def length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[-2]

    def update(self, layer_index: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this step's (B, KV, T, D) keys/values; return all of them, (B, KV, S, D)."""
        if self.keys[layer_index] is not None:
            k = torch.cat((self.keys[layer_index], k), dim=-2)
            v = torch.cat((self.values[layer_index], v), dim=-2)
        self.keys[layer_index], self.values[layer_index] = k, v
        return k, v


class Attention(nn.Module):
    """Multi-head causal self-attention with grouped-query K/V heads and rotary positions."""

    def __init__(self, config: ModelConfig, layer_index: int):
        super().__init__()
        self.layer_index = layer_index
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.attention_head_dim
        hidden = config.hidden_size
        self.q_proj = Linear(hidden, self.num_heads * self.head_dim, bias=config.qkv_bias)
        self.k_proj = Linear(hidden, self.num_kv_heads * self.head_dim, bias=config.qkv_bias)
        self.v_proj = Linear(hidden, self.num_kv_heads * self.head_dim, bias=config.qkv_bias)
        self.o_proj = Linear(self.num_heads * self.head_dim, hidden, bias=config.o_proj_bias)
        self.path = "reference"
        self.attention_backend: str | None = None  # fast path: the SDPA kernel (None: torch's choice)
        self.fused_projections = False  # fast path: Q, K and V as one product (set_fused_projections)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cache: KVCache | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        batch, seq, _ = x.shape                                                          # x: (B, T, C)
        if self.path == "fast" and self.fused_projections:
            q, k, v = kernels.fused_linear_fast(x, [self.q_proj.weight, self.k_proj.weight, self.v_proj.weight],
                                                [self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)                     # (B, T, H*D / KV*D)
        q = q.view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)           # (B, H, T, D)
        k = k.view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)        # (B, KV, T, D)
        v = v.view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)        # (B, KV, T, D)
        q = kernels.apply_rope(q, cos, sin)
        k = kernels.apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(self.layer_index, k, v)                                  # (B, KV, S, D)
        if self.path == "fast":
            y = self._attend_fast(q, k, v, mask)                                         # (B, H, T, D)
        elif mask is None:
            y = kernels.attention_reference(q, k, v)                                     # (B, H, T, D)
        else:
            y = kernels.attention_reference(q, k, v, mask)                               # (B, H, T, D)
        y = y.transpose(1, 2).reshape(batch, seq, self.num_heads * self.head_dim)        # (B, T, H*D)
        return self.o_proj(y)                                                            # (B, T, C)

    def _attend_fast(self, q, k, v, mask):
        backend = self.attention_backend
        if backend == "efficient" and k.shape[1] != q.shape[1]:
            # The memory-efficient kernel takes no grouped-query K/V (math, flash and cuDNN do;
            # seen on an H100, torch 2.11): share the KV heads explicitly.
            groups = q.shape[1] // k.shape[1]
            k, v = kernels.repeat_kv(k, groups), kernels.repeat_kv(v, groups)           # (B, H, S, D)
        try:
            with kernels.sdpa_backend(backend):
                # The three-argument call is the plain causal case; planted bugs patch it as such.
                return kernels.attention_fast(q, k, v) if mask is None else kernels.attention_fast(q, k, v, mask)
        except RuntimeError as error:
            if backend is None:
                raise
            raise DeviceError(f"attention backend {backend!r} cannot run this attention on {q.device.type} "
                              f"({q.dtype}, {'masked' if mask is not None else 'causal'}): {error}") from None


class MLP(nn.Module):
    """SwiGLU feed-forward: down(SiLU(gate(x)) * up(x))."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        hidden, inner = config.hidden_size, config.intermediate_size
        self.gate_proj = Linear(hidden, inner, bias=config.mlp_bias)
        self.up_proj = Linear(hidden, inner, bias=config.mlp_bias)
        self.down_proj = Linear(inner, hidden, bias=config.mlp_bias)
        self.path = "reference"
        self.fused_projections = False  # fast path: gate and up as one product (set_fused_projections)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.path == "fast" and self.fused_projections:
            gate, up = kernels.fused_linear_fast(x, [self.gate_proj.weight, self.up_proj.weight],
                                                 [self.gate_proj.bias, self.up_proj.bias])
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)                                # (B, T, I) each
        if self.path == "fast":
            return self.down_proj(kernels.swiglu_fast(gate, up))                         # (B, T, C)
        return self.down_proj(kernels.swiglu_reference(gate, up))                        # (B, T, C)


class DecoderLayer(nn.Module):
    """Pre-norm residual block: attention, then MLP."""

    def __init__(self, config: ModelConfig, layer_index: int):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer_index)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cache: KVCache | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, mask)
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x


def apply_final_norm(norm: RMSNorm, hidden: torch.Tensor) -> torch.Tensor:
    """The RMSNorm between the last layer and the output head. A module-level function so that
    'the final norm is skipped' can be planted (and detected) without touching other norms."""
    return norm(hidden)


class DecoderModel(nn.Module):
    """The transformer body; `CausalLM.model` (HF: Qwen2Model / LlamaModel)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None, *,
                positions: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        """positions (B, T) and mask (B, 1, T, S) come from `attention_layout` for padded or
        packed batches; without them, positions follow the cache and the mask is causal."""
        seq = input_ids.shape[1]                                                         # input_ids: (B, T)
        if positions is None:
            past = cache.length if cache is not None else 0
            positions = kernels.positions_for(past, seq, input_ids.device)               # (T,)
        cos, sin = kernels.rope_cos_sin(self.config.rope_theta, self.config.attention_head_dim, positions)  # (T, D) / (B, T, D)
        x = self.embed_tokens(input_ids)                                                 # (B, T, C)
        for layer in self.layers:
            x = layer(x, cos, sin, cache, mask)                                          # (B, T, C)
        return apply_final_norm(self.norm, x)                                            # (B, T, C)


def attention_layout(input_ids: torch.Tensor, *, attention_mask: torch.Tensor | None = None,
                     document_ids: torch.Tensor | None = None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Per-row positions (B, T) and attention mask (B, 1, T, S) of a batch of unequal sequences.

    * `attention_mask` (B, S), 1 real / 0 padding, covering the cached positions and the T new
      ones (left padding, batched generation): positions count real tokens only
      (kernels.positions_from_attention_mask), and no query attends to padding.
    * `document_ids` (B, T) (packed training rows): positions restart at every document
      (kernels.document_positions), attention is block-diagonal causal.
    * neither: (None, None), the plain causal batch.
    """
    if attention_mask is not None and document_ids is not None:
        raise ArgumentError("give attention_mask (padded batch) or document_ids (packed batch), not both")
    seq = input_ids.shape[1]
    if attention_mask is not None:
        if attention_mask.dim() != 2 or attention_mask.shape[0] != input_ids.shape[0] or attention_mask.shape[1] < seq:
            raise ArgumentError(f"attention_mask must be (batch, cached + new) = ({input_ids.shape[0]}, >= {seq}), "
                                f"got {tuple(attention_mask.shape)}")
        positions = kernels.positions_from_attention_mask(attention_mask)[:, -seq:]     # (B, T)
        return positions, kernels.padded_causal_mask(attention_mask, seq)               # (B, 1, T, S)
    if document_ids is not None:
        if document_ids.shape != input_ids.shape:
            raise ArgumentError(f"document_ids must have the shape of input_ids {tuple(input_ids.shape)}, "
                                f"got {tuple(document_ids.shape)}")
        return kernels.document_positions(document_ids), kernels.document_causal_mask(document_ids)
    return None, None


def tie_output_head(model: "CausalLM") -> None:
    """Make the output head *be* the input embedding (one Parameter, two uses), as checkpoints
    with tie_word_embeddings=true expect; their files hold no lm_head.weight at all."""
    model.lm_head.weight = model.model.embed_tokens.weight


class CausalLM(nn.Module):
    """Decoder + output head. `forward` gives logits; `loss` gives the training objective.

    Construction allocates the parameters without initialising them (a checkpoint is about to
    overwrite them, and random init of 0.5B parameters costs seconds). Build models with
    runtime.init_model(config=..., weights=...) or runtime.load(dir), which always fill every
    parameter (from weights, or from a seed with weights="random").
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = DecoderModel(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            tie_output_head(self)
        self.path = "reference"
        self.loss_chunk_tokens = kernels.default_loss_chunk_tokens(config.vocab_size)
        self.tokenizer = None          # a tokenizers.Tokenizer when the checkpoint carries one
        self.populate_report = None    # checkpoint.PopulateReport: which tensors filled the parameters
        self.parity_report = None      # parity.ParityReport when the parity gate ran at placement
        self.checkpoint_dir = None     # the directory runtime.load read, if any
        self.runtime_meta = {}         # runtime.json of that directory (training recipe and results)

    def set_path(self, path: str) -> "CausalLM":
        if path not in EXECUTION_PATHS:
            raise ArgumentError(f"path must be one of {EXECUTION_PATHS}, got {path!r}")
        for module in self.modules():
            if hasattr(module, "path"):
                module.path = path
        return self

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    def set_attention_backend(self, backend: str | None) -> "CausalLM":
        """Pin the fast path's attention to one SDPA kernel (kernels.ATTENTION_BACKENDS) or give
        the choice back to torch (None). Refused, never ignored: a backend on the reference
        path (which does not use SDPA) or one that this device does not have."""
        if backend is not None:
            if backend not in kernels.ATTENTION_BACKENDS:
                raise ArgumentError(f"attention backend must be one of {kernels.ATTENTION_BACKENDS}, got {backend!r}")
            if self.path != "fast":
                raise ArgumentError(f"attention backend {backend!r} applies to the fast path (SDPA); "
                                    f"this model runs the {self.path} path")
            if not kernels.sdpa_backend_available(backend, self.device):
                raise DeviceError(f"attention backend {backend!r} is not available on {self.device} "
                                  f"(torch {torch.__version__}); on the CPU only 'math' and 'flash' exist")
        for module in self.modules():
            if isinstance(module, Attention):
                module.attention_backend = backend
        return self

    def set_fused_projections(self, fused: bool) -> "CausalLM":
        """On the fast path, compute each layer's Q/K/V and gate/up as one product each
        (kernels.fused_linear_fast) instead of five; off: five. The parameters, their names and
        saved checkpoints are the same either way. While on, the fast path does not call the
        q/k/v/gate/up Linear modules, so forward hooks on them see nothing (hook
        self_attn and mlp instead, or turn this off to compare projections)."""
        for module in self.modules():
            if isinstance(module, (Attention, MLP)):
                module.fused_projections = bool(fused)
        return self

    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None, *,
                attention_mask: torch.Tensor | None = None, document_ids: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids (B, T) -> fp32 logits (B, T, V) for the token after each position. See
        attention_layout for attention_mask (left-padded rows) and document_ids (packed rows)."""
        positions, mask = attention_layout(input_ids, attention_mask=attention_mask, document_ids=document_ids)
        with kernels.autocast_for(self.path, self.device.type):
            hidden = self.model(input_ids, cache, positions=positions, mask=mask)       # (B, T, C)
            logits = self.lm_head(hidden)                                                # (B, T, V)
        return logits.float()

    def loss(self, input_ids: torch.Tensor, targets: torch.Tensor, *,
             document_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Mean next-token cross-entropy; targets (B, T) are the inputs shifted left by one,
        with kernels.IGNORE_INDEX where there is nothing to predict. document_ids (B, T) marks
        the documents of packed rows (see attention_layout)."""
        positions, mask = attention_layout(input_ids, document_ids=document_ids)
        with kernels.autocast_for(self.path, self.device.type):
            hidden = self.model(input_ids, positions=positions, mask=mask)              # (B, T, C)
            if self.path == "fast":
                return kernels.chunked_linear_cross_entropy(
                    hidden, self.lm_head.weight, targets, chunk_tokens=self.loss_chunk_tokens,
                    compute_dtype=torch.bfloat16)
            logits = self.lm_head(hidden)                                                # (B, T, V)
            return kernels.cross_entropy_reference(logits, targets)

    def num_parameters(self) -> int:
        """Distinct parameters: a tied head shares the embedding's storage and counts once."""
        return sum(p.numel() for p in self.parameters())


@torch.no_grad()
def init_weights(model: CausalLM, seed: int) -> None:
    """Random initialisation as transformers does it (normal(0, initializer_range) matrices,
    zero biases, unit norms), drawn on the CPU from `seed` so every device gets the same model."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    std = model.config.initializer_range
    for name, parameter in model.named_parameters():  # a tied head is visited once, as the embedding
        if name.endswith("norm.weight"):
            values = torch.ones(parameter.shape)
        elif name.endswith(".bias"):
            values = torch.zeros(parameter.shape)
        else:
            values = torch.empty(parameter.shape).normal_(0.0, std, generator=generator)
        parameter.copy_(values)
