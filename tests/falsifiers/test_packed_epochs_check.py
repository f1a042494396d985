"""pvlab.falsifiers.packed_epochs (FALSIFY-PACKED-EPOCHS-001): holds on the runtime, false under
packed_epochs_repeat_first_order, and reports other defects of packed passes by their property:
a pass that drops its last row, an order drawn from the global RNG."""

from __future__ import annotations

import torch

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers.mutants import registry
from pvlab.runtime import data

CONTRACT, FALSIFIER, BUG = "packed-epochs", "FALSIFY-PACKED-EPOCHS-001", "packed_epochs_repeat_first_order"


def _packed_batches(*, drop_last_row: bool = False, global_rng: bool = False):
    """runtime.data.packed_batches as written, with one defect switched on."""

    def packed_batches(encoded_documents, *, batch_size, seq_len, seed):
        generator = torch.Generator(device="cpu").manual_seed(seed)
        while True:
            order = torch.randperm(len(encoded_documents), generator=None if global_rng else generator).tolist()
            rows = data.pack_documents([encoded_documents[i] for i in order], seq_len=seq_len)
            if drop_last_row:
                rows = rows[:-1]   # the defect: the pass's last row is never trained on
            for start in range(0, len(rows) - batch_size + 1, batch_size):
                yield data.LMBatch.from_packed_rows(rows[start:start + batch_size], width=seq_len)

    return packed_batches


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_the_copy_the_defects_are_planted_in_is_the_runtime():
    reference = data.packed_batches([[1, 2, 3, 4, 5]] * 8, batch_size=2, seq_len=8, seed=3)
    copy = _packed_batches()([[1, 2, 3, 4, 5]] * 8, batch_size=2, seq_len=8, seed=3)
    for _ in range(6):
        a, b = next(reference), next(copy)
        assert torch.equal(a.inputs, b.inputs) and torch.equal(a.document_ids, b.document_ids)


def test_it_sees_every_pass_replaying_the_first():
    with registry()[BUG]():
        observations, _ = observe(CONTRACT, FALSIFIER)
    assert observations["repeated_orders"] == 3 * 6   # 3 cases x 6 pairs of passes
    assert observations["coverage_errors"] == observations["nondeterministic"] == 0


def test_it_sees_a_pass_that_drops_its_last_row(monkeypatch):
    monkeypatch.setattr(data, "packed_batches", _packed_batches(drop_last_row=True))
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    assert observations["coverage_errors"] > 0
    assert observations["repeated_orders"] == 0


def test_it_sees_an_order_drawn_from_the_global_rng(monkeypatch):
    monkeypatch.setattr(data, "packed_batches", _packed_batches(global_rng=True))
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds and observations["nondeterministic"] > 0
