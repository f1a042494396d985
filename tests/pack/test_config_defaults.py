"""pvpack.checks.config_defaults: a config.json in transformers' minimal form (class defaults
left out) is read as the full one, on pvlab's runtime and on transformers (tiny-trained, CPU); a
reader that takes an absent tie_word_embeddings for a tied head is reported."""

from __future__ import annotations

import pytest

from pvlab.falsifiers.mutants import registry
from pvpack.checks import config_defaults

ARGS = dict(device="cpu", subject="tiny-trained", seq=16, seed=0)


def holds(seen: dict) -> bool:
    """FALSIFY-MINIMAL-CONFIG-001's prediction."""
    return (seen["full_rel_diff"] <= 1e-4 and seen["minimal_refused"] == 0 and seen["minimal_rel_diff"] <= 1e-4
            and seen["dropped_keys"] >= 3 and seen["tie_key_dropped"] == 1 and seen["separation"] >= 0.1)


@pytest.mark.parametrize("runtime", ["pvlab", "transformers"])
def test_the_minimal_config_reads_as_the_full_one(runtime):
    seen = config_defaults.minimal_config_reads_as_full(runtime=runtime, **ARGS)
    assert holds(seen), seen


@pytest.mark.parametrize("bug", ["absent_tie_key_reads_tied", "untied_head_tied_on_load"])
def test_a_head_read_as_tied_is_reported(bug):
    with registry()[bug]():
        seen = config_defaults.minimal_config_reads_as_full(runtime="pvlab", **ARGS)
    assert not holds(seen), seen


def test_the_minimal_config_drops_only_class_defaults():
    defaults = {"model_type": "qwen2", "tie_word_embeddings": False, "rms_norm_eps": 1e-6, "vocab_size": 151936}
    full = {"model_type": "qwen2", "tie_word_embeddings": False, "rms_norm_eps": 1e-5, "vocab_size": 512,
            "architectures": ["Qwen2ForCausalLM"]}
    assert config_defaults.minimal_config(full, defaults) == {"model_type": "qwen2", "rms_norm_eps": 1e-5,
                                                             "vocab_size": 512,
                                                             "architectures": ["Qwen2ForCausalLM"]}


def test_a_tied_subject_gets_a_distinct_head():
    import torch

    embed = torch.randn(8, 4)
    out = config_defaults._untied_tensors({"model.embed_tokens.weight": embed}, seed=0)
    assert not torch.equal(out["lm_head.weight"], embed) and out["lm_head.weight"].shape == embed.shape
