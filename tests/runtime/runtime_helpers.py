"""Helpers shared by the runtime's tests (a uniquely named module: `conftest` is ambiguous when
several test directories have one)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from pvlab import runtime
from pvlab.falsifiers.oracle_transformers import spread_parameters
from pvlab.runtime.pretrain import Recipe

# A recipe small enough to train in seconds; its losses mean nothing, its files are real.
SMALL_RECIPE = Recipe(config="tiny", steps=4, batch_size=4, seq_len=32, eval_every=2, eval_batches=2,
                      num_documents=300, warmup_steps=1)


def randomise(model: torch.nn.Module, seed: int = 0) -> None:
    """Weights large enough that logits are O(1-10): a 1e-4 agreement then means something
    (at the default 0.02 init, every logit is ~0 and any two implementations agree)."""
    spread_parameters(model, seed, bias_std=0.5, matrix=lambda noise, parameter: noise / parameter.shape[-1] ** 0.5)


def hf_qwen2_config(**overrides):
    from transformers import Qwen2Config
    values = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)
    values.update(overrides)
    return Qwen2Config(**values)


def hf_llama_config(**overrides):
    from transformers import LlamaConfig
    values = dict(vocab_size=300, hidden_size=64, intermediate_size=112, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=1, head_dim=32, max_position_embeddings=128, rope_theta=500_000.0,
                  rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    values.update(overrides)
    return LlamaConfig(**values)


def write_hf_checkpoint(directory: Path, config, seed: int = 0) -> Path:
    """save_pretrained of a randomised transformers model: a checkpoint the runtime did not write."""
    from transformers import AutoModelForCausalLM
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    randomise(model, seed)
    model.save_pretrained(directory)
    return directory


def tiny_config(**overrides) -> runtime.ModelConfig:
    return dataclasses.replace(runtime.preset("tiny"), **overrides)
