"""Loading refuses every malformed input with an error that names the file, tensor or argument,
and writing never leaves a half-written checkpoint behind."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import load_file, save_file

from pvlab import runtime
from pvlab.runtime import checkpoint, errors


def rewrite_weights(directory, change):
    file = directory / "model.safetensors"
    tensors = load_file(str(file))
    change(tensors)
    save_file(tensors, str(file), metadata={"format": "pt"})


def rewrite_config(directory, change):
    file = directory / "config.json"
    config = json.loads(file.read_text())
    change(config)
    file.write_text(json.dumps(config))


# ---- what a good load reports ----------------------------------------------------------------

def test_populate_report_counts_expected_against_found(hf_qwen2_dir):
    report = runtime.load(hf_qwen2_dir).populate_report
    assert report.complete and not report.missing and not report.extra and not report.mismatched
    assert len(report.expected) == 2 * 12 + 2 == len(report.found)
    assert report.as_dict()["tensors_populated"] == 26


@pytest.mark.slow
def test_qwen2_0_5b_shaped_checkpoint_reports_290_of_290(tmp_path):
    """A checkpoint with Qwen2-0.5B's exact shapes (bf16 zeros, 1 GB): 290 expected names, all found."""
    config = runtime.preset("qwen2-0.5b")
    tensors = {name: torch.zeros(shape, dtype=torch.bfloat16) for name, shape in config.tensor_shapes().items()}
    (tmp_path / "q").mkdir()
    save_file(tensors, str(tmp_path / "q" / "model.safetensors"))
    del tensors
    (tmp_path / "q" / "config.json").write_text(json.dumps(config.to_hf_dict()))
    info = runtime.inspect_checkpoint(tmp_path / "q")
    assert info["coverage"]["summary"] == "290/290 tensors"
    assert info["parameters_expected"] == 494_032_768
    model = runtime.load(tmp_path / "q")
    assert model.populate_report.summary() == "290/290 tensors"
    assert model.model.layers[23].self_attn.k_proj.bias.shape == (128,)


def test_presets_have_their_documented_sizes():
    assert len(runtime.preset("qwen2-0.5b").tensor_shapes()) == 290
    assert runtime.preset("qwen2-0.5b").num_parameters() == 494_032_768
    llama = runtime.preset("llama-370m")
    with torch.device("meta"):
        counted = runtime.CausalLM(llama).num_parameters()
    assert counted == llama.num_parameters() == 369_935_360
    assert 366e6 <= counted <= 374e6
    tiny = runtime.preset("tiny")
    assert 512 <= tiny.vocab_size <= 4096 and tiny.num_hidden_layers == 2 and tiny.hidden_size == 64


# ---- tensors ---------------------------------------------------------------------------------

def test_missing_tensor_is_named(hf_qwen2_dir, copy_checkpoint):
    directory = copy_checkpoint(hf_qwen2_dir)
    rewrite_weights(directory, lambda t: t.pop("model.layers.1.self_attn.k_proj.bias"))
    with pytest.raises(checkpoint.PopulateError, match="missing tensor model.layers.1.self_attn.k_proj.bias") as caught:
        runtime.load(directory)
    assert caught.value.report.missing == ("model.layers.1.self_attn.k_proj.bias",)
    assert "25/26 tensors" in str(caught.value)


def test_extra_tensor_is_named(hf_qwen2_dir, copy_checkpoint):
    directory = copy_checkpoint(hf_qwen2_dir)
    rewrite_weights(directory, lambda t: t.update({"model.layers.0.self_attn.o_proj.bias": torch.zeros(64)}))
    with pytest.raises(errors.CheckpointError, match="extra tensor model.layers.0.self_attn.o_proj.bias"):
        runtime.load(directory)


def test_mis_shaped_tensor_is_named_with_both_shapes(hf_qwen2_dir, copy_checkpoint):
    directory = copy_checkpoint(hf_qwen2_dir)
    rewrite_weights(directory, lambda t: t.update({"model.norm.weight": torch.ones(63)}))
    with pytest.raises(errors.CheckpointError, match=r"model.norm.weight has shape \[63\], expected \[64\]"):
        runtime.load(directory)


def test_integer_weights_are_refused(hf_qwen2_dir, copy_checkpoint):
    directory = copy_checkpoint(hf_qwen2_dir)
    rewrite_weights(directory, lambda t: t.update({"model.norm.weight": torch.ones(64, dtype=torch.int32)}))
    with pytest.raises(errors.CheckpointError, match="model.norm.weight.*I32"):
        runtime.load(directory)


def test_untied_head_copy_that_differs_from_the_embedding_is_refused(hf_qwen2_dir, copy_checkpoint):
    directory = copy_checkpoint(hf_qwen2_dir)
    rewrite_weights(directory, lambda t: t.update({"lm_head.weight": torch.randn(256, 64)}))
    with pytest.raises(errors.CheckpointError, match="lm_head.weight differs"):
        runtime.load(directory)


def test_identical_head_copy_of_a_tied_model_is_tolerated(hf_qwen2_dir, copy_checkpoint):
    directory = copy_checkpoint(hf_qwen2_dir)
    rewrite_weights(directory, lambda t: t.update({"lm_head.weight": t["model.embed_tokens.weight"].clone()}))
    assert runtime.load(directory).populate_report.ignored == ("lm_head.weight",)


# ---- files -----------------------------------------------------------------------------------

def test_truncated_safetensors_is_refused_naming_the_file(hf_qwen2_dir, copy_checkpoint):
    directory = copy_checkpoint(hf_qwen2_dir)
    file = directory / "model.safetensors"
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])
    with pytest.raises(errors.CheckpointError, match=r"model\.safetensors: truncated"):
        runtime.load(directory)


@pytest.mark.parametrize("content", [b"", b"\x00\x01", b"not a safetensors file at all" * 10,
                                     (20).to_bytes(8, "little") + b"{this is not json!!}"])
def test_corrupt_safetensors_is_refused_naming_the_file(hf_qwen2_dir, copy_checkpoint, content):
    directory = copy_checkpoint(hf_qwen2_dir)
    (directory / "model.safetensors").write_bytes(content)
    with pytest.raises(errors.CheckpointError, match=r"model\.safetensors"):
        runtime.load(directory)


def test_missing_weights_file_is_refused(hf_qwen2_dir, copy_checkpoint):
    directory = copy_checkpoint(hf_qwen2_dir)
    (directory / "model.safetensors").unlink()
    with pytest.raises(errors.CheckpointError, match="no weights"):
        runtime.load(directory)


def test_missing_directory_and_missing_config_are_refused(tmp_path, hf_qwen2_dir, copy_checkpoint):
    with pytest.raises(errors.CheckpointError, match="does not exist"):
        runtime.load(tmp_path / "nowhere")
    directory = copy_checkpoint(hf_qwen2_dir)
    (directory / "config.json").unlink()
    with pytest.raises(errors.CheckpointError, match="config.json: missing"):
        runtime.load(directory)


def test_sharded_checkpoints_load(hf_qwen2_dir, tmp_path):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(hf_qwen2_dir)
    model.save_pretrained(tmp_path / "sharded", max_shard_size="100KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    ids = torch.arange(10)[None]
    with torch.no_grad():
        assert torch.equal(runtime.load(tmp_path / "sharded")(ids), runtime.load(hf_qwen2_dir)(ids))


# ---- configs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("change,error,message", [
    (lambda c: c.update(model_type="gpt_neox", architectures=["GPTNeoXForCausalLM"]), errors.ConfigError,
     "unknown model_type 'gpt_neox'"),
    (lambda c: c.update(model_type="bert", architectures=["BertModel"]), errors.UnsupportedArchitectureError,
     "encoder"),
    (lambda c: c.update(architectures=["BertModel"]), errors.UnsupportedArchitectureError, "BertModel"),
    (lambda c: c.update(architectures=["Qwen2ForSequenceClassification"]), errors.UnsupportedArchitectureError,
     "Qwen2ForSequenceClassification"),
    (lambda c: c.update(num_key_value_heads=3), errors.ConfigError, "not a multiple of num_key_value_heads 3"),
    (lambda c: (c.update(hidden_size=66), c.pop("head_dim", None)), errors.ConfigError,
     "hidden_size 66 is not divisible"),
    (lambda c: c.pop("vocab_size"), errors.ConfigError, "missing required key 'vocab_size'"),
    (lambda c: c.update(hidden_act="gelu"), errors.UnsupportedArchitectureError, "hidden_act 'gelu'"),
    (lambda c: c.update(rope_parameters={"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}),
     errors.UnsupportedArchitectureError, "rope_type 'yarn'"),
    (lambda c: c.update(use_sliding_window=True), errors.UnsupportedArchitectureError, "sliding-window"),
    (lambda c: c.update(vocab_size=-5), errors.ConfigError, "vocab_size must be a positive integer"),
    (lambda c: c.pop("model_type"), errors.ConfigError, "no 'model_type' key"),
])
def test_bad_configs_are_refused_naming_the_key(hf_qwen2_dir, copy_checkpoint, change, error, message):
    directory = copy_checkpoint(hf_qwen2_dir)
    rewrite_config(directory, change)
    with pytest.raises(error, match=message) as caught:
        runtime.load(directory)
    assert "config.json" in str(caught.value)


@pytest.mark.parametrize("source,damage,error,message", [
    ("small_checkpoint", lambda d: (d / "tokenizer.json").write_text("{ nope"), errors.CheckpointError,
     "tokenizer.json"),
    ("hf_qwen2_dir", lambda d: (d / "config.json").write_text("{'model_type': 'qwen2'"), errors.ConfigError,
     "config.json: not valid JSON"),
    ("hf_qwen2_dir", lambda d: rewrite_config(d, lambda c: c.update(intermediate_size=128)), errors.CheckpointError,
     r"mlp.gate_proj.weight has shape \[96, 64\], expected \[128, 64\]"),
], ids=["corrupt-tokenizer", "config-not-json", "config-shapes-disagree-with-the-weights"])
def test_a_damaged_checkpoint_is_refused(request, copy_checkpoint, source, damage, error, message):
    directory = copy_checkpoint(request.getfixturevalue(source))
    damage(directory)
    with pytest.raises(error, match=message):
        runtime.load(directory)


# ---- paired arguments --------------------------------------------------------------------------

def test_init_model_rejects_unpaired_arguments(hf_qwen2_dir):
    with pytest.raises(errors.UnpairedArgumentsError, match="config given without weights"):
        runtime.init_model(config="tiny")
    with pytest.raises(errors.UnpairedArgumentsError, match="weights given without an architecture"):
        runtime.init_model(weights=hf_qwen2_dir / "model.safetensors")
    with pytest.raises(errors.UnpairedArgumentsError):
        runtime.init_model()


def test_init_model_pairs_a_config_with_a_weights_file(hf_qwen2_dir):
    config = json.loads((hf_qwen2_dir / "config.json").read_text())
    model = runtime.init_model(config=config, weights=hf_qwen2_dir / "model.safetensors")
    ids = torch.arange(12)[None]
    with torch.no_grad():
        assert torch.equal(model(ids), runtime.load(hf_qwen2_dir)(ids))


def test_init_model_refuses_weights_of_another_architecture(hf_qwen2_dir):
    with pytest.raises(errors.CheckpointError, match=r"19/26 tensors \(7 mis-shaped\)"):
        runtime.init_model(config="tiny", weights=hf_qwen2_dir / "model.safetensors")


def test_init_model_refuses_an_encoder_config():
    with pytest.raises(errors.UnsupportedArchitectureError, match="encoder"):
        runtime.init_model(config={"model_type": "bert", "architectures": ["BertModel"], "vocab_size": 10},
                           weights="random")


def test_unknown_preset_and_path_are_refused():
    with pytest.raises(errors.ConfigError, match="unknown preset 'huge'"):
        runtime.init_model(config="huge", weights="random")
    with pytest.raises(errors.ArgumentError, match="path must be one of"):
        runtime.init_model(config="tiny", weights="random", path="turbo")


def test_cuda_without_a_gpu_is_refused_naming_the_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same on machines with a GPU
    with pytest.raises(errors.DeviceError, match="'cuda': no CUDA GPU is available"):
        runtime.init_model(config="tiny", weights="random", device="cuda")


# ---- parity gate -----------------------------------------------------------------------------

def test_parity_gate_accepts_a_faithful_fast_path_and_refuses_a_diverging_one(hf_qwen2_dir):
    from pvlab.falsifiers.mutants import registry

    model = runtime.load(hf_qwen2_dir, path="fast")
    assert model.parity_report.min_cosine > 0.99 and model.path == "fast"
    with registry()["fast_path_drops_qkv_bias"]():  # the planted bug: the fast path forgets the biases
        with pytest.raises(errors.ParityGateError, match="disagrees with the CPU reference"):
            runtime.load(hf_qwen2_dir, path="fast")


# ---- atomic writes ---------------------------------------------------------------------------

def test_a_failed_save_leaves_no_directory_behind(tmp_path, monkeypatch):
    model = runtime.init_model(config="tiny", weights="random", seed=0)

    def explode(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(checkpoint, "save_file", explode)
    with pytest.raises(OSError, match="disk full"):
        runtime.save_checkpoint(model, tmp_path / "out")
    assert os.listdir(tmp_path) == []


def test_a_failed_overwrite_keeps_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    model = runtime.init_model(config="tiny", weights="random", seed=0)
    runtime.save_checkpoint(model, tmp_path / "out")
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    monkeypatch.setattr(checkpoint, "save_file", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        runtime.save_checkpoint(runtime.init_model(config="tiny", weights="random", seed=1), tmp_path / "out")
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before
    assert sorted(os.listdir(tmp_path)) == ["out"]
