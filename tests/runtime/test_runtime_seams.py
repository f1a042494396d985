"""The runtime's seams are real: replacing one module attribute — the function in the module that
defines it, the way planted bugs and `pv bisect` do, with no other binding touched — changes what
the runtime computes, because every internal call looks the function up through its module at
call time (`kernels.rms_norm(...)`, `devices.resolve_device(...)`). Forward hooks on the
HF-named modules see every activation on both execution paths."""

from __future__ import annotations

import dataclasses
import sys
import types
from unittest import mock

import pytest
import torch
from runtime_helpers import SMALL_RECIPE, randomise, tiny_config

from pvlab import runtime
from pvlab.runtime import config as runtime_config, devices, model as runtime_model
from pvlab.runtime.data import LMBatch


@pytest.fixture
def model():
    model = runtime.init_model(config=tiny_config(vocab_size=256), weights="random", seed=0)
    randomise(model, seed=4)
    return model


IDS = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))


def logits(model, path):
    with torch.no_grad():
        return model.set_path(path)(IDS)


# (seam, replacement, path on which it must show)
FORWARD_SEAMS = [
    ("pvlab.runtime.kernels.rms_norm", lambda x, w, eps: x, "reference"),
    ("pvlab.runtime.kernels.rope_cos_sin", lambda theta, d, pos: (torch.ones(len(pos), d), torch.zeros(len(pos), d)),
     "reference"),
    ("pvlab.runtime.kernels.rotate_half", lambda x: x, "reference"),
    ("pvlab.runtime.kernels.apply_rope", lambda x, cos, sin: x, "fast"),
    ("pvlab.runtime.kernels.linear_reference", lambda x, w, b: torch.matmul(x, w.t()), "reference"),
    ("pvlab.runtime.kernels.linear_fast", lambda x, w, b: torch.nn.functional.linear(x, w, None), "fast"),
    ("pvlab.runtime.kernels.swiglu_reference", lambda g, u: g * u, "reference"),
    ("pvlab.runtime.kernels.swiglu_fast", lambda g, u: g * u, "fast"),
    ("pvlab.runtime.kernels.softmax_reference", lambda s: torch.softmax(s * 0.5, dim=-1), "reference"),
    ("pvlab.runtime.kernels.attention_reference", lambda q, k, v: torch.zeros_like(q), "reference"),
    ("pvlab.runtime.kernels.attention_fast", lambda q, k, v: torch.zeros_like(q), "fast"),
    ("pvlab.runtime.kernels.causal_mask", lambda t, s, device: torch.ones(t, s, dtype=torch.bool), "reference"),
    ("pvlab.runtime.model.apply_final_norm", lambda norm, hidden: hidden, "fast"),
]


@pytest.mark.parametrize("seam,replacement,path", FORWARD_SEAMS, ids=[s for s, _, _ in FORWARD_SEAMS])
def test_patching_a_forward_seam_changes_the_logits(model, seam, replacement, path):
    clean = logits(model, path)
    with mock.patch(seam, replacement):
        broken = logits(model, path)
    assert not torch.allclose(clean, broken, atol=1e-3), f"{seam} is not reached on the {path} path"
    assert torch.equal(logits(model, path), clean)  # and the patch is gone again


def test_kv_cache_position_seam_reaches_incremental_decoding(model):
    def decode_step_logits():
        cache = runtime.KVCache(model.config.num_hidden_layers)
        with torch.no_grad():
            model(IDS[:, :8], cache)
            return model(IDS[:, 8:9], cache)
    clean = decode_step_logits()
    with mock.patch("pvlab.runtime.kernels.positions_for", lambda past, n, device: torch.arange(n, device=device)):
        assert not torch.allclose(decode_step_logits(), clean, atol=1e-3)


def test_next_token_seam_reaches_generation(model):
    with mock.patch("pvlab.runtime.kernels.greedy_pick", lambda logits: torch.zeros(logits.shape[0], dtype=torch.long)):
        assert set(runtime.generate(model, [1, 2, 3], max_new_tokens=5).new_ids) == {0}


@pytest.mark.parametrize("seam,path", [("pvlab.runtime.kernels.cross_entropy_reference", "reference"),
                                       ("pvlab.runtime.kernels.chunked_linear_cross_entropy", "fast")])
def test_loss_seams_reach_training_and_eval(model, seam, path):
    trainer = runtime.Trainer(model, path=path)
    batch = LMBatch.from_sequences(IDS)
    with mock.patch(seam, lambda *args, **kwargs: torch.tensor(42.0, requires_grad=True)):
        assert trainer.eval_batch(batch) == 42.0


def test_eval_target_seam_reaches_eval_but_not_training(model):
    trainer = runtime.Trainer(model)
    batch = LMBatch.from_sequences(IDS)
    clean = trainer.eval_batch(batch)
    with mock.patch("pvlab.runtime.trainer.eval_targets", lambda b: b.inputs):
        assert trainer.eval_batch(batch) != clean


def test_optimizer_seam_reaches_the_trainer(model):
    with mock.patch("pvlab.runtime.trainer.build_optimizer",
                    lambda named, **kw: torch.optim.SGD([p for _, p in named], lr=kw["lr"])):
        assert isinstance(runtime.Trainer(model).optimizer, torch.optim.SGD)


def test_tie_seam_reaches_model_construction():
    with mock.patch("pvlab.runtime.model.tie_output_head", lambda model: None):
        untied = runtime.CausalLM(runtime.preset("tiny"))
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight


def test_no_runtime_module_binds_another_runtime_modules_function():
    """A `from .devices import resolve_device` would keep the original after the seam is
    replaced: a planted bug would miss that caller. Classes may be bound (their methods are
    replaced on the class itself); the package's public re-exports are not internal callers."""
    bound = []
    for module_name, module in sorted(sys.modules.items()):
        if module is None or not module_name.startswith("pvlab.runtime."):
            continue
        for name, value in vars(module).items():
            if isinstance(value, types.FunctionType) and value.__module__.startswith("pvlab.runtime") \
                    and value.__module__ != module_name:
                bound.append(f"{module_name}.{name} (from {value.__module__})")
    assert "pvlab.runtime.checkpoint" in sys.modules and "pvlab.runtime.zoo" in sys.modules
    assert bound == [], f"bound at import time, invisible to a replaced seam: {bound}"


def _spy_resolve_device(seen):
    original = devices.resolve_device

    def resolve(requested=None, *, allow_gpu=True, argument="device"):
        seen.append((requested, allow_gpu))
        return original(requested, allow_gpu=allow_gpu, argument=argument)
    return resolve


def test_device_seam_reaches_load_init_and_the_trainer(small_checkpoint):
    seen = []
    with mock.patch.object(devices, "resolve_device", _spy_resolve_device(seen)):
        runtime.load(small_checkpoint, allow_gpu=False)
        model = runtime.init_model(config="tiny", weights="random", seed=0, device="cpu")
        runtime.Trainer(model, device="cpu")
    assert seen == [("cpu", False), ("cpu", True), ("cpu", True)]


def test_device_seam_reaches_pretraining(tmp_path):
    seen = []
    recipe = dataclasses.replace(SMALL_RECIPE, steps=1, eval_every=1, eval_batches=1)
    with mock.patch.object(devices, "resolve_device", _spy_resolve_device(seen)):
        runtime.pretrain(recipe, tmp_path / "out", device="cpu", path="reference", progress=False)
    assert ("cpu", True) in seen


def test_preset_and_init_seams_reach_init_model():
    small = runtime.preset("tiny").replace(num_hidden_layers=1)
    with mock.patch.object(runtime_config, "preset", lambda name: small):
        assert runtime.init_model(config="tiny", weights="random", seed=0).config.num_hidden_layers == 1

    def zeros(model, seed):
        for parameter in model.parameters():
            torch.nn.init.zeros_(parameter)
    with mock.patch.object(runtime_model, "init_weights", zeros):
        zeroed = runtime.init_model(config="tiny", weights="random", seed=0, parity_gate=False)
    assert all(float(p.detach().abs().sum()) == 0.0 for p in zeroed.parameters())


HOOKED = ["model.embed_tokens", "model.layers.0.input_layernorm", "model.layers.0.self_attn.q_proj",
          "model.layers.0.self_attn.k_proj", "model.layers.0.self_attn.v_proj", "model.layers.0.self_attn",
          "model.layers.0.post_attention_layernorm", "model.layers.0.mlp", "model.layers.1.self_attn", "model.norm",
          "lm_head"]


@pytest.mark.parametrize("path", ["reference", "fast"])
def test_forward_hooks_see_every_named_activation(model, path):
    captured = {}
    modules = dict(model.named_modules())
    handles = [modules[name].register_forward_hook(
        lambda module, args, output, name=name: captured.__setitem__(name, output)) for name in HOOKED]
    try:
        final = logits(model, path)
    finally:
        for handle in handles:
            handle.remove()
    assert set(captured) == set(HOOKED)
    assert captured["model.layers.0.self_attn.q_proj"].shape == (2, 12, 64)
    assert captured["model.layers.0.self_attn.k_proj"].shape == (2, 12, 32)  # 2 KV heads x 16
    assert captured["model.layers.0.self_attn"].shape == (2, 12, 64)         # after o_proj
    assert torch.allclose(captured["lm_head"].float(), final)
