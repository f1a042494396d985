"""Model configuration for the decoder-only family (Qwen2 and Llama) and its Hugging Face form.

`ModelConfig` is the runtime's own, validated view of an architecture. It converts to and from
the `config.json` that transformers writes, so a checkpoint directory is equally readable by
both. Conversion refuses anything the runtime would silently compute differently from
transformers (scaled RoPE, sliding-window attention, a non-SiLU activation) instead of
approximating it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError, UnsupportedArchitectureError

SUPPORTED_MODEL_TYPES = ("qwen2", "llama")
ARCHITECTURE_BY_MODEL_TYPE = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}

# model_type values of well-known encoder / encoder-decoder families. They get a more helpful
# message than "unknown model_type": the runtime is a causal LM trainer and cannot run them at all.
ENCODER_MODEL_TYPES = frozenset(
    {"bert", "roberta", "xlm-roberta", "distilbert", "albert", "electra", "deberta",
     "deberta-v2", "mpnet", "camembert", "ernie", "modernbert", "t5", "mt5", "bart", "mbart",
     "whisper", "vit", "clip"}
)


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int
    rope_theta: float
    rms_norm_eps: float
    tie_word_embeddings: bool
    head_dim: int | None = None          # None: hidden_size // num_attention_heads
    qkv_bias: bool = False               # Qwen2: always True. Llama: config.attention_bias
    o_proj_bias: bool = False            # Llama with attention_bias=True only
    mlp_bias: bool = False               # Llama with mlp_bias=True only
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    initializer_range: float = 0.02

    def __post_init__(self) -> None:
        self.validate()

    # ---- derived sizes -------------------------------------------------------------------
    @property
    def attention_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    @property
    def kv_groups(self) -> int:
        """How many query heads share one key/value head (grouped-query attention)."""
        return self.num_attention_heads // self.num_key_value_heads

    def num_parameters(self) -> int:
        """Number of distinct parameters (a tied head is counted once), from the shapes alone."""
        return sum(math.prod(shape) for shape in self.tensor_shapes().values())

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor a checkpoint of this config holds, by its Hugging Face name, in file order.

        A tied output head is absent: it *is* `model.embed_tokens.weight`.
        """
        hidden, heads, kv_heads = self.hidden_size, self.num_attention_heads, self.num_key_value_heads
        head_dim, inner = self.attention_head_dim, self.intermediate_size
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (self.vocab_size, hidden)}
        for i in range(self.num_hidden_layers):
            layer = f"model.layers.{i}"
            shapes[f"{layer}.input_layernorm.weight"] = (hidden,)
            for name, out_features in (("q_proj", heads * head_dim), ("k_proj", kv_heads * head_dim),
                                       ("v_proj", kv_heads * head_dim)):
                shapes[f"{layer}.self_attn.{name}.weight"] = (out_features, hidden)
                if self.qkv_bias:
                    shapes[f"{layer}.self_attn.{name}.bias"] = (out_features,)
            shapes[f"{layer}.self_attn.o_proj.weight"] = (hidden, heads * head_dim)
            if self.o_proj_bias:
                shapes[f"{layer}.self_attn.o_proj.bias"] = (hidden,)
            shapes[f"{layer}.post_attention_layernorm.weight"] = (hidden,)
            for name, shape in (("gate_proj", (inner, hidden)), ("up_proj", (inner, hidden)),
                                ("down_proj", (hidden, inner))):
                shapes[f"{layer}.mlp.{name}.weight"] = shape
                if self.mlp_bias:
                    shapes[f"{layer}.mlp.{name}.bias"] = (shape[0],)
        shapes["model.norm.weight"] = (hidden,)
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = (self.vocab_size, hidden)
        return shapes

    # ---- validation ----------------------------------------------------------------------
    def validate(self) -> None:
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(f"model_type {self.model_type!r} is not one of {SUPPORTED_MODEL_TYPES}")
        for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads", "num_key_value_heads", "max_position_embeddings"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{key} must be a positive integer, got {value!r}")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                f"{self.num_attention_heads} (and no head_dim is given)")
        if self.head_dim is not None and (isinstance(self.head_dim, bool) or not isinstance(self.head_dim, int)
                                          or self.head_dim <= 0):
            raise ConfigError(f"head_dim must be a positive integer, got {self.head_dim!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}")
        if self.attention_head_dim % 2:
            raise ConfigError(f"head dimension {self.attention_head_dim} must be even for rotary embeddings")
        if not (isinstance(self.rope_theta, (int, float)) and self.rope_theta > 1):
            raise ConfigError(f"rope_theta must be a number > 1, got {self.rope_theta!r}")
        if not (isinstance(self.rms_norm_eps, (int, float)) and 0 < self.rms_norm_eps < 1):
            raise ConfigError(f"rms_norm_eps must be in (0, 1), got {self.rms_norm_eps!r}")
        for key in ("bos_token_id", "eos_token_id"):
            value = getattr(self, key)
            if value is not None and not (isinstance(value, int) and 0 <= value < self.vocab_size):
                raise ConfigError(f"{key} {value!r} is outside the vocabulary [0, {self.vocab_size})")
        if self.model_type == "qwen2" and (not self.qkv_bias or self.o_proj_bias or self.mlp_bias):
            raise ConfigError("qwen2 has Q/K/V biases and no o_proj/MLP biases; got "
                              f"qkv_bias={self.qkv_bias} o_proj_bias={self.o_proj_bias} mlp_bias={self.mlp_bias}")
        if self.model_type == "llama" and self.qkv_bias != self.o_proj_bias:
            raise ConfigError("llama's attention_bias applies to q/k/v and o_proj alike; "
                              f"got qkv_bias={self.qkv_bias} o_proj_bias={self.o_proj_bias}")

    def replace(self, **changes: Any) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    # ---- Hugging Face config.json ----------------------------------------------------------
    def to_hf_dict(self) -> dict[str, Any]:
        """The config.json transformers needs to open this model as Qwen2/LlamaForCausalLM."""
        hf: dict[str, Any] = {
            "architectures": [ARCHITECTURE_BY_MODEL_TYPE[self.model_type]],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.attention_head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            # Both spellings: transformers >= 5 reads rope_parameters, older releases rope_theta.
            "rope_theta": float(self.rope_theta),
            "rope_parameters": {"rope_type": "default", "rope_theta": float(self.rope_theta)},
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_dropout": 0.0,
            "initializer_range": self.initializer_range,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "use_cache": True,
            "dtype": "float32",
        }
        if self.model_type == "qwen2":
            hf.update(use_sliding_window=False, sliding_window=None,
                      max_window_layers=self.num_hidden_layers)
        else:
            hf.update(attention_bias=self.qkv_bias, mlp_bias=self.mlp_bias, pretraining_tp=1)
        return hf

    @classmethod
    def from_hf_dict(cls, hf: dict[str, Any], *, source: str = "config") -> "ModelConfig":
        """Read a transformers config dict. `source` (usually the file path) prefixes every error."""
        if not isinstance(hf, dict):
            raise ConfigError(f"{source}: expected a JSON object, got {type(hf).__name__}")
        model_type = hf.get("model_type")
        architectures = hf.get("architectures") or []
        if model_type in ENCODER_MODEL_TYPES or any(_is_encoder_architecture(a) for a in architectures):
            raise UnsupportedArchitectureError(
                f"{source}: model_type {model_type!r} / architectures {architectures} is an encoder "
                "(or encoder-decoder) model; this runtime runs decoder-only causal LMs: "
                f"{', '.join(SUPPORTED_MODEL_TYPES)}")
        if model_type is None:
            raise ConfigError(f"{source}: no 'model_type' key; expected one of {SUPPORTED_MODEL_TYPES}")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(f"{source}: unknown model_type {model_type!r}; "
                              f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
        expected_architecture = ARCHITECTURE_BY_MODEL_TYPE[model_type]
        for architecture in architectures:
            if architecture != expected_architecture:
                raise UnsupportedArchitectureError(
                    f"{source}: architectures lists {architecture!r}; for model_type {model_type!r} "
                    f"this runtime implements only {expected_architecture}")

        def required(key: str) -> Any:
            if key not in hf or hf[key] is None:
                raise ConfigError(f"{source}: missing required key {key!r}")
            return hf[key]

        activation = hf.get("hidden_act", "silu")
        if activation != "silu":
            raise UnsupportedArchitectureError(f"{source}: hidden_act {activation!r} is not supported (only 'silu')")
        rope_theta = _read_rope_theta(hf, source)
        if hf.get("use_sliding_window") or "sliding_attention" in (hf.get("layer_types") or []):
            raise UnsupportedArchitectureError(f"{source}: sliding-window attention is not supported")
        if model_type == "llama" and hf.get("pretraining_tp", 1) not in (1, None):
            raise UnsupportedArchitectureError(f"{source}: pretraining_tp {hf['pretraining_tp']} is not supported")

        if model_type == "qwen2":
            qkv_bias, o_proj_bias, mlp_bias = True, False, False
        else:
            qkv_bias = o_proj_bias = bool(hf.get("attention_bias", False))
            mlp_bias = bool(hf.get("mlp_bias", False))

        num_heads = required("num_attention_heads")
        try:
            return cls(
                model_type=model_type,
                vocab_size=required("vocab_size"),
                hidden_size=required("hidden_size"),
                intermediate_size=required("intermediate_size"),
                num_hidden_layers=required("num_hidden_layers"),
                num_attention_heads=num_heads,
                num_key_value_heads=hf.get("num_key_value_heads") or num_heads,
                head_dim=hf.get("head_dim"),
                max_position_embeddings=required("max_position_embeddings"),
                rope_theta=rope_theta,
                rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
                # Qwen2Config and LlamaConfig both default to an untied head when the key is absent.
                tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
                qkv_bias=qkv_bias,
                o_proj_bias=o_proj_bias,
                mlp_bias=mlp_bias,
                bos_token_id=_single_token_id(hf.get("bos_token_id")),
                eos_token_id=_single_token_id(hf.get("eos_token_id")),
                initializer_range=hf.get("initializer_range", 0.02),
            )
        except ConfigError as error:
            raise type(error)(f"{source}: {error}") from None

    @classmethod
    def from_json_file(cls, path: Path | str) -> "ModelConfig":
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{path}: config file not found") from None
        except OSError as error:
            raise ConfigError(f"{path}: cannot read config: {error.strerror}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{path}: not valid JSON ({error.msg} at line {error.lineno})") from None
        return cls.from_hf_dict(data, source=str(path))


def _is_encoder_architecture(architecture: str) -> bool:
    return any(architecture.startswith(prefix) for prefix in
               ("Bert", "Roberta", "XLMRoberta", "DistilBert", "Albert", "Electra", "Deberta",
                "MPNet", "ModernBert", "T5", "MT5", "Bart", "MBart", "Whisper", "ViT", "CLIP"))


def _read_rope_theta(hf: dict[str, Any], source: str) -> float:
    parameters = hf.get("rope_parameters")
    legacy_scaling = hf.get("rope_scaling")
    if legacy_scaling:
        raise UnsupportedArchitectureError(f"{source}: rope_scaling {legacy_scaling} is not supported")
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise ConfigError(f"{source}: rope_parameters must be an object, got {parameters!r}")
        rope_type = parameters.get("rope_type", "default")
        if rope_type != "default":
            raise UnsupportedArchitectureError(f"{source}: rope_type {rope_type!r} is not supported (only 'default')")
        theta = parameters.get("rope_theta", hf.get("rope_theta", 10000.0))
        if "rope_theta" in hf and hf["rope_theta"] != theta:
            raise ConfigError(f"{source}: rope_theta {hf['rope_theta']} disagrees with "
                              f"rope_parameters.rope_theta {theta}")
        return theta
    return hf.get("rope_theta", 10000.0)


def _single_token_id(value: Any) -> int | None:
    # Some configs list several end-of-sequence ids; the runtime stops on the first.
    if isinstance(value, list):
        return value[0] if value else None
    return value


# ---- presets ---------------------------------------------------------------------------------

PRESETS: dict[str, ModelConfig] = {
    # Small enough to train to a useful loss on two CPU cores in about a minute.
    "tiny": ModelConfig(
        model_type="qwen2", vocab_size=512, hidden_size=64, intermediate_size=192,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=True, qkv_bias=True, bos_token_id=0, eos_token_id=0),
    # The shapes of Qwen/Qwen2-0.5B (494M parameters, 290 tensors).
    "qwen2-0.5b": ModelConfig(
        model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
        num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=True, qkv_bias=True, bos_token_id=151643, eos_token_id=151643),
    # A Llama of about 370M parameters: 24 x 1024 with GQA (8 KV heads), untied 32k head.
    # 2*32000*1024 (embed+head) + 24*(3*1024^2 attn + 3*1024*3104 mlp + 2*1024) + 1024 = 369,935,360
    "llama-370m": ModelConfig(
        model_type="llama", vocab_size=32000, hidden_size=1024, intermediate_size=3104,
        num_hidden_layers=24, num_attention_heads=16, num_key_value_heads=8,
        max_position_embeddings=2048, rope_theta=10000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
}


def preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; available: {', '.join(PRESETS)}") from None
