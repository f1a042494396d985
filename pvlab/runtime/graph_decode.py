"""Greedy decoding of one sequence with the decode step replayed as a CUDA graph.

Why: eager decoding on a GPU is launch-bound. One token of the qwen2-0.5b shape is ~65 small
kernels per layer, each a Python call of a few microseconds, so an H100 that reads the whole
model in well under a millisecond decoded 43 tokens/s (FALSIFY-PERF-DECODE-001, measured
2026-11-23) against the 16-core CPU's 25. Recording the single-token step once and replaying it
turns ~1,500 launches per token into one.

How: `StaticKVCache` holds keys and values for the whole sequence (prompt + new tokens) in
buffers allocated once, written in place at the step's positions (a device tensor) and
attended to through a mask `key position <= query position`; nothing in a step depends on a
Python value that changes from token to token, so the step can be captured. The prompt runs
eagerly (it fills the cache and picks the first token), then the one-token step is captured
into a `torch.cuda.CUDAGraph` and replayed per token. The chosen id is read back once per token
(the caller needs it, and an eos check must see it).

Where there are no CUDA graphs (the CPU), or with `use_graph=False`, the same static-cache step
runs eagerly: the arithmetic is the same, and tests compare its tokens with `runtime.generate`.
Single sequence, greedy only; `runtime.generate` remains the general decoder (sampling,
top-k, batches, logits).
"""

from __future__ import annotations

import importlib
from typing import Sequence

import torch

from . import kernels
from .errors import ArgumentError
from .model import CausalLM

# The module, not its function (the package's own `generate` attribute is the function): the
# request check is looked up at call time, so a planted bug that replaces it reaches here too.
_generation = importlib.import_module(f"{__package__}.generate")


class StaticKVCache:
    """Keys and values of every layer, (B, KV, capacity, D) each, allocated at the first write in
    the dtype the model produces them in; `positions` (T,) says where the current step's T keys
    go. Used like model.KVCache by the attention layers (`update`)."""

    def __init__(self, num_layers: int, capacity: int):
        self.capacity = capacity
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self.positions: torch.Tensor | None = None

    def update(self, layer_index: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this step's (B, KV, T, D) keys/values at `positions`; return the whole buffers."""
        if self.keys[layer_index] is None:
            batch, kv_heads, _, head_dim = k.shape
            shape = (batch, kv_heads, self.capacity, head_dim)
            self.keys[layer_index] = torch.zeros(shape, dtype=k.dtype, device=k.device)
            self.values[layer_index] = torch.zeros(shape, dtype=v.dtype, device=v.device)
        keys, values = self.keys[layer_index], self.values[layer_index]
        keys.index_copy_(2, self.positions, k.to(keys.dtype))
        values.index_copy_(2, self.positions, v.to(values.dtype))
        return keys, values


def _autocast(model: CausalLM):
    # The fast path's bf16 autocast without its cast cache: inside a captured graph the weight
    # casts are recorded like any kernel, and a cache would outlive the capture it was made in.
    if model.path == "fast":
        return torch.autocast(device_type=model.device.type, dtype=torch.bfloat16, cache_enabled=False)
    return kernels.autocast_for(model.path, model.device.type)


def _step(model: CausalLM, cache: StaticKVCache, ids: torch.Tensor, positions: torch.Tensor,
          key_positions: torch.Tensor) -> torch.Tensor:
    """Next-token logits (1, V) after feeding `ids` (1, T) at `positions` (T,)."""
    cache.positions = positions
    mask = (key_positions[None, :] <= positions[:, None])[None, None]              # (1, 1, T, S)
    with _autocast(model):
        hidden = model.model(ids, cache, positions=positions, mask=mask)            # (1, T, C)
        logits = model.lm_head(hidden[:, -1:])                                       # (1, 1, V)
    return logits[:, -1].float()                                                     # (1, V)


def _capture(model: CausalLM, cache: StaticKVCache, ids: torch.Tensor, positions: torch.Tensor,
             key_positions: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """Record one single-token step. The warm-up runs on a side stream first (as torch asks:
    lazy initialisation must not happen during capture); it writes the cache at `positions`,
    the slot the first replay writes again with the same token."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            _step(model, cache, ids, positions, key_positions)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        logits = _step(model, cache, ids, positions, key_positions)
    return graph, logits


@torch.no_grad()
def greedy_generate(model: CausalLM, prompt_ids: Sequence[int], *, max_new_tokens: int,
                    eos_token_id: int | None = None, use_graph: bool | None = None) -> list[int]:
    """The new token ids of greedy decoding after `prompt_ids` (stopping after `eos_token_id`,
    which is included), as `runtime.generate(...).new_ids` gives them. use_graph: replay the
    step as a CUDA graph (default: on CUDA devices)."""
    prompt = [int(t) for t in prompt_ids]
    _generation._check_request(model, prompt, max_new_tokens, 0.0)
    device = model.device
    use_graph = device.type == "cuda" if use_graph is None else use_graph
    if use_graph and device.type != "cuda":
        raise ArgumentError(f"CUDA graphs need a CUDA device; this model is on {device}")
    if max_new_tokens == 0:
        return []
    capacity = len(prompt) + max_new_tokens
    cache = StaticKVCache(model.config.num_hidden_layers, capacity)
    key_positions = torch.arange(capacity, device=device)                           # (S,)
    was_training = model.training
    model.eval()
    try:
        logits = _step(model, cache, torch.tensor([prompt], device=device),
                       torch.arange(len(prompt), device=device), key_positions)
        token = logits.argmax(dim=-1)                                                # (1,)
        ids = token.view(1, 1).clone()                                               # (1, 1): the step's input
        position = torch.full((1,), len(prompt), device=device)                     # (1,)
        graph = None
        if use_graph and max_new_tokens > 1:
            graph, graph_logits = _capture(model, cache, ids, position, key_positions)
        new_ids: list[int] = []
        for index in range(max_new_tokens):
            new_ids.append(int(token.item()))
            if new_ids[-1] == eos_token_id or index == max_new_tokens - 1:
                break
            ids.copy_(token.view(1, 1))
            position.fill_(len(prompt) + index)
            if graph is not None:
                graph.replay()
                logits = graph_logits
            else:
                logits = _step(model, cache, ids, position, key_positions)
            token = logits.argmax(dim=-1)
    finally:
        model.train(was_training)
    return new_ids
