"""Decoding with a KV cache must compute exactly what a full forward computes."""

from __future__ import annotations

import pytest
import torch
from runtime_helpers import randomise, tiny_config

from pvlab import runtime
from pvlab.runtime import errors
from pvlab.runtime.model import KVCache


@pytest.fixture(params=["reference", "fast"])
def model(request):
    model = runtime.init_model(config=tiny_config(vocab_size=200, max_position_embeddings=64), weights="random", seed=0)
    randomise(model, seed=1)
    return model.set_path(request.param)


def test_incremental_decoding_logits_equal_the_full_forward(model):
    ids = torch.randint(0, 200, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(ids)                                   # (2, 20, V)
        cache = KVCache(model.config.num_hidden_layers)
        steps = [model(ids[:, :7], cache)]                  # prefill 7 positions
        steps += [model(ids[:, i:i + 1], cache) for i in range(7, 16)]
        steps.append(model(ids[:, 16:], cache))            # several new tokens after a cache
        incremental = torch.cat(steps, dim=1)
    assert cache.length == 20
    tolerance = 1e-4 if model.path == "reference" else 0.05 * full.abs().max().item()
    assert (incremental - full).abs().max().item() < tolerance


def test_greedy_generation_with_cache_equals_generation_without(model):
    prompt = [5, 17, 42, 99]
    cached = runtime.generate(model, prompt, max_new_tokens=20)
    uncached = runtime.generate(model, prompt, max_new_tokens=20, use_cache=False)
    assert len(cached.new_ids) == 20
    assert cached.new_ids == uncached.new_ids


def test_greedy_tokens_are_the_argmax_of_the_full_forward():
    model = runtime.init_model(config=tiny_config(vocab_size=200, max_position_embeddings=64), weights="random", seed=0)
    randomise(model, seed=1)
    result = runtime.generate(model, [3, 4, 5], max_new_tokens=8)
    sequence = torch.tensor([result.prompt_ids + result.new_ids])
    with torch.no_grad():
        logits = model(sequence)
    expected = logits[0, 2:-1].argmax(-1).tolist()
    assert result.new_ids == expected


def test_sampling_is_seeded_and_differs_from_greedy():
    model = runtime.init_model(config=tiny_config(vocab_size=200, max_position_embeddings=64), weights="random", seed=0)
    first = runtime.generate(model, [1, 2, 3], max_new_tokens=30, temperature=1.0, seed=7)
    again = runtime.generate(model, [1, 2, 3], max_new_tokens=30, temperature=1.0, seed=7)
    other = runtime.generate(model, [1, 2, 3], max_new_tokens=30, temperature=1.0, seed=8)
    greedy = runtime.generate(model, [1, 2, 3], max_new_tokens=30)
    assert first.new_ids == again.new_ids
    assert first.new_ids != other.new_ids
    assert first.new_ids != greedy.new_ids


def test_top_k_one_is_greedy():
    model = runtime.init_model(config=tiny_config(vocab_size=200, max_position_embeddings=64), weights="random", seed=0)
    randomise(model, seed=2)
    sampled = runtime.generate(model, [1, 2, 3], max_new_tokens=10, temperature=1.5, top_k=1, seed=3)
    assert sampled.new_ids == runtime.generate(model, [1, 2, 3], max_new_tokens=10).new_ids


def test_generation_stops_at_eos():
    model = runtime.init_model(config=tiny_config(vocab_size=200, max_position_embeddings=64), weights="random", seed=0)
    randomise(model, seed=1)
    first = runtime.generate(model, [1, 2, 3], max_new_tokens=5).new_ids[0]
    stopped = runtime.generate(model, [1, 2, 3], max_new_tokens=5, eos_token_id=first)
    assert stopped.new_ids == [first] and stopped.stopped_on_eos


def test_prompt_longer_than_the_context_is_refused():
    model = runtime.init_model(config=tiny_config(max_position_embeddings=16), weights="random", seed=0)
    with pytest.raises(errors.PromptTooLongError, match="17 tokens, longer than the model's context of 16"):
        runtime.generate(model, list(range(17)), max_new_tokens=1)
    with pytest.raises(errors.PromptTooLongError, match="max_new_tokens"):
        runtime.generate(model, list(range(10)), max_new_tokens=7)


@pytest.mark.parametrize("prompt,kwargs,error", [
    ([], {}, errors.GenerationError),
    ([1, 2], {"temperature": -1.0}, errors.ArgumentError),
    ([1, 2], {"max_new_tokens": -1}, errors.ArgumentError),
    ([1, 100000], {}, errors.GenerationError),
])
def test_bad_generation_requests_are_refused(prompt, kwargs, error):
    model = runtime.init_model(config="tiny", weights="random", seed=0)
    kwargs = {"max_new_tokens": 3, **kwargs}
    with pytest.raises(error):
        runtime.generate(model, prompt, **kwargs)


def test_generate_text_round_trips_through_the_tokenizer(small_checkpoint):
    model = runtime.load(small_checkpoint)
    text = runtime.generate_text(model, model.tokenizer, "def fib(n):", max_new_tokens=5)
    assert text.startswith("def fib(n):")


# ---- which decoder runtime.generate takes (the CUDA-graph decoder by default on CUDA) -----------


@pytest.fixture()
def routed(monkeypatch):
    """A tiny model that claims to be on CUDA, and a stand-in CUDA-graph decoder that records its
    calls: which decoder generate() picks, without a GPU."""
    from pvlab.runtime import graph_decode, model as model_module

    m = runtime.init_model(config=tiny_config(), weights="random", seed=0, device="cpu", path="fast")
    calls = []

    def greedy_generate(model, prompt, *, max_new_tokens, eos_token_id=None):
        calls.append((tuple(prompt), max_new_tokens, eos_token_id))
        return [7, 3, 5][:max_new_tokens]

    monkeypatch.setattr(graph_decode, "greedy_generate", greedy_generate)
    monkeypatch.setattr(model_module.CausalLM, "device", property(lambda self: torch.device("cuda")))
    return m, calls


def test_greedy_decoding_on_cuda_takes_the_graph_decoder_by_default(routed):
    model, calls = routed
    out = runtime.generate(model, [1, 2], max_new_tokens=3, eos_token_id=5)
    assert calls == [((1, 2), 3, 5)]
    assert out.new_ids == [7, 3, 5] and out.stopped_on_eos and out.prompt_ids == [1, 2]


@pytest.mark.parametrize("device, kwargs, graph", [
    ("cuda", {}, True),
    ("cuda", dict(use_graph=False), False),          # the eager loop, on request (to measure it)
    ("cuda", dict(temperature=1.0), False),          # sampling: the graph decoder is greedy only
    ("cuda", dict(output_logits=True), False),
    ("cuda", dict(use_cache=False), False),
    ("cpu", {}, False),
])
def test_which_decoder_generate_takes(device, kwargs, graph):
    from pvlab.runtime.generate import takes_graph

    settings = dict(temperature=0.0, use_cache=True, output_logits=False, use_graph=None) | kwargs
    assert takes_graph(torch.device(device), **settings) is graph


def test_use_graph_true_is_refused_where_no_graph_can_run():
    model = runtime.init_model(config=tiny_config(), weights="random", seed=0, device="cpu", path="fast")
    with pytest.raises(errors.ArgumentError, match="use_graph=True"):
        runtime.generate(model, [1, 2], max_new_tokens=3, use_graph=True)
    assert runtime.generate(model, [1, 2], max_new_tokens=3).new_ids == \
        runtime.generate(model, [1, 2], max_new_tokens=3, use_graph=False).new_ids
