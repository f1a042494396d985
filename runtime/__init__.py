"""pv's system under test: a torch training runtime for the Qwen2 / Llama decoder family."""

from . import errors, kernels
from .config import PRESETS, ModelConfig, preset
from .model import CausalLM, KVCache

__all__ = ["errors", "kernels", "PRESETS", "ModelConfig", "preset", "CausalLM", "KVCache"]
