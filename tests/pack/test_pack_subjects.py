"""pvpack.subjects: a subject directory round-trips; a bare checkpoint or a subject without the
data a check asks for is a clear error naming what is missing."""

from __future__ import annotations

import pytest

from pv import runtimes
from pvpack.subjects import SubjectError, read, resolve

import pack_tiny


def test_a_subject_directory_round_trips(tmp_path):
    subject = read(pack_tiny.subject(tmp_path))
    assert subject.name == "tiny-test" and subject.vocab_size == pack_tiny.VOCAB
    assert len(subject.heldout()) == 4 and subject.heldout(2)[1].inputs.shape == (pack_tiny.ROWS, pack_tiny.SEQ)
    assert len(subject.train(2, start=3)) == 2 and subject.prompts(2, 4) == [[1, 2, 3, 4], [9, 10, 11, 12]]
    assert subject.recorded == {"val_loss": 4.2} and not subject.is_random
    assert resolve(f"path:{tmp_path / 'subject'}").name == "tiny-test"


def test_asking_for_more_than_a_subject_holds_is_an_error(tmp_path):
    subject = read(pack_tiny.subject(tmp_path))
    with pytest.raises(SubjectError, match="holds 4 batches"):
        subject.heldout(5)
    with pytest.raises(SubjectError, match="holds 2 prompts"):
        subject.prompts(3, 4)


def test_a_bare_checkpoint_has_no_batches(tmp_path):
    bare = read(pack_tiny.checkpoint(tmp_path / "ckpt"))
    with pytest.raises(SubjectError, match="a bare checkpoint has no heldout batches"):
        bare.heldout(1)


def test_a_name_without_a_provider_is_an_error(tmp_path):
    runtimes.configure({}, None)
    try:
        with pytest.raises(SubjectError, match="names no subject_provider"):
            resolve("tiny-trained")
    finally:
        runtimes.configure(None)
    with pytest.raises(SubjectError, match="neither a subject directory"):
        read(tmp_path)


def test_a_subject_written_without_a_kind_of_batches_names_the_write_argument(tmp_path):
    directory = pack_tiny.subject(tmp_path)
    (directory / "train_windows.safetensors").unlink()
    with pytest.raises(SubjectError, match=r"written without pvpack\.subjects\.write\(train_windows=\.\.\.\), fixed "
                                           r"windows of the training data.*subject_provider"):
        read(directory).train_windows(1)
