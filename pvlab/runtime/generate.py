"""Autoregressive decoding with a KV cache: greedy (temperature 0) or sampled.

The prompt is processed in one forward that fills the cache; each further step feeds only the
newest token, at position `cache.length` (kernels.positions_for). Incremental decoding produces
the same logits as a full forward over the whole sequence (tests/runtime/test_generate.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from . import kernels
from .errors import ArgumentError, GenerationError, PromptTooLongError
from .model import CausalLM, KVCache


@dataclass
class Generation:
    prompt_ids: list[int]
    new_ids: list[int] = field(default_factory=list)
    stopped_on_eos: bool = False


@torch.no_grad()
def generate(model: CausalLM, prompt_ids: Sequence[int], *, max_new_tokens: int, temperature: float = 0.0,
             top_k: int | None = None, seed: int = 0, eos_token_id: int | None = None,
             use_cache: bool = True) -> Generation:
    """Continue `prompt_ids` by up to `max_new_tokens` tokens, stopping early at `eos_token_id`.

    temperature 0 is greedy (argmax) decoding; > 0 samples from softmax(logits / temperature),
    from a generator seeded with `seed` on the model's device (so the same seed gives the same
    text). use_cache=False recomputes the full sequence each step (for checking the cache).
    """
    prompt = [int(t) for t in prompt_ids]
    context = model.config.max_position_embeddings
    if not prompt:
        raise GenerationError("the prompt is empty: at least one token is needed to condition on")
    if max_new_tokens < 0:
        raise ArgumentError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if temperature < 0:
        raise ArgumentError(f"temperature must be >= 0, got {temperature}")
    if any(not 0 <= t < model.config.vocab_size for t in prompt):
        raise GenerationError(f"prompt holds token ids outside the vocabulary [0, {model.config.vocab_size})")
    if len(prompt) > context:
        raise PromptTooLongError(f"prompt has {len(prompt)} tokens, longer than the model's context of {context}")
    if len(prompt) + max_new_tokens > context:
        raise PromptTooLongError(f"prompt ({len(prompt)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
                                 f"model's context of {context}; ask for at most {context - len(prompt)} new tokens")

    was_training = model.training
    model.eval()
    device = model.device
    generator = torch.Generator(device=device).manual_seed(seed) if temperature > 0 else None
    result = Generation(prompt_ids=prompt)
    cache = KVCache(model.config.num_hidden_layers) if use_cache else None
    sequence = torch.tensor([prompt], dtype=torch.long, device=device)    # (1, T)
    step_input = sequence
    try:
        for _ in range(max_new_tokens):
            logits = model(step_input, cache)                              # (1, T or 1, V)
            next_token = kernels.pick_next_token(logits[:, -1, :], temperature, generator, top_k)  # (1,)
            token = int(next_token.item())
            result.new_ids.append(token)
            if eos_token_id is not None and token == eos_token_id:
                result.stopped_on_eos = True
                break
            sequence = torch.cat((sequence, next_token.view(1, 1)), dim=1)  # (1, T+1)
            step_input = sequence[:, -1:] if use_cache else sequence
    finally:
        model.train(was_training)
    return result


def generate_text(model: CausalLM, tokenizer, prompt: str, *, max_new_tokens: int, temperature: float = 0.0,
                  top_k: int | None = None, seed: int = 0, stop_at_eos: bool = True) -> str:
    """Encode `prompt`, generate, and decode prompt + continuation."""
    if tokenizer is None:
        raise GenerationError("this checkpoint has no tokenizer.json; pass token ids to generate() instead")
    prompt_ids = tokenizer.encode(prompt).ids
    if not prompt_ids:
        raise GenerationError("the prompt is empty")
    eos = model.config.eos_token_id if stop_at_eos else None
    result = generate(model, prompt_ids, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                      seed=seed, eos_token_id=eos)
    new_ids = result.new_ids[:-1] if result.stopped_on_eos else result.new_ids
    return tokenizer.decode(prompt_ids + new_ids)
