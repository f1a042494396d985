"""Packed batches (runtime.data.pack_documents, LMBatch.from_packed_rows, kernels.document_positions /
document_causal_mask, CausalLM with document_ids): the layout, and each document's logits equal to
the document alone."""

from __future__ import annotations

import pytest
import torch

from pvlab import runtime
from pvlab.runtime import data, kernels
from pvlab.runtime.errors import ArgumentError, DataError
from pvlab.runtime.kernels import IGNORE_INDEX

DOCS = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]]


def test_packed_rows_keep_every_target_inside_its_document():
    batch = data.LMBatch.from_packed_rows([DOCS[:2], DOCS[2:]], width=8)
    assert batch.inputs.tolist() == [[5, 6, 7, 9, 10, 0, 0, 0], [12, 13, 14, 15, 0, 0, 0, 0]]
    # 8 -> 9 would cross from the first document into the second: never a target.
    assert batch.targets.tolist() == [[6, 7, 8, 10, 11, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX],
                                      [13, 14, 15, 16, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]]
    assert batch.document_ids.tolist() == [[0, 0, 0, 1, 1, -1, -1, -1], [0, 0, 0, 0, -1, -1, -1, -1]]


def test_packed_rows_refuse_short_documents_and_overfull_rows():
    with pytest.raises(DataError, match="at least 2"):
        data.LMBatch.from_packed_rows([[[1, 2], [3]]])
    with pytest.raises(DataError, match="more than the width"):
        data.LMBatch.from_packed_rows([DOCS], width=4)


def test_pack_documents_splits_only_documents_longer_than_a_row():
    long = list(range(100, 111))                                     # 11 tokens = 10 targets
    rows = data.pack_documents([DOCS[0], long, DOCS[1]], seq_len=4)
    flat_targets = [t for row in rows for doc in row for t in doc[1:]]
    assert sorted(flat_targets) == sorted(DOCS[0][1:] + long[1:] + DOCS[1][1:])   # each target once
    assert all(sum(len(doc) - 1 for doc in row) <= 4 for row in rows)
    assert [DOCS[0]] in rows or any(DOCS[0] in row for row in rows)


def test_document_positions_restart_and_mask_is_block_diagonal_causal():
    ids = torch.tensor([[0, 0, 1, 1, 1, -1]])
    assert kernels.document_positions(ids).tolist() == [[0, 1, 0, 1, 2, 0]]
    mask = kernels.document_causal_mask(ids)[0, 0]
    expected = torch.zeros(6, 6, dtype=torch.bool)
    for i, j in [(0, 0), (1, 0), (1, 1), (2, 2), (3, 2), (3, 3), (4, 2), (4, 3), (4, 4), (5, 5)]:
        expected[i, j] = True
    assert torch.equal(mask, expected)


@pytest.mark.parametrize("path", ["reference", "fast"])
def test_each_packed_document_gets_its_logits_alone(path):
    model = runtime.init_model(config="tiny", weights="random", seed=0, path=path, parity_gate=False)
    batch = data.LMBatch.from_packed_rows([DOCS], width=12)
    with torch.no_grad():
        packed = model(batch.inputs, document_ids=batch.document_ids)                  # (1, 12, V)
        start = 0
        for document in DOCS:
            alone = model(torch.tensor([document[:-1]]))[0]
            got = packed[0, start:start + len(document) - 1]
            tolerance = 2e-2 * float(alone.abs().max()) if path == "fast" else 1e-5
            assert float((got - alone).abs().max()) <= tolerance
            start += len(document) - 1


def test_packed_loss_counts_every_document_token_once():
    model = runtime.init_model(config="tiny", weights="random", seed=1, parity_gate=False)
    batch = data.LMBatch.from_packed_rows([DOCS[:2], DOCS[2:]])
    with torch.no_grad():
        packed = float(model.loss(batch.inputs, batch.targets, document_ids=batch.document_ids))
        total, count = 0.0, 0
        for document in DOCS:
            logits = model(torch.tensor([document[:-1]]))[0].double()
            total -= float(torch.log_softmax(logits, -1).gather(1, torch.tensor(document[1:])[:, None]).sum())
            count += len(document) - 1
    assert abs(packed - total / count) < 1e-5


def test_layout_arguments_are_checked():
    model = runtime.init_model(config="tiny", weights="random", seed=0, parity_gate=False)
    ids = torch.tensor([[1, 2, 3]])
    with pytest.raises(ArgumentError, match="not both"):
        model(ids, attention_mask=torch.ones(1, 3), document_ids=torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ArgumentError, match="shape of input_ids"):
        model(ids, document_ids=torch.zeros(1, 4, dtype=torch.long))


def test_packed_batches_are_packed_and_seeded():
    documents = [[i, i + 1, i + 2, i + 3] for i in range(0, 200, 4)]
    first = next(data.packed_batches(documents, batch_size=2, seq_len=8, seed=3))
    again = next(data.packed_batches(documents, batch_size=2, seq_len=8, seed=3))
    assert first.document_ids is not None and first.inputs.shape == (2, 8)
    assert torch.equal(first.inputs, again.inputs)
    assert int(first.document_ids.max()) >= 1                      # several documents share a row
    with pytest.raises(DataError, match="fewer than one batch"):
        next(data.packed_batches(documents[:2], batch_size=4, seq_len=8, seed=0))
