"""The argument-domains checks (pvlab.falsifiers.edges): each holds on the runtime as it is and
FAILS on a runtime whose domain edge is moved in a way other than its planted bug (the planted
bugs themselves are measured by `pv strength`)."""

from __future__ import annotations

import pytest

from falsifier_helpers import observe
from pvlab.runtime import data, distributed, trainer
from pvlab.runtime.errors import ArgumentError, DataError

CHEAP = ["FALSIFY-ARGUMENT-DOMAINS-001", "FALSIFY-ARGUMENT-DOMAINS-002", "FALSIFY-ARGUMENT-DOMAINS-003"]


@pytest.mark.parametrize("falsifier_id", CHEAP)
def test_holds_on_the_runtime(falsifier_id):
    observations, judgement = observe("argument-domains", falsifier_id)
    assert judgement.holds, observations


def _fails(falsifier_id):
    observations, judgement = observe("argument-domains", falsifier_id)
    assert not judgement.holds, observations
    return observations


def test_negative_rank_accepted_is_seen(monkeypatch):
    original = distributed.shard_indices

    def shard_indices(num_items, *, rank, world_size, seed, epoch):
        return original(num_items, rank=rank % world_size, world_size=world_size, seed=seed, epoch=epoch)

    monkeypatch.setattr(distributed, "shard_indices", shard_indices)
    assert _fails("FALSIFY-ARGUMENT-DOMAINS-001")["wrong_verdicts"] == 4   # ranks -2, -1, 3 and 4 wrap around


def test_zero_beta_refused_is_seen(monkeypatch):
    original = trainer.hyperparameters

    def hyperparameters(*, betas, **settings):
        if 0.0 in betas:
            raise ArgumentError("betas must be in (0, 1)")
        return original(betas=betas, **settings)

    monkeypatch.setattr(trainer, "hyperparameters", hyperparameters)
    assert _fails("FALSIFY-ARGUMENT-DOMAINS-002")["wrong_verdicts"] == 1


def test_fraction_one_accepted_is_seen(monkeypatch):
    original = data.split_documents

    def split_documents(documents, *, val_fraction, seed):
        if val_fraction == 1.0:
            return original(documents, val_fraction=0.999, seed=seed)
        return original(documents, val_fraction=val_fraction, seed=seed)

    monkeypatch.setattr(data, "split_documents", split_documents)
    assert _fails("FALSIFY-ARGUMENT-DOMAINS-003")["wrong_verdicts"] == 1


def test_split_that_empties_a_side_is_seen(monkeypatch):
    def split_documents(documents, *, val_fraction, seed):
        if not 0 < val_fraction < 1:
            raise DataError("val_fraction outside (0, 1)")
        return list(documents), []

    monkeypatch.setattr(data, "split_documents", split_documents)
    observations = _fails("FALSIFY-ARGUMENT-DOMAINS-003")
    assert observations["wrong_verdicts"] == 0 and observations["bad_splits"] == 3


def test_bad_inputs_refused_holds_on_the_runtime():
    observations, judgement = observe("argument-domains", "FALSIFY-ARGUMENT-DOMAINS-005")
    assert judgement.holds, observations


def test_unknown_dtype_accepted_is_seen(monkeypatch):
    from pvlab.runtime import checkpoint

    monkeypatch.setitem(checkpoint.OTHER_DTYPES, "X9", 4)
    observations = _fails("FALSIFY-ARGUMENT-DOMAINS-005")
    assert observations["wrong_verdicts"] == 1  # the one planted case: an unknown dtype accepted
