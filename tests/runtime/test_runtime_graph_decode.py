"""runtime.graph_decode: the static-cache greedy decoder (a replayed CUDA graph on a GPU; the same
step eagerly here) gives runtime.generate's tokens. Its speed and its CUDA-graph branch are
FALSIFY-PERF-DECODE-003/004, run on a GPU; FALSIFY-PERF-DECODE-004 also runs on the CPU."""

from __future__ import annotations

import pytest
import torch
from runtime_helpers import randomise, tiny_config

from pvlab import runtime
from pvlab.runtime import errors, graph_decode


@pytest.fixture(params=["reference", "fast"])
def model(request):
    model = runtime.init_model(config=tiny_config(vocab_size=200, max_position_embeddings=64), weights="random", seed=0)
    randomise(model, seed=1)
    return model.set_path(request.param)


@pytest.mark.parametrize("prompt", [[5], [1, 2, 3, 4, 5, 6, 7], list(range(30))])
def test_static_cache_decoding_gives_generates_tokens(model, prompt):
    expected = runtime.generate(model, prompt, max_new_tokens=20).new_ids
    assert graph_decode.greedy_generate(model, prompt, max_new_tokens=20, use_graph=False) == expected


def test_it_stops_after_eos_and_leaves_the_mode_as_it_was(model):
    model.train()
    first = runtime.generate(model, [1, 2, 3], max_new_tokens=5).new_ids[0]
    model.train()
    assert graph_decode.greedy_generate(model, [1, 2, 3], max_new_tokens=5, eos_token_id=first) == [first]
    assert model.training


def test_edges_and_refusals(model):
    assert graph_decode.greedy_generate(model, [1, 2], max_new_tokens=0) == []
    assert len(graph_decode.greedy_generate(model, [1, 2], max_new_tokens=1)) == 1
    with pytest.raises(errors.ArgumentError, match="CUDA graphs need a CUDA device"):
        graph_decode.greedy_generate(model, [1, 2], max_new_tokens=3, use_graph=True)
    with pytest.raises(errors.GenerationError, match="empty"):
        graph_decode.greedy_generate(model, [], max_new_tokens=3)
    with pytest.raises(errors.RuntimeInputError):  # past the context of 64
        graph_decode.greedy_generate(model, [1] * 60, max_new_tokens=10)


def test_the_cache_writes_each_step_where_its_positions_say():
    cache = graph_decode.StaticKVCache(num_layers=1, capacity=6)
    cache.positions = torch.tensor([0, 1, 2])
    k = torch.arange(2 * 3 * 4, dtype=torch.float32).view(1, 2, 3, 4)
    keys, _ = cache.update(0, k, -k)
    assert keys.shape == (1, 2, 6, 4) and torch.equal(keys[:, :, :3], k) and not keys[:, :, 3:].any()
    cache.positions = torch.tensor([4])
    keys, values = cache.update(0, k[:, :, :1] + 100, k[:, :, :1])
    assert torch.equal(keys[:, :, 4], k[:, :, 0] + 100) and not keys[:, :, 3].any() and torch.equal(values[:, :, 4], k[:, :, 0])
