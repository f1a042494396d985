"""pvpack.checks.dynamic_range: the fast path keeps float32's exponent range — logits past
float16's 65504 are finite and scale exactly with a power-of-two final norm — on pvlab's runtime
and on transformers (tiny-trained, CPU); a float16 autocast, in either runtime, is reported."""

from __future__ import annotations

import pytest

from pvlab.falsifiers.mutants import registry
from pvpack.checks import dynamic_range

ARGS = dict(device="cpu", subject="tiny-trained", seq=16, rows=2)


def holds(seen: dict) -> bool:
    """FALSIFY-FAST-PATH-RANGE-001's prediction."""
    return (seen["nonfinite_logits"] == 0 and seen["rel_diff"] <= 1e-3 and seen["reference_rel_diff"] <= 1e-6
            and seen["scaled_max_abs"] >= 2 ** 20)


@pytest.mark.parametrize("runtime", ["pvlab", "transformers"])
def test_the_fast_path_keeps_the_exponent_range(runtime):
    seen = dynamic_range.fast_path_exponent_range(runtime=runtime, **ARGS)
    assert holds(seen), seen
    assert seen["scaled_max_abs"] > 16 * dynamic_range.FLOAT16_MAX


@pytest.mark.parametrize("runtime, bug", [("pvlab", "fast_path_autocasts_to_float16"),
                                          ("transformers", "hf_fast_path_autocasts_to_float16")])
def test_a_float16_autocast_is_reported(runtime, bug):
    with registry()[bug]():
        seen = dynamic_range.fast_path_exponent_range(runtime=runtime, **ARGS)
    assert not holds(seen) and seen["nonfinite_logits"] > 0, seen


def test_the_final_norm_is_the_one_outside_the_layers():
    names = {"model.layers.0.input_layernorm.weight": 0, "model.layers.0.post_attention_layernorm.weight": 0,
             "model.norm.weight": 0, "model.embed_tokens.weight": 0}
    assert dynamic_range.final_norm_name(names) == "model.norm.weight"


def test_no_final_norm_is_not_applicable():
    with pytest.raises(dynamic_range.NotApplicable):
        dynamic_range.final_norm_name({"model.layers.0.input_layernorm.weight": 0, "lm_head.weight": 0})
