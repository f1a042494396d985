"""pvlab.falsifiers.path_precision (FALSIFY-PATH-PRECISION-001): holds on the runtime, false under
fast_path_autocasts_to_float16, and reports a reference path run under autocast."""

from __future__ import annotations

import importlib

import torch

from falsifier_helpers import assert_holds_and_killed, observe

CONTRACT, FALSIFIER, BUG = "path-precision", "FALSIFY-PATH-PRECISION-001", "fast_path_autocasts_to_float16"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_it_counts_every_product_of_both_paths():
    observations, _ = observe(CONTRACT, FALSIFIER)
    assert observations["fast_bf16_products"] >= 32 and observations["fast_other_products"] == 0
    assert observations["reference_fp32_products"] >= 32 and observations["reference_other_products"] == 0


def test_it_reports_a_reference_path_under_autocast(monkeypatch):
    """Another defect: autocast_for's reference branch enables autocast (bf16) instead of turning it off."""
    kernels = importlib.import_module("pvlab.runtime.kernels")
    original = kernels.autocast_for

    def reference_autocast(path, device_type):
        if path == "reference":
            return torch.autocast(device_type=device_type, dtype=torch.bfloat16)
        return original(path, device_type)

    monkeypatch.setattr(kernels, "autocast_for", reference_autocast)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    assert observations["reference_other_products"] > 0


def test_a_product_is_classified_by_its_factors_not_the_term_it_is_added_to():
    """On CUDA the fused loss adds bf16 products into its fp32 gradient buffer in one GEMM
    (addmm(acc, a, b, out_dtype=float32, out=acc)): a bf16 product. Classified by its first
    tensor argument it counted as fp32 on an H200 (a false FAIL of the fast path)."""
    from pvlab.falsifiers.path_precision import product_dtype

    bf16, fp32 = torch.zeros(2, 2, dtype=torch.bfloat16), torch.zeros(2, 2)
    assert product_dtype("addmm", (fp32, bf16, bf16)) == "bfloat16"
    assert product_dtype("baddbmm", (fp32, bf16[None], bf16[None])) == "bfloat16"
    # a genuine fp32 product added to anything stays fp32, and unequal factors are named
    assert product_dtype("addmm", (bf16, fp32, fp32)) == "float32"
    assert product_dtype("mm", (bf16, fp32)) == "mixed:bfloat16+float32"
    assert product_dtype("linear", (fp32, fp32, bf16)) == "float32"   # input and weight; the bias is added
    assert product_dtype("_scaled_dot_product_efficient_attention", (bf16, bf16, bf16, None)) == "bfloat16"
    assert product_dtype("mm", ()) is None
