"""Corpus, tokenizer, held-out split and batches."""

from __future__ import annotations

import pytest
import torch

from pvlab.runtime import data, errors
from pvlab.runtime.data import LMBatch
from pvlab.runtime.kernels import IGNORE_INDEX


def test_synthetic_corpus_is_deterministic_and_seed_dependent():
    assert data.synthetic_python_corpus(50, seed=3) == data.synthetic_python_corpus(50, seed=3)
    assert data.synthetic_python_corpus(50, seed=3) != data.synthetic_python_corpus(50, seed=4)
    for document in data.synthetic_python_corpus(50, seed=3):
        compile(document, "<corpus>", "exec")  # Python-like means: it parses


def test_split_is_by_document_and_disjoint():
    documents = data.synthetic_python_corpus(400, seed=0)
    documents += documents[:50]  # duplicates must not straddle the split
    train, held_out = data.split_documents(documents, val_fraction=0.1, seed=0)
    assert held_out and train
    assert data.overlapping_documents(train, held_out) == []
    data.verify_disjoint(train, held_out)
    assert set(train) | set(held_out) == set(documents)
    assert data.split_documents(documents, val_fraction=0.1, seed=0) == (train, held_out)


def test_verify_disjoint_detects_a_leak():
    train, held_out = ["a = 1\n", "b = 2\n"], ["c = 3\n", "a = 1\n"]
    assert len(data.overlapping_documents(train, held_out)) == 1
    with pytest.raises(errors.DataError, match="1 held-out document"):
        data.verify_disjoint(train, held_out)


@pytest.mark.parametrize("documents", [[], ["only one"], ["same", "same"]])
def test_too_small_corpus_is_refused(documents):
    with pytest.raises(errors.DataError):
        data.split_documents(documents, val_fraction=0.1, seed=0)


def test_empty_corpus_directory_is_refused_naming_it(tmp_path):
    (tmp_path / "empty.py").write_text("   \n")
    (tmp_path / "notes.txt").write_text("not python")
    with pytest.raises(errors.DataError, match=str(tmp_path)):
        data.read_corpus(tmp_path)
    with pytest.raises(errors.DataError, match="does not exist"):
        data.read_corpus(tmp_path / "missing")


def test_corpus_directory_is_read_in_path_order(tmp_path):
    (tmp_path / "b.py").write_text("b = 2\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.py").write_text("a = 1\n")
    (tmp_path / "a.py").write_text("first = 0\n")
    assert data.read_corpus(tmp_path) == ["first = 0\n", "b = 2\n", "a = 1\n"]


def test_tokenizer_is_byte_level_bpe_deterministic_and_lossless():
    documents = data.synthetic_python_corpus(200, seed=0)
    tokenizer = data.train_tokenizer(documents, 400)
    assert tokenizer.get_vocab_size() == 400
    assert tokenizer.token_to_id(data.END_OF_TEXT) == 0
    assert data.train_tokenizer(documents, 400).to_str() == tokenizer.to_str()
    for text in ("def fib(n):\n    return n\n", "ünïcödé ✓ \t\r\n", documents[0]):
        assert tokenizer.decode(tokenizer.encode(text).ids) == text
    assert len(tokenizer.encode(documents[1]).ids) < len(documents[1]) / 2  # merges compress


def test_tokenizer_refuses_empty_corpus_and_tiny_vocab():
    with pytest.raises(errors.DataError, match="empty corpus"):
        data.train_tokenizer([], 512)
    with pytest.raises(errors.DataError, match="too small"):
        data.train_tokenizer(["x = 1"], 100)


def test_batch_targets_are_inputs_shifted_by_one():
    batch = LMBatch.from_sequences([[1, 2, 3, 4, 5], [6, 7, 8]])
    assert batch.inputs.tolist() == [[1, 2, 3, 4], [6, 7, 8, 0]]  # 8 has no target: padding
    assert batch.targets.tolist() == [[2, 3, 4, 5], [7, 8, IGNORE_INDEX, IGNORE_INDEX]]
    assert batch.num_target_tokens == 6


@pytest.mark.parametrize("sequences,message", [
    ([], "zero sequences"),
    ([[1, 2], [3]], "sequence 1 has 1 token"),
    ([[]], "sequence 0 has 0 token"),
])
def test_sequences_shorter_than_two_tokens_are_refused(sequences, message):
    with pytest.raises(errors.DataError, match=message):
        LMBatch.from_sequences(sequences)


def test_training_batches_are_seeded_and_held_out_batches_fixed():
    stream = torch.arange(1000)
    first = [b.inputs for b, _ in zip(data.random_batches(stream, batch_size=2, seq_len=8, seed=1), range(3))]
    again = [b.inputs for b, _ in zip(data.random_batches(stream, batch_size=2, seq_len=8, seed=1), range(3))]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    held_out = data.sequential_batches(stream, batch_size=4, seq_len=8)
    assert held_out[0].inputs[0].tolist() == list(range(8)) and held_out[0].targets[0].tolist() == list(range(1, 9))
    assert held_out[0].inputs[1, 0].item() == 9  # windows do not overlap
    with pytest.raises(errors.DataError, match="fewer than one window"):
        data.sequential_batches(torch.arange(5), batch_size=1, seq_len=8)
