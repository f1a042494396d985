"""transformers is the independent reference: the runtime must compute what it computes, on
checkpoints transformers wrote, and transformers must open what the runtime writes."""

from __future__ import annotations

import json

import pytest
import torch
from runtime_helpers import hf_llama_config, hf_qwen2_config, randomise, write_hf_checkpoint

from pvlab import runtime
TOLERANCE = 1e-4


def hf_logits(directory, input_ids):
    from transformers import AutoModelForCausalLM
    model, info = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    with torch.no_grad():
        return model.eval()(input_ids).logits


def probe(vocab_size: int, length: int = 24) -> torch.Tensor:
    return torch.randint(0, vocab_size, (2, length), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_logits_match_transformers_on_a_checkpoint_transformers_wrote(family, hf_qwen2_dir, hf_llama_dir):
    directory = hf_qwen2_dir if family == "qwen2" else hf_llama_dir
    model = runtime.load(directory)
    ids = probe(model.config.vocab_size)
    expected = hf_logits(directory, ids)
    with torch.no_grad():
        actual = model(ids)
    assert expected.abs().max() > 1.0, "logits too small for the comparison to mean anything"
    assert (actual - expected).abs().max().item() < TOLERANCE
    assert model.populate_report.complete
    assert model.populate_report.summary() == f"{len(model.config.tensor_shapes())}/{len(model.config.tensor_shapes())} tensors"


def test_llama_with_attention_and_mlp_biases_matches_transformers(tmp_path):
    directory = write_hf_checkpoint(tmp_path / "llama-bias", hf_llama_config(attention_bias=True, mlp_bias=True,
                                                                              tie_word_embeddings=True))
    model = runtime.load(directory)
    assert "model.layers.0.self_attn.o_proj.bias" in model.config.tensor_shapes()
    ids = probe(model.config.vocab_size)
    with torch.no_grad():
        assert (model(ids) - hf_logits(directory, ids)).abs().max().item() < TOLERANCE


def test_qwen2_untied_matches_transformers(tmp_path):
    directory = write_hf_checkpoint(tmp_path / "qwen2-untied", hf_qwen2_config(tie_word_embeddings=False))
    model = runtime.load(directory)
    assert model.lm_head.weight is not model.model.embed_tokens.weight
    ids = probe(model.config.vocab_size)
    with torch.no_grad():
        assert (model(ids) - hf_logits(directory, ids)).abs().max().item() < TOLERANCE


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_transformers_opens_a_checkpoint_the_runtime_wrote(family, tmp_path):
    hf_config = hf_qwen2_config() if family == "qwen2" else hf_llama_config()
    config = runtime.ModelConfig.from_hf_dict(hf_config.to_dict())
    model = runtime.init_model(config=config, weights="random", seed=0)
    randomise(model, seed=3)
    runtime.save_checkpoint(model, tmp_path / "ckpt")
    ids = probe(config.vocab_size)
    with torch.no_grad():
        ours = model(ids)
    theirs = hf_logits(tmp_path / "ckpt", ids)
    assert (ours - theirs).abs().max().item() < TOLERANCE
    reloaded = runtime.load(tmp_path / "ckpt")
    with torch.no_grad():
        assert torch.equal(reloaded(ids), ours)


def test_state_dict_names_are_the_hugging_face_tensor_names(hf_qwen2_dir):
    from safetensors import safe_open
    with safe_open(str(hf_qwen2_dir / "model.safetensors"), framework="pt") as handle:
        file_names = set(handle.keys())
    model = runtime.load(hf_qwen2_dir)
    ours = set(model.state_dict()) - {"lm_head.weight"}  # tied: present in state_dict, absent from the file
    assert ours == file_names - {"lm_head.weight"}
    assert "model.layers.1.self_attn.q_proj.bias" in ours and "model.norm.weight" in ours


def test_tied_checkpoint_written_by_runtime_holds_no_lm_head(small_checkpoint):
    from safetensors import safe_open
    with safe_open(str(small_checkpoint / "model.safetensors"), framework="pt") as handle:
        names = set(handle.keys())
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    config = json.loads((small_checkpoint / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"] and config["tie_word_embeddings"] is True


def test_tokenizer_saved_with_the_checkpoint_opens_in_transformers(small_checkpoint):
    from transformers import AutoTokenizer
    theirs = AutoTokenizer.from_pretrained(small_checkpoint)
    ours = runtime.load(small_checkpoint).tokenizer
    text = "def fib(n):\n    return n\n"
    assert theirs(text)["input_ids"] == ours.encode(text).ids
    assert theirs.decode(ours.encode(text).ids) == text


def test_tokenizer_of_a_llama_checkpoint_opens_in_transformers(small_checkpoint, tmp_path):
    from transformers import AutoTokenizer
    tokenizer = runtime.load(small_checkpoint).tokenizer
    config = runtime.ModelConfig.from_hf_dict(hf_llama_config(vocab_size=512).to_dict())
    model = runtime.init_model(config=config, weights="random", seed=0)
    runtime.save_checkpoint(model, tmp_path / "llama", tokenizer=tokenizer)
    theirs = AutoTokenizer.from_pretrained(tmp_path / "llama")
    text = "class Cache:\n    def __init__(self, keys):\n        self.keys = keys\n"
    assert theirs(text, add_special_tokens=False)["input_ids"] == tokenizer.encode(text).ids
