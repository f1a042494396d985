"""pvpack.checks.rope_scaling: a config.json asking for linearly scaled RoPE is refused (pvlab) or
computed as transformers computes it (transformers), never run as plain RoPE; a reader that
looks the rope type up under the legacy key is reported."""

from __future__ import annotations

import json

import pytest

from pvlab.falsifiers.mutants import registry
from pvpack.checks import rope_scaling

ARGS = dict(device="cpu", subject="tiny-trained", factor=4.0, seq=32)


def holds(seen: dict) -> bool:
    """FALSIFY-SCALED-ROPE-001's prediction."""
    return (seen["control_rel_diff"] <= 1e-4 and seen["separation"] >= 0.1
            and (seen["refused"] == 1 or seen["scaled_rel_diff"] <= 1e-4))


def test_pvlab_refuses_the_scaled_config_and_reads_the_control():
    seen = rope_scaling.scaled_rope_refused_or_computed(runtime="pvlab", **ARGS)
    assert holds(seen) and seen["refused"] == 1 and "linear" in seen["refusal"], seen


def test_transformers_computes_the_scaled_config():
    seen = rope_scaling.scaled_rope_refused_or_computed(runtime="transformers", **ARGS)
    assert holds(seen) and seen["refused"] == 0, seen


def test_a_scaled_config_run_as_plain_rope_is_reported():
    with registry()["rope_type_read_from_legacy_key"]():
        seen = rope_scaling.scaled_rope_refused_or_computed(runtime="pvlab", **ARGS)
    assert not holds(seen) and seen["refused"] == 0 and seen["scaled_rel_diff"] > 0.1, seen


def test_the_copy_rewrites_only_the_rope_fields(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"model_type": "qwen2", "rope_theta": 10000.0,
                                                    "rope_scaling": None, "vocab_size": 8}))
    (source / "model.safetensors").write_bytes(b"weights")
    out = rope_scaling._copy_with_rope(source, tmp_path / "copy", {"rope_type": "linear", "factor": 2.0,
                                                                   "rope_theta": 10000.0})
    config = json.loads((out / "config.json").read_text())
    assert config["rope_parameters"] == {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    assert "rope_scaling" not in config and config["vocab_size"] == 8
    assert (out / "model.safetensors").read_bytes() == b"weights"
