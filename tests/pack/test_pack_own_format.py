"""The pack against a runtime whose checkpoint is in its own format (tests/pack/own_format_runtime.py:
one torch.save file, its own tensor names, no safetensors): the checks that only hand the
directory to the adapter run and judge it; those that read Hugging Face tensors themselves are an
ERROR saying they do not apply; a batch the runtime cannot take is a SKIP naming the capability;
a subject written without the data a check reads names the `subjects.write` argument; the planted
bug at the adapter's seam (a loss that does not shift) is killed. Through pv's harness, as a
generated test runs a pack check."""

from __future__ import annotations

import sys

import pytest

from pv import harness, runtimes
from pvpack.checks import bias, evaluation, finetune, forward, gradients, roundtrip

import own_format_runtime


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return own_format_runtime.subject(tmp_path_factory.mktemp("bytelm"))


@pytest.fixture(autouse=True)
def registered():
    module = own_format_runtime.__name__
    runtimes.configure({"bytelm": f"{module}:ByteAdapter", "bytelm-unshifted": f"{module}:UnshiftedAdapter"})
    yield
    runtimes.configure(None)


def run(check, prediction, subject, params=None, runtime="bytelm"):
    harness.reset()
    try:
        harness.falsify(check, params=params or {}, prediction=prediction, device="cpu", falsifier="FALSIFY-T-001",
                        subject=str(subject), runtime=runtime)
    except BaseException:  # noqa: BLE001 - the outcome says which
        pass
    return harness.take_outcome()


@pytest.mark.parametrize("check, params, prediction", [
    (forward.forward_sanity, {"batches": 2},
     "nonfinite_logits == 0 and logit_std > 0.01 and argmax_min >= 0 and argmax_max < vocab_size"),
    (evaluation.label_integrity, {"batches": 2},
     "eval_mismatched_batches == 0 and subject_label_mismatches == 0 and labels_checked > 0"),
    (evaluation.train_val_ratio, {"batches": 2}, "max(train_loss / val_loss, val_loss / train_loss) < 3"),
    (finetune.finetune_from_checkpoint, {"steps": 4, "lr": 1e-4, "eval_batches": 2},
     "abs(first_val_loss - checkpoint_val_loss) <= 1e-4 * checkpoint_val_loss"),
])
def test_checks_that_hand_the_directory_to_the_adapter_run_on_its_own_format(trained, check, params, prediction):
    outcome = run(check, prediction, trained, params)
    assert outcome.verdict == "PASS", outcome.message
    assert outcome.runtime == "bytelm" and outcome.runtime_version == "bytelm 0.1"


def test_the_planted_bug_at_the_adapters_seam_is_killed(trained):
    outcome = run(evaluation.label_integrity, "eval_mismatched_batches == 0 and labels_checked > 0", trained,
                  {"batches": 2}, runtime="bytelm-unshifted")
    assert outcome.verdict == "FAIL", outcome.message
    assert outcome.observations["eval_scores_inputs"] > 0


def test_masked_targets_the_runtime_cannot_take_are_a_skip_naming_the_capability(trained):
    outcome = run(evaluation.token_weighting, "rel_diff <= 1e-3", trained, {"keep_fraction": 0.25})
    assert outcome.verdict == "SKIP", outcome.message
    assert "'evaluate'" in outcome.message and "contiguous windows" in outcome.message


@pytest.mark.parametrize("check, prediction", [
    (forward.populate_coverage, "tensors_missing == 0"),
    (bias.qkv_bias_presence, "qkv_bias_expected > 0"),
    (bias.qkv_bias_effect, "bias_effect_max_abs > 1e-3"),
    (gradients.gradient_matches_finite_differences, "worst_rel_err <= 0.02"),   # moves weights in model.safetensors
])
def test_checks_that_read_hugging_face_tensors_say_they_do_not_apply(trained, check, prediction):
    outcome = run(check, prediction, trained, {"path": "reference"})
    assert outcome.verdict == "ERROR", outcome.message       # before: a FAIL (0 biases) or a bare ModuleNotFoundError
    assert "model*.safetensors" in outcome.message and "does not apply" in outcome.message
    assert "drop the falsifier" in outcome.message


def test_a_subject_without_train_windows_names_the_write_argument(tmp_path):
    subject = own_format_runtime.subject(tmp_path, train_windows=False, steps=0)
    outcome = run(evaluation.train_val_ratio, "train_loss > 0", subject, {"batches": 2})
    assert outcome.verdict == "ERROR"
    assert "pvpack.subjects.write(train_windows=...)" in outcome.message and "subject_provider" in outcome.message


def test_populate_coverage_says_what_it_needs_from_transformers(trained, monkeypatch):
    checkpoint = trained.parent / "checkpoint"       # config.json holds only vocab_size: no model_type
    with pytest.raises(RuntimeError, match=r"transformers cannot read .*config\.json .*architectures transformers"):
        forward.expected_tensors(checkpoint)
    monkeypatch.setitem(sys.modules, "transformers", None)   # as in an environment without it
    with pytest.raises(RuntimeError, match="not installed: `pip install transformers`"):
        forward.expected_tensors(checkpoint)


def test_a_save_in_its_own_format_reloads_exactly(trained):
    """The runtime saves one torch.save file and config.json: the round trip judges it (before
    2026-12-03 the protocol demanded *.safetensors from save(): an ERROR on a correct runtime)."""
    outcome = run(roundtrip.saved_model_reloads_exactly,
                  "missing_tensors == 0 and state_max_abs_diff == 0 and logits_max_abs_diff == 0 "
                  "and trained_vs_subject > 0 and tensors >= 1", trained, {"steps": 2, "lr": 1e-3, "rows": 2})
    assert outcome.verdict == "PASS", outcome.message
