"""Subjects: named, cached builds on real text. Every piece runs here at a tiny scale (the tiny
preset, the standard library's json package, a few steps, on the CPU); the production-scale
builds only run on a GPU machine (scripts/gpu-scale.sh)."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from pvlab import runtime
from pvlab.runtime import corpus, subjects, zoo
from pvlab.runtime.config import preset

SMALL_STDLIB = dataclasses.replace(subjects.STDLIB_RECIPE, config="tiny", steps=4, batch_size=2, seq_len=32,
                                   warmup_steps=1, eval_every=2, eval_batches=1, corpus="stdlib/json",
                                   tokenizer_vocab_size=300, val_fraction=0.2, lr=3e-3, min_lr=3e-4)


@pytest.fixture(scope="module")
def private_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("subjects") / "cache"


@pytest.fixture
def small_subject(monkeypatch, private_cache):
    """A subject of the production recipe's kind, small enough for the CPU, in a private cache
    shared by this module's tests (built by the first that asks)."""
    item = subjects.Subject("small-stdlib", SMALL_STDLIB, "cpu", "reference", "test subject")
    monkeypatch.setitem(subjects.SUBJECTS, item.name, item)
    return item, private_cache


def test_presets_have_the_shapes_the_issue_names():
    qwen, llama = preset("qwen2-0.5b"), preset("llama-370m")
    assert (qwen.num_hidden_layers, qwen.hidden_size, qwen.num_attention_heads, qwen.num_key_value_heads,
            qwen.intermediate_size, qwen.vocab_size, qwen.rope_theta) == (24, 896, 14, 2, 4864, 151936, 1e6)
    assert qwen.tie_word_embeddings and qwen.qkv_bias and not qwen.o_proj_bias
    # Qwen2-0.5B's published size, counted by hand: tied embedding, per layer q/k/v (+bias), o,
    # two norms and the MLP, then the final norm.
    per_layer = 896 * 896 + 896 + 2 * (896 * 128 + 128) + 896 * 896 + 2 * 896 + 3 * 896 * 4864
    assert qwen.num_parameters() == 151936 * 896 + 24 * per_layer + 896 == 494_032_768
    assert (llama.num_hidden_layers, llama.hidden_size, llama.vocab_size) == (24, 1024, 32000)
    assert not llama.tie_word_embeddings


def test_the_production_recipes_train_long_sequences_on_the_gpu_fast_path():
    for name in ("qwen2-0.5b-stdlib", "llama-370m-stdlib"):
        item = subjects.subject(name)
        assert (item.device, item.path, item.recipe.corpus) == ("cuda", "fast", "stdlib")
        assert item.recipe.seq_len >= 512 and item.recipe.steps >= 100
        assert item.recipe.tokenizer_vocab_size <= preset(item.recipe.config).vocab_size


def test_a_subject_build_records_phases_corpus_and_figures(small_subject):
    item, cache = small_subject
    directory = subjects.checkpoint_dir(item.name, cache)
    assert directory.name.startswith("small-stdlib-")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "runtime.json", "build.json"):
        assert (directory / name).is_file(), name
    meta = json.loads((directory / "runtime.json").read_text())
    results = meta["results"]
    assert set(results["phase_seconds"]) == {"corpus", "tokenizer", "encode", "training", "eval"}
    assert all(value >= 0 for value in results["phase_seconds"].values())
    json_package = corpus.load("stdlib/json")
    assert results["corpus"]["digest"] == json_package.digest == meta["recipe"]["corpus_digest"]
    assert results["corpus"]["files"] == len(json_package.files)
    assert results["trained_tokens"] == 4 * 2 * 32
    assert results["tokenizer_vocab_size"] <= 300 < results["vocab_size"] == 512
    record = subjects.describe(directory)
    assert record["phase_seconds"]["save"] >= 0                       # measured after runtime.json
    assert record["embedding_rows_without_token"] == 512 - results["tokenizer_vocab_size"]
    assert record["results"]["val_loss"] < math.log(512)              # 4 steps already learn something


def test_transformers_opens_a_subject_checkpoint_and_agrees_on_its_text(small_subject):
    transformers = pytest.importorskip("transformers")
    item, cache = small_subject
    directory = subjects.checkpoint_dir(item.name, cache)
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(directory)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    ours = runtime.load(directory)
    text = "import json\nprint(json.dumps({'a': 1}))\n"
    assert hf_tokenizer(text)["input_ids"] == ours.tokenizer.encode(text).ids
    assert hf_model.config.vocab_size == 512


def test_the_cache_key_holds_recipe_corpus_and_device(small_subject):
    item, cache = small_subject
    first = subjects.checkpoint_dir(item.name, cache)
    stamp = (first / "build.json").stat().st_mtime_ns
    assert subjects.checkpoint_dir(item.name, cache) == first and (first / "build.json").stat().st_mtime_ns == stamp
    other_corpus = dataclasses.replace(item, recipe=dataclasses.replace(item.recipe, corpus="stdlib/email"))
    other_device = dataclasses.replace(item, path="fast")
    keys = {item.key(), other_corpus.key(), other_device.key()}
    assert len(keys) == 3
    assert item.resolved_recipe().corpus_digest == corpus.load("stdlib/json").digest


def test_a_subject_that_cannot_be_built_here_says_so(small_subject, monkeypatch, tmp_path):
    item, cache = small_subject[0], tmp_path / "empty-cache"
    monkeypatch.setitem(subjects.SUBJECTS, item.name, dataclasses.replace(item, device="cuda"))
    monkeypatch.setattr(subjects, "_device_present", lambda device: device == "cpu")
    with pytest.raises(subjects.SubjectUnavailable, match="scripts/gpu-scale.sh"):
        subjects.checkpoint_dir(item.name, cache)
    with pytest.raises(subjects.SubjectUnavailable, match="not built"):
        subjects.checkpoint_dir(item.name, cache, build=False)
    with pytest.raises(subjects.SubjectUnavailable, match="unknown subject"):
        subjects.checkpoint_dir("gpt-5", cache)


def test_tiny_trained_is_a_subject_and_stays_the_zoos(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(zoo, "tiny_trained", lambda cache_dir=None, **kw: calls.append(cache_dir) or tmp_path)
    assert subjects.checkpoint_dir("tiny-trained", tmp_path) == tmp_path and calls == [tmp_path]


def test_the_command_line_lists_and_reports(small_subject, capsys):
    item, cache = small_subject
    assert subjects.main(["list"]) == 0
    assert "qwen2-0.5b-stdlib" in capsys.readouterr().out
    assert subjects.main(["build", item.name, "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    assert "phases: corpus" in out and "tokens/s" in out and "val_loss" in out


def test_biases_start_from_the_recipes_normal_draw(tmp_path):
    """bias_init_std: the subject's Q/K/V biases start non-zero (N(0, std), seeded); default zero."""
    import torch

    start = dataclasses.replace(SMALL_STDLIB, steps=0)
    biases = {}
    for std in (0.0, 1.0):
        out = tmp_path / f"std{std}"
        runtime.pretrain(dataclasses.replace(start, bias_init_std=std), out, device="cpu", path="reference",
                         progress=False)
        model = runtime.load(out)
        biases[std] = torch.cat([p.detach().flatten() for n, p in model.named_parameters() if n.endswith(".bias")])
    assert biases[0.0].numel() == 2 * (64 + 32 + 32) and bool((biases[0.0] == 0).all())
    assert 0.8 < float(biases[1.0].std()) < 1.2 and abs(float(biases[1.0].mean())) < 0.2
