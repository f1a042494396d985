"""The independent oracles of issue #12 (transformers-oracle, textbook-training-loop,
checkpoint-round-trip): every falsifier holds on the runtime as it is (CPU), each FAILS under a
planted bug it declares, and a missing or unusable transformers is an ERROR that names the file
and the reason — never a skip.
"""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch

from falsifier_helpers import all_falsifiers, contract, observe
from pv import harness, tolerance as tolerances
from pvlab.falsifiers import fixtures, oracle_training, oracle_transformers
from pvlab.falsifiers.mutants import registry

pytestmark = pytest.mark.slow

CONTRACTS = ("transformers-oracle", "textbook-training-loop", "checkpoint-round-trip")
NEW = [(c, f.id) for c, f in all_falsifiers() if c in CONTRACTS]


@pytest.fixture(scope="module", autouse=True)
def _checkpoint_built_before_any_patch():
    fixtures.checkpoint_dir("tiny-trained")


@pytest.fixture(autouse=True)
def _fresh_models():
    fixtures.clear(models_only=True)
    yield
    fixtures.clear(models_only=True)


def test_the_new_contracts_have_twenty_falsifiers_on_cpu_and_cuda():
    assert len(NEW) == 20
    for contract_id, falsifier_id in NEW:
        falsifier = contract(contract_id).falsifier(falsifier_id)
        assert falsifier.devices == ["cpu", "cuda"] and falsifier.mutants, falsifier_id


@pytest.mark.parametrize("contract_id,falsifier_id", NEW, ids=[f for _, f in NEW])
def test_holds_on_the_runtime_as_it_is(contract_id, falsifier_id):
    observations, judgement = observe(contract_id, falsifier_id)
    assert judgement.holds, (falsifier_id, observations)


# One falsifier per declared mutant at least: the planted bug makes the prediction false.
KILLS = [
    ("transformers-oracle", "FALSIFY-TRANSFORMERS-ORACLE-001", "qkv_bias_added_after_rope"),
    ("transformers-oracle", "FALSIFY-TRANSFORMERS-ORACLE-003", "qkv_bias_added_after_rope"),
    ("transformers-oracle", "FALSIFY-TRANSFORMERS-ORACLE-004", "qkv_bias_added_after_rope"),
    ("transformers-oracle", "FALSIFY-TRANSFORMERS-ORACLE-006", "qkv_bias_added_after_rope"),
    ("transformers-oracle", "FALSIFY-TRANSFORMERS-ORACLE-008", "tied_head_gradient_detached"),
    ("transformers-oracle", "FALSIFY-TRANSFORMERS-ORACLE-010", "qkv_bias_added_after_rope"),
    ("transformers-oracle", "FALSIFY-TRANSFORMERS-ORACLE-011", "kv_cache_keeps_only_newest"),
    ("transformers-oracle", "FALSIFY-TRANSFORMERS-ORACLE-013", "kv_cache_keeps_only_newest"),
    ("textbook-training-loop", "FALSIFY-TEXTBOOK-TRAINING-001", "lr_schedule_one_step_late"),
    ("textbook-training-loop", "FALSIFY-TEXTBOOK-TRAINING-001", "clip_scale_not_capped"),
    ("textbook-training-loop", "FALSIFY-TEXTBOOK-TRAINING-002", "embeddings_not_decayed"),
    ("checkpoint-round-trip", "FALSIFY-CHECKPOINT-ROUNDTRIP-001", "saved_biases_rounded_to_float16"),
    ("checkpoint-round-trip", "FALSIFY-CHECKPOINT-ROUNDTRIP-001", "config_written_with_fixed_norm_eps"),
    ("checkpoint-round-trip", "FALSIFY-CHECKPOINT-ROUNDTRIP-003", "config_written_with_fixed_norm_eps"),
    ("checkpoint-round-trip", "FALSIFY-CHECKPOINT-ROUNDTRIP-004", "saved_biases_rounded_to_float16"),
    ("checkpoint-round-trip", "FALSIFY-CHECKPOINT-ROUNDTRIP-005", "optimizer_moments_swapped_on_save"),
]


@pytest.mark.parametrize("contract_id,falsifier_id,mutant", KILLS, ids=[f"{f}-{m}" for _, f, m in KILLS])
def test_fails_under_a_planted_bug(contract_id, falsifier_id, mutant):
    with registry()[mutant]():
        observations, judgement = observe(contract_id, falsifier_id)
    assert not judgement.holds, (falsifier_id, mutant, observations)


def test_the_textbook_schedule_is_the_documented_one():
    rates = [oracle_training.textbook_lr(s, lr=3e-3, warmup_steps=3, total_steps=8, min_lr=3e-4) for s in range(10)]
    assert [branch for _, branch in rates] == ["warmup"] * 3 + ["decay"] * 5 + ["floor"] * 2
    assert [r for r, _ in rates[:3]] == pytest.approx([1e-3, 2e-3, 3e-3])
    assert rates[3][0] == pytest.approx(3e-3)                               # cosine starts at the peak
    assert rates[5][0] == pytest.approx(3e-4 + 0.5 * 2.7e-3 * (1 + math.cos(math.pi * 2 / 5)))
    assert rates[8][0] == rates[9][0] == 3e-4


# ---- bad input: transformers missing or unable to open a checkpoint is an ERROR naming the file ------

def _harness_outcome(check, params, prediction="max_abs_diff <= 1"):
    """Run `check` through pv's harness; return its recorded outcome (ERROR expected)."""
    with pytest.raises(harness.FalsifierError):
        harness.falsify(check, params, prediction, "cpu", None, falsifier="FALSIFY-TEST-ORACLE-001")
    return harness.take_outcome()


def test_transformers_missing_is_an_error_not_a_skip(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)           # import transformers -> ImportError
    fixtures.clear()
    outcome = _harness_outcome(oracle_transformers.logits_agree, {"checkpoint": "tiny-trained", "path": "reference"})
    assert outcome.verdict == "ERROR"
    assert "OracleUnavailable" in outcome.message and "transformers is not importable" in outcome.message


def _written(tmp_path):
    directory = tmp_path / "ckpt"
    directory.mkdir()
    source = oracle_transformers.hf_random_checkpoint("hf-llama-random")
    for name in ("config.json", "model.safetensors"):
        (directory / name).write_bytes((source / name).read_bytes())
    return directory


@pytest.mark.parametrize("damage,file,reason", [
    ("no_config", "config.json", "missing"),
    ("bad_config", "config.json", "cannot read it"),
    ("no_weights", "model.safetensors", "missing"),
    ("truncated_weights", "model.safetensors", "cannot load the weights"),
    ("tensor_missing", "model.safetensors", "would initialise 1 tensor(s) at random"),
])
def test_a_checkpoint_transformers_cannot_open_is_an_error_naming_the_file(tmp_path, damage, file, reason):
    from safetensors.torch import load_file, save_file

    directory = _written(tmp_path)
    if damage == "no_config":
        (directory / "config.json").unlink()
    elif damage == "bad_config":
        (directory / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    elif damage == "no_weights":
        (directory / "model.safetensors").unlink()
    elif damage == "truncated_weights":
        data = (directory / "model.safetensors").read_bytes()
        (directory / "model.safetensors").write_bytes(data[: len(data) // 2])
    else:
        state = load_file(str(directory / "model.safetensors"))
        del state["model.norm.weight"]
        save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(oracle_transformers.OracleUnavailable) as raised:
        oracle_transformers.open_with_transformers(directory)
    message = str(raised.value)
    assert str(directory / file) in message and reason in message


def test_the_round_trip_check_errors_when_transformers_cannot_open_what_was_written(monkeypatch):
    def refuse(directory):
        raise oracle_transformers.OracleUnavailable(f"{directory}/config.json: transformers cannot read it (test)")

    monkeypatch.setattr(oracle_transformers, "open_with_transformers", refuse)
    from pvlab.falsifiers import roundtrip

    outcome = _harness_outcome(roundtrip.transformers_reopens_saved, {"checkpoint": "tiny-trained"})
    assert outcome.verdict == "ERROR" and "config.json: transformers cannot read it" in outcome.message


def test_the_oracle_checkpoints_are_written_by_transformers_itself():
    directory = oracle_transformers.hf_random_checkpoint("hf-qwen2-random")
    config = json.loads((directory / "config.json").read_text())
    assert "transformers_version" in config and (directory / "generation_config.json").is_file()
    from safetensors.torch import load_file

    state = load_file(str(directory / "model.safetensors"))
    assert float(state["model.layers.0.self_attn.q_proj.bias"].abs().max()) > 0      # a dropped bias would show
    assert not torch.equal(state["model.norm.weight"], torch.ones_like(state["model.norm.weight"]))
    assert tolerances.wants_tolerance(oracle_transformers.logits_agree)
