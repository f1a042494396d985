"""The pack's training-side claims on every model family the transformers adapter is run on
(tests/pack/families_tiny.py: Qwen2, Llama, Llama with attention biases, Mistral's sliding
window, Gemma, Gemma2, Phi-3's fused projections, GPT-NeoX, GPT-2's learned positions and
Conv1D, OPT), judged by pv's harness with the predictions of the contracts that run them
(causal-logits, independent-rows, gradient-accumulation-pack, gradient-clipping,
gradient-correctness, adamw-update, checkpoint-reload, seeded-init),
their sizes cut to the families' 4 x 16 batches: each PASSes, or is an ERROR that says why (the
fast path of Gemma2, which transformers cannot run with SDPA; accumulation and gradient-correctness on
the families built with dropout, whose steps differ by their draws)."""

from __future__ import annotations

import pytest

from pvpack.checks import accumulation, batching, causality, clipping, gradients, optimizer, roundtrip, seeding

import families_tiny
from test_families import NO_FAST_PATH, judge, subjects  # noqa: F401 - the module's subject fixture

CAUSAL = (causality.future_tokens_change_nothing_before, {"cuts": 4, "rows": 4, "seed": 0},
          "leaked_positions == 0 and max_abs_diff_before <= tol and changed_at_cut >= 0.9 and cuts == 4")
ACCUMULATION = (accumulation.accumulated_step_matches_full_batch,
                {"path": "reference", "micro_batches": 2, "rows": 4, "min_len": 3, "max_len": 16, "seed": 0},
                "grad_max_abs_diff <= grad_tol and loss_abs_diff <= loss_tol and whole_loss_abs_diff <= loss_tol "
                "and grad_nonfinite == 0 and grad_names_differ == 0 and min_micro_tokens < max_micro_tokens")
ADAMW = (optimizer.adamw_update_matches_textbook,
         {"steps": 3, "lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 2, "total_steps": 10, "weight_decay": 0.1,
          "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "rtol": 2e-3},
         "update_max_abs_diff <= tol and mismatched_parameters == 0 and matrices_decayed == matrices "
         "and matrices >= 1 and steps == 3")
RELOAD = (roundtrip.saved_model_reloads_exactly, {"path": "reference", "steps": 2, "lr": 1e-3, "rows": 2},
          "missing_tensors == 0 and extra_tensors == 0 and dtype_changes == 0 and shape_changes == 0 "
          "and state_max_abs_diff == 0 and logits_max_abs_diff <= 1e-6 * logits_max_abs_ref "
          "and trained_vs_subject > 0 and tensors >= 1")
ROWS = (batching.rows_are_independent, {"rows": 4},
        "alone_max_abs_diff <= tol and reordered_max_abs_diff <= tol and rows_differing == 0 "
        "and distinct_rows == rows and rows >= 4")
CLIP = (clipping.clipping_is_global, {"path": "reference", "clip_fraction": 0.25, "headroom": 4.0, "lr": 1e-3, "seed": 0},
        "raw_norm > 0 and names_differ == 0 and tensors >= 1 and clipped_max_rel_diff <= 1e-4 "
        "and 0.9999 <= clipped_norm_ratio <= 1.0001 and tensor_ratio_spread <= 1e-4 and unclipped_max_rel_diff <= 1e-4")
GRADIENTS = (gradients.gradient_matches_finite_differences, {"path": "reference", "rows": 2, "step": 1e-2, "seed": 0},
             "worst_rel_err <= 0.02 and missing_gradients == 0 and tensors_checked >= 1")
SEEDED = (seeding.random_init_is_seeded, {"path": "reference", "seed": 0, "lr": 1e-3, "step_rtol": 1e-3},
          "same_seed_max_abs_diff == 0 and same_seed_step_max_abs_diff <= step_tol and drawn_tensors >= 1 "
          "and matrices_constant == 0 and shape_mismatches == 0 and tensors >= 1")
# transformers builds GPT-2 and OPT with dropout 0.1: a step's gradients depend on its draws, so
# accumulation cannot be compared step against step (an ERROR saying so, never a FAIL); the other
# claims are judged in eval mode, on the applied gradient, or from one generator state
DROPOUT = {"gpt2", "opt"}
CASES = {"causality-reference": (CAUSAL[0], {**CAUSAL[1], "path": "reference"}, CAUSAL[2]),
         "causality-fast": (CAUSAL[0], {**CAUSAL[1], "path": "fast"}, CAUSAL[2]),
         "rows-reference": (ROWS[0], {**ROWS[1], "path": "reference"}, ROWS[2]),
         "rows-fast": (ROWS[0], {**ROWS[1], "path": "fast"}, ROWS[2]),
         "accumulation": ACCUMULATION, "clipping": CLIP, "gradients": GRADIENTS, "adamw": ADAMW, "reload": RELOAD, "seeded": SEEDED}


@pytest.mark.slow
@pytest.mark.parametrize("family", families_tiny.FAMILIES)
@pytest.mark.parametrize("case", list(CASES))
def test_each_training_claim_holds_on_each_family(family, case, subjects):  # noqa: F811
    check, params, prediction = CASES[case]
    outcome = judge(check, params, prediction, subjects(family))
    if case == "gradients" and family in DROPOUT:
        assert outcome.verdict == "ERROR" and "draws random numbers" in (outcome.message or ""), outcome.message
        return
    if case == "accumulation" and family in DROPOUT:
        assert outcome.verdict == "ERROR" and "not deterministic" in (outcome.message or ""), outcome.message
        return
    if case in ("causality-fast", "rows-fast") and family in NO_FAST_PATH:
        assert outcome.verdict == "ERROR" and "scaled_dot_product_attention" in (outcome.message or ""), \
            outcome.message
        return
    assert outcome.verdict == "PASS", (outcome.message, outcome.observations)
