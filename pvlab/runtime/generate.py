"""Autoregressive decoding with a KV cache: greedy (temperature 0) or sampled.

The prompt is processed in one forward that fills the cache; each further step feeds only the
newest token, at position `cache.length` (kernels.positions_for). Incremental decoding produces
the same logits as a full forward over the whole sequence (tests/runtime/test_generate.py).

On CUDA, greedy decoding of one sequence goes through the CUDA-graph decoder
(runtime.graph_decode) by default: eager decoding there is launch-bound (~1,500 small kernel
launches per token of the qwen2-0.5b shape, about as fast as the CPU), the replayed graph is one
launch per token. `use_graph=False` keeps the eager loop (to measure it, or to hook the decoder
per step); sampling, `output_logits` and `use_cache=False` always run it.

`generate_batch` decodes several prompts at once: they are left-padded to a common length and
an attention mask (1 real, 0 padding) travels with the cache, so every row gets the positions
and attention it would get alone (model.attention_layout).
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
    logits: torch.Tensor | None = None  # (len(new_ids), V) fp32 on the CPU, with output_logits=True


def _check_request(model: CausalLM, prompt: list[int], max_new_tokens: int, temperature: float) -> None:
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


def takes_graph(device: torch.device, *, temperature: float, use_cache: bool, output_logits: bool,
                use_graph: bool | None) -> bool:
    """Whether generate() decodes through the CUDA-graph decoder: where it applies (a CUDA device,
    greedy, the cache on, no logits kept) unless use_graph is False; use_graph=True where it
    cannot apply is an ArgumentError, never a silent eager run."""
    applies = device.type == "cuda" and temperature == 0 and use_cache and not output_logits
    if use_graph and not applies:
        raise ArgumentError("use_graph=True needs a CUDA device, greedy decoding (temperature 0), the KV cache "
                            "and no output_logits")
    return applies and use_graph is not False


@torch.no_grad()
def generate(model: CausalLM, prompt_ids: Sequence[int], *, max_new_tokens: int, temperature: float = 0.0,
             top_k: int | None = None, seed: int = 0, eos_token_id: int | None = None,
             use_cache: bool = True, output_logits: bool = False, use_graph: bool | None = None) -> Generation:
    """Continue `prompt_ids` by up to `max_new_tokens` tokens, stopping early at `eos_token_id`.

    temperature 0 is greedy (argmax) decoding; > 0 samples from softmax(logits / temperature),
    from a generator seeded with `seed` on the model's device (so the same seed gives the same
    text). use_cache=False recomputes the full sequence each step (for checking the cache).
    output_logits=True keeps each step's next-token logits in `Generation.logits`.
    use_graph: greedy decoding through the CUDA-graph decoder (runtime.graph_decode: the same
    tokens, one launch per token). None: where it applies (a CUDA device, temperature 0, the
    cache on, no logits kept); True: insist (ArgumentError where it cannot); False: never.
    """
    prompt = [int(t) for t in prompt_ids]
    _check_request(model, prompt, max_new_tokens, temperature)
    if takes_graph(model.device, temperature=temperature, use_cache=use_cache, output_logits=output_logits,
                   use_graph=use_graph):
        from . import graph_decode

        result = Generation(prompt_ids=prompt)
        result.new_ids = graph_decode.greedy_generate(model, prompt, max_new_tokens=max_new_tokens,
                                                      eos_token_id=eos_token_id)
        result.stopped_on_eos = eos_token_id is not None and bool(result.new_ids) and result.new_ids[-1] == eos_token_id
        return result

    was_training = model.training
    model.eval()
    device = model.device
    generator = torch.Generator(device=device).manual_seed(seed) if temperature > 0 else None
    result = Generation(prompt_ids=prompt)
    cache = KVCache(model.config.num_hidden_layers) if use_cache else None
    sequence = torch.tensor([prompt], dtype=torch.long, device=device)    # (1, T)
    step_input = sequence
    kept = []
    try:
        for _ in range(max_new_tokens):
            logits = model(step_input, cache)                              # (1, T or 1, V)
            next_token = kernels.pick_next_token(logits[:, -1, :], temperature, generator, top_k)  # (1,)
            if output_logits:
                kept.append(logits[0, -1].detach().to("cpu"))
            token = int(next_token.item())
            result.new_ids.append(token)
            if eos_token_id is not None and token == eos_token_id:
                result.stopped_on_eos = True
                break
            sequence = torch.cat((sequence, next_token.view(1, 1)), dim=1)  # (1, T+1)
            step_input = sequence[:, -1:] if use_cache else sequence
    finally:
        model.train(was_training)
    if output_logits:
        result.logits = torch.stack(kept) if kept else torch.empty(0, model.config.vocab_size)
    return result


@torch.no_grad()
def generate_batch(model: CausalLM, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                   temperature: float = 0.0, top_k: int | None = None, seed: int = 0,
                   eos_token_id: int | None = None, pad_token_id: int = 0,
                   output_logits: bool = False) -> list[Generation]:
    """`generate` for several prompts in one batch, one Generation per prompt, in order.

    Prompts are left-padded with pad_token_id to the longest; the attention mask (B, S) marks
    real tokens and grows by one column per step, so each row's positions count its own tokens
    only and no row attends to padding: greedy decoding gives every row the tokens (and, up to
    rounding, the logits) it gets alone. A row that stopped at eos_token_id keeps being fed
    padding (masked out) until every row has stopped or max_new_tokens is reached.
    """
    rows = [[int(t) for t in prompt] for prompt in prompts]
    if not rows:
        raise GenerationError("no prompts to generate from")
    for prompt in rows:
        _check_request(model, prompt, max_new_tokens, temperature)
    was_training = model.training
    model.eval()
    device = model.device
    generator = torch.Generator(device=device).manual_seed(seed) if temperature > 0 else None
    width = max(len(prompt) for prompt in rows)
    step_input = torch.tensor([[pad_token_id] * (width - len(p)) + p for p in rows], device=device)   # (B, T)
    attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows], device=device)  # (B, T)
    results = [Generation(prompt_ids=prompt) for prompt in rows]
    kept: list[list[torch.Tensor]] = [[] for _ in rows]
    active = [True] * len(rows)
    cache = KVCache(model.config.num_hidden_layers)
    try:
        for _ in range(max_new_tokens):
            logits = model(step_input, cache, attention_mask=attention_mask)    # (B, T or 1, V)
            next_tokens = kernels.pick_next_token(logits[:, -1, :], temperature, generator, top_k)  # (B,)
            for row, token in enumerate(next_tokens.tolist()):
                if not active[row]:
                    continue
                results[row].new_ids.append(int(token))
                if output_logits:
                    kept[row].append(logits[row, -1].detach().to("cpu"))
                if eos_token_id is not None and token == eos_token_id:
                    results[row].stopped_on_eos = True
                    active[row] = False
            if not any(active):
                break
            still = torch.tensor(active, device=device)                                     # (B,)
            step_input = torch.where(still, next_tokens, torch.full_like(next_tokens, pad_token_id))[:, None]  # (B, 1)
            attention_mask = torch.cat((attention_mask, still.long()[:, None]), dim=1)      # (B, S+1)
    finally:
        model.train(was_training)
    if output_logits:
        for result, rows_logits in zip(results, kept):
            result.logits = torch.stack(rows_logits) if rows_logits else torch.empty(0, model.config.vocab_size)
    return results


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


def generate_texts(model: CausalLM, tokenizer, prompts: Sequence[str], *, max_new_tokens: int,
                   temperature: float = 0.0, top_k: int | None = None, seed: int = 0,
                   stop_at_eos: bool = True) -> list[str]:
    """generate_text for several prompts in one left-padded batch (generate_batch)."""
    if tokenizer is None:
        raise GenerationError("this checkpoint has no tokenizer.json; pass token ids to generate_batch() instead")
    encoded = [tokenizer.encode(prompt).ids for prompt in prompts]
    if not encoded or any(not ids for ids in encoded):
        raise GenerationError("every prompt must encode to at least one token")
    eos = model.config.eos_token_id if stop_at_eos else None
    results = generate_batch(model, encoded, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                             seed=seed, eos_token_id=eos, pad_token_id=model.config.eos_token_id or 0)
    texts = []
    for prompt_ids, result in zip(encoded, results):
        new_ids = result.new_ids[:-1] if result.stopped_on_eos else result.new_ids
        texts.append(tokenizer.decode(prompt_ids + new_ids))
    return texts
