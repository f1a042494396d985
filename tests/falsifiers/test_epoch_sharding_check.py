"""pvlab.falsifiers.epoch_sharding (FALSIFY-EPOCH-SHARDING-001): holds on the runtime, false under
rank_sampler_reuses_first_epoch_order and rank_windows_keep_short_last_batch, and reports other
sampler defects by their property."""

from __future__ import annotations

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers.mutants import registry
from pvlab.runtime import distributed

CONTRACT, FALSIFIER, BUG = "epoch-sharding", "FALSIFY-EPOCH-SHARDING-001", "rank_sampler_reuses_first_epoch_order"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_it_sees_every_epoch_replaying_the_first():
    with registry()[BUG]():
        observations, _ = observe(CONTRACT, FALSIFIER)
    # 6 cases x 6 pairs of epochs, each pair repeated both as an order and as a batch sequence
    assert observations["repeated_epochs"] == 72
    assert observations["overlaps"] == observations["coverage_errors"] == observations["nondeterministic"] == 0


def test_it_sees_a_short_last_batch_kept_in_the_epoch():
    """The eighth blind batch's rank_windows_keep_short_last_batch: the two cases whose shard is
    not a whole number of batches train the remainder as a short batch (ceil for floor)."""
    with registry()["rank_windows_keep_short_last_batch"]():
        observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    assert observations["batch_errors"] > 0
    assert observations["overlaps"] == observations["coverage_errors"] == observations["repeated_epochs"] == 0


def test_it_sees_two_ranks_given_overlapping_shards(monkeypatch):
    original = distributed.shard_indices

    def shard_indices(num_items, *, rank, world_size, seed, epoch):  # the last rank reads rank 0's shard
        return original(num_items, rank=0 if rank == world_size - 1 else rank, world_size=world_size, seed=seed,
                        epoch=epoch)

    monkeypatch.setattr(distributed, "shard_indices", shard_indices)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    assert observations["overlaps"] > 0 and observations["coverage_errors"] > 0
    assert observations["repeated_epochs"] == 0


def test_it_sees_an_order_that_depends_on_the_global_rng(monkeypatch):
    import torch

    original = distributed.shard_indices

    def shard_indices(num_items, *, rank, world_size, seed, epoch):  # a permutation from torch's global RNG
        order = torch.randperm(num_items)
        return order[rank::world_size].tolist()

    monkeypatch.setattr(distributed, "shard_indices", shard_indices)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds and observations["nondeterministic"] > 0
