"""pvlab.falsifiers.performance: a GPU speed claim is never measured where it would not be evidence."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
import torch

from pv.harness import DeviceUnavailable
from pvlab import runtime
from pvlab.falsifiers import performance, speed_vs_transformers
from pvlab.runtime import graph_decode
from pvlab.runtime.config import preset
from pvlab.runtime.model import CausalLM, init_weights

generation = importlib.import_module("pvlab.runtime.generate")   # the package's `generate` is the function

# Every timed claim about a named GPU goes through the same gate (performance._gpu_named).
GPU_CLAIMS = [performance.training_mfu, speed_vs_transformers.training_and_eval_vs_transformers]


@pytest.mark.parametrize("claim", [performance.decode_speed_vs_cpu, *GPU_CLAIMS], ids=lambda claim: claim.__name__)
def test_a_gpu_claim_is_not_measured_on_the_cpu(claim):
    with pytest.raises(DeviceUnavailable, match="nothing to measure on cpu"):
        claim(device="cpu", gpu="H100")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("claim", GPU_CLAIMS, ids=lambda claim: claim.__name__)
def test_no_gpu_is_device_unavailable_not_a_pass(claim):
    with pytest.raises(DeviceUnavailable, match="no CUDA GPU"):
        claim(device="cuda", gpu="H100")


@pytest.mark.parametrize("claim", GPU_CLAIMS, ids=lambda claim: claim.__name__)
def test_a_claim_about_one_gpu_model_is_not_measured_on_another(monkeypatch, claim):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(DeviceUnavailable, match="about a H100.*A100"):
        claim(device="cuda", gpu="H100")


def test_an_mfu_claim_needs_a_known_peak(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA Mystery 9000")
    with pytest.raises(ValueError, match="no dense bf16 peak"):
        performance.training_mfu(device="cuda", gpu="Mystery")


# ---- decode_speed_vs_cpu observes which decoder ran on the GPU (FALSIFY-PERF-DECODE-001) ----


def _tiny() -> CausalLM:
    model = CausalLM(preset("tiny").replace(num_hidden_layers=2))
    init_weights(model, 0)
    return model.eval()


def test_the_graph_decoder_is_counted_as_it_runs_and_put_back_after():
    model, original = _tiny(), graph_decode.greedy_generate
    with performance.graph_decoder_calls() as calls:
        graph_decode.greedy_generate(model, [1, 2, 3], max_new_tokens=2)   # eagerly, on the CPU
        runtime.generate(model, [1, 2, 3], max_new_tokens=2)              # the CPU takes the eager loop
        graph_decode.greedy_generate(model, [4, 5], max_new_tokens=1)
    assert len(calls) == 2
    assert graph_decode.greedy_generate is original
    with pytest.raises(RuntimeError, match="inside"):
        with performance.graph_decoder_calls():
            raise RuntimeError("inside")
    assert graph_decode.greedy_generate is original


def test_runtime_generate_reaches_the_counted_decoder_only_when_it_takes_the_graph(monkeypatch):
    """runtime.generate looks the graph decoder up when it decodes, so the count sees the route
    taken: forced onto the graph route (which runs on the CPU), one call; with use_graph=False
    (what the planted bug passes), none."""
    model = _tiny()
    monkeypatch.setattr(generation, "takes_graph", lambda device, **settings: settings["use_graph"] is not False)
    with performance.graph_decoder_calls() as calls:
        runtime.generate(model, [1, 2, 3], max_new_tokens=2)
        runtime.generate(model, [1, 2, 3], max_new_tokens=2, use_graph=False)
    assert len(calls) == 1


def test_only_generate_calls_on_a_cuda_model_are_counted():
    model, original = _tiny(), runtime.generate
    on_cuda = SimpleNamespace(device=SimpleNamespace(type="cuda"))
    with performance.cuda_generate_calls() as calls:
        runtime.generate(model, [1, 2], max_new_tokens=1)   # a CPU model: not counted
        with pytest.raises(AttributeError):
            runtime.generate(on_cuda, [1, 2], max_new_tokens=1)   # counted, then the real generate refuses it
    assert len(calls) == 1
    assert runtime.generate is original


def _fake_rate(routes: list[bool]):
    """A stand-in for performance._decode_rate: one decode per entry of `routes` through
    runtime.generate (True: through the graph decoder), on a CUDA-looking model for the GPU side."""
    from pvlab.falsifiers.throughput import Throughput

    def rate(model, *, sync, **kwargs):
        on_cuda = model.device.type == "cuda"
        for graphed in (routes if on_cuda else [False, False]):
            runtime.generate(model, [1], max_new_tokens=1, use_graph=None if graphed else False)
        return Throughput(median=100.0 if on_cuda else 20.0, spread=0.01, repeats=[1.0] * 5)
    return rate


def _decoding_stub(model, prompt, *, max_new_tokens, use_graph=None):
    if use_graph is not False:
        graph_decode.greedy_generate(model, prompt, max_new_tokens=max_new_tokens)


@pytest.mark.parametrize("routes, decoder", [([True] * 6, "graph"), ([False] * 6, "eager"),
                                             ([True] * 5 + [False], "mixed")])
def test_the_record_says_which_decoder_ran(monkeypatch, routes, decoder):
    monkeypatch.setattr(runtime, "generate", _decoding_stub)
    monkeypatch.setattr(graph_decode, "greedy_generate", lambda *a, **k: [0])
    monkeypatch.setattr(performance, "_gpu_named", lambda device, gpu: "NVIDIA H100")
    monkeypatch.setattr(performance, "_model", lambda config, device, path: SimpleNamespace(device=SimpleNamespace(type=device)))
    monkeypatch.setattr(performance, "_decode_rate", _fake_rate(routes))
    observed = performance.decode_speed_vs_cpu(device="cuda", gpu="H100")
    assert observed["cuda_decodes"] == 6
    assert observed["graph_decodes"] == sum(routes)
    assert observed["cuda_decoder"] == decoder


def test_a_gpu_claim_is_not_measured_on_the_cpu_and_the_counters_are_removed():
    original_generate, original_graph = runtime.generate, graph_decode.greedy_generate
    with pytest.raises(DeviceUnavailable, match="nothing to measure on cpu"):
        performance.decode_speed_vs_cpu(device="cpu", gpu="H100")
    assert runtime.generate is original_generate and graph_decode.greedy_generate is original_graph
