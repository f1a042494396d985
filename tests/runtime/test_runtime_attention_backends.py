"""Selectable SDPA backends (kernels.sdpa_backend, CausalLM.set_attention_backend, --attention-backend)
and the compiled training path's seam (trainer.compile_module)."""

from __future__ import annotations

import pytest
import torch

from pvlab import runtime
from pvlab.runtime import data, kernels, trainer
from pvlab.runtime.errors import ArgumentError, DeviceError


def _fast_model():
    return runtime.init_model(config="tiny", weights="random", seed=0, path="fast", parity_gate=False)


def test_backends_that_do_not_exist_here_are_refused_not_ignored():
    model = _fast_model()
    for backend in ("efficient", "cudnn"):
        if not torch.cuda.is_available():
            with pytest.raises(DeviceError, match="not available"):
                model.set_attention_backend(backend)
    with pytest.raises(ArgumentError, match="must be one of"):
        model.set_attention_backend("xformers")
    reference = runtime.init_model(config="tiny", weights="random", seed=0, parity_gate=False)
    with pytest.raises(ArgumentError, match="fast path"):
        reference.set_attention_backend("flash")


@pytest.mark.parametrize("backend", ["math", "flash"])
def test_a_pinned_backend_computes_the_same_logits(backend):
    model = _fast_model()
    ids = torch.randint(0, 512, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        default = model(ids)
        pinned = model.set_attention_backend(backend)(ids)
    assert float((pinned - default).abs().max()) <= 2e-2 * float(default.abs().max())
    assert all(layer.self_attn.attention_backend == backend for layer in model.model.layers)


def test_the_pinned_backend_is_the_only_one_allowed():
    q = torch.randn(1, 2, 4, 8)
    with kernels.sdpa_backend("flash"):
        torch.nn.functional.scaled_dot_product_attention(q, q, q)   # flash runs on the CPU
    with pytest.raises(RuntimeError):
        with kernels.sdpa_backend("efficient"):                      # a CUDA kernel: no silent fallback
            torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert kernels.sdpa_backend_available("math", "cpu") and not kernels.sdpa_backend_available("cudnn", "cpu")


def test_trainer_pins_the_backend_and_trains():
    model = _fast_model()
    run = runtime.Trainer(model, attention_backend="flash")
    assert run.train_batch(data.LMBatch.from_sequences([[1, 2, 3, 4, 5], [6, 7, 8]])) > 0
    assert model.model.layers[0].self_attn.attention_backend == "flash"


def test_compile_goes_through_the_compile_seam_for_every_layer(monkeypatch):
    compiled = []
    monkeypatch.setattr(trainer, "compile_module", compiled.append)
    model = runtime.init_model(config="tiny", weights="random", seed=0, parity_gate=False)
    runtime.Trainer(model, compile=True)
    assert compiled == list(model.model.layers)
    runtime.Trainer(model)
    assert len(compiled) == len(model.model.layers)                  # eager: nothing compiled


class _Recorded(torch.nn.Module):
    """A module whose compile() records what it was asked for instead of compiling."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def compile(self, **kwargs):
        self.calls.append(kwargs)


def test_the_default_compile_lowers_inductors_recompute_threshold():
    module = _Recorded()
    trainer.compile_module(module)
    assert module.calls == [{"options": {"realize_opcount_threshold": 8}}]


def test_a_compile_mode_goes_alone_since_torch_compile_takes_no_options_beside_it():
    module = _Recorded()
    trainer.compile_module(module, "max-autotune-no-cudagraphs")
    assert module.calls == [{"mode": "max-autotune-no-cudagraphs"}]


def test_an_inductor_setting_this_torch_lacks_is_left_out_not_an_error(monkeypatch):
    from torch._inductor import config as inductor_config

    monkeypatch.delattr(inductor_config, "realize_opcount_threshold")
    module = _Recorded()
    trainer.compile_module(module)
    assert module.calls == [{"options": {}}]


def test_the_default_compile_options_are_accepted_by_torch_compile():
    model = runtime.init_model(config="tiny", weights="random", seed=0, path="fast", parity_gate=False)
    ids = torch.randint(0, 512, (1, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        eager = model(ids)
    trainer.compile_module(model.model.layers[0])
    with torch.no_grad():
        compiled = model(ids)
    assert torch.allclose(compiled, eager, atol=1e-2, rtol=1e-2)
