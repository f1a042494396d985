"""Subjects in the checks' fixtures: `checkpoint: <subject>` works like `checkpoint: tiny-trained`,
and under a subject (PV_SUBJECT) the tiny names stand for the subject and its random twin."""

from __future__ import annotations

import dataclasses
import math

import pytest

from pv.harness import DeviceUnavailable
from pvlab.falsifiers import fixtures
from pvlab.runtime import corpus, subjects

from falsifier_helpers import observe

SMALL = dataclasses.replace(subjects.STDLIB_RECIPE, config="tiny", steps=4, batch_size=2, seq_len=32,
                            warmup_steps=1, eval_every=4, eval_batches=1, corpus="stdlib/json",
                            tokenizer_vocab_size=300, val_fraction=0.2, lr=3e-3, min_lr=3e-4)


@pytest.fixture(autouse=True)
def _forget_fixtures():
    fixtures.clear()
    fixtures._subject_dir.cache_clear()
    yield
    fixtures.clear()
    fixtures._subject_dir.cache_clear()


@pytest.mark.parametrize("checkpoint, subject, expected", [
    ("tiny-trained", None, "tiny-trained"),
    ("tiny-random", None, "tiny-random"),
    ("tiny-trained", "qwen2-0.5b-stdlib", "qwen2-0.5b-stdlib"),
    ("tiny-random", "qwen2-0.5b-stdlib", "qwen2-0.5b-stdlib-random"),
    ("tiny-random", "llama-370m-stdlib", "llama-370m-stdlib-random"),
    ("qwen2-0.5b-stdlib", "llama-370m-stdlib", "qwen2-0.5b-stdlib"),     # explicit names stay
    ("tiny-trained", "tiny-trained", "tiny-trained"),
])
def test_the_tiny_names_stand_for_the_subject_and_its_random_twin(checkpoint, subject, expected):
    assert fixtures.for_subject(checkpoint, subject) == expected


@pytest.mark.parametrize("subject", ["gpt-5", "qwen2-0.5b-stdlib-random"])
def test_only_subjects_can_be_subjects(subject):
    with pytest.raises(ValueError):
        fixtures.for_subject("tiny-trained", subject)


def test_the_environment_selects_the_subject(monkeypatch):
    monkeypatch.delenv(fixtures.SUBJECT_ENV, raising=False)
    assert fixtures.resolve("tiny-random") == "tiny-random"
    monkeypatch.setenv(fixtures.SUBJECT_ENV, "qwen2-0.5b-stdlib")
    assert fixtures.resolve("tiny-random") == "qwen2-0.5b-stdlib-random"
    assert fixtures.trained_of(fixtures.resolve("tiny-random")) == "qwen2-0.5b-stdlib"
    with pytest.raises(ValueError, match="unknown checkpoint"):
        fixtures.resolve("tiny-trainde")


def test_a_subject_that_is_not_here_makes_the_check_skip(monkeypatch, tmp_path):
    monkeypatch.setenv("PV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(subjects, "_device_present", lambda device: device == "cpu")
    monkeypatch.setitem(subjects.SUBJECTS, "small-cuda",
                        subjects.Subject("small-cuda", SMALL, "cuda", "fast", "needs a GPU"))
    with pytest.raises(DeviceUnavailable, match="small-cuda trains on cuda"):
        fixtures.checkpoint_dir("small-cuda-random")


@pytest.mark.slow
def test_seed_checks_run_on_a_real_text_subject(monkeypatch, tmp_path):
    """The seed falsifiers' own params (checkpoint: tiny-trained / tiny-random) under a subject
    trained on the standard library's json package: the observations are the subject's."""
    monkeypatch.setenv("PV_CACHE_DIR", str(tmp_path))
    monkeypatch.setitem(subjects.SUBJECTS, "small-stdlib",
                        subjects.Subject("small-stdlib", SMALL, "cpu", "reference", "test subject"))
    monkeypatch.setenv(fixtures.SUBJECT_ENV, "small-stdlib")
    files = len(corpus.load("stdlib/json").files)

    split, judged = observe("apr-pretrain-eval-methodology", "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-004")
    assert judged.holds and split["heldout_documents"] + split["train_documents"] == files   # not 4,000 synthetic

    labels, judged = observe("apr-pretrain-eval-methodology", "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-003")
    assert judged.holds and labels["labels_checked"] == 2 * 2 * 32     # 2 batches of the subject's 2 x 32

    random_init, judged = observe("apr-pretrain-eval-methodology", "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-001")
    assert judged.holds and random_init["tokens"] == 4 * 2 * 32
    trained, _ = observe("apr-pretrain-cuda-forward-parity", "FALSIFY-CUDA-FORWARD-PARITY-001")
    assert trained["vocab_size"] == 512 and trained["val_loss"] < random_init["val_loss"]
    assert abs(random_init["val_loss"] - math.log(512)) < 0.5             # random init: about uniform

    sanity, judged = observe("apr-cpu-forward-sanity", "FALSIFY-CPU-FORWARD-SANITY-001")
    assert judged.holds and sanity["positions"] == 2 * 2 * 32


def test_an_existing_directory_is_a_checkpoint_name(tmp_path):
    assert fixtures.checkpoint_dir(str(tmp_path)) == tmp_path.resolve()


def test_an_unknown_name_or_missing_directory_is_refused(tmp_path):
    for name in ("no-such-checkpoint", str(tmp_path / "absent")):
        with pytest.raises(ValueError, match="unknown checkpoint"):
            fixtures.checkpoint_dir(name)


def test_a_checkpoint_without_its_training_recipe_says_so(tmp_path):
    """A plain HF checkpoint has no runtime.json: checks that score it on its training data
    ERROR with a message that says why (never a pass)."""
    fixtures.clear()
    with pytest.raises(FileNotFoundError, match="has no runtime.json"):
        fixtures.recipe(str(tmp_path))
