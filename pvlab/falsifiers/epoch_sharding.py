"""The rank sampler across epochs: disjoint shards that cover the data, a fresh order each epoch.

docs/distributed.md ("What it does", sampler) documents how a distributed run reads its data:
the stream is cut into windows; "epoch e is a permutation seeded by (seed, e); rank r takes every
W-th window from position r" (`shard_indices`), and at global step s the ranks' windows together
are the s-th run of W·B windows of that order (`RankWindows`, whose epoch has
floor(floor(n / W) / B) steps, the windows that do not fill a last global batch left out of that
epoch). No padding and no duplicated windows: rank r's shard has exactly len(range(r, n, W))
windows, so a size n not divisible by W gives the first n mod W ranks one window more.

A sampler whose epoch is never advanced (a DistributedSampler whose set_epoch() is never called)
keeps every property one epoch can show; only a run past its first epoch sees that every epoch
replays the first one's order, in the same batches.

The oracle is the documented rule itself, written here as set arithmetic on index lists: no
reproduction of the runtime's seed mixing or of torch's permutation. The runtime does not
document that its order is torch.utils.data.DistributedSampler's (it is not: DistributedSampler
pads a size not divisible by W with repeated indices and mixes seed and epoch otherwise), so that
order is not used as an oracle. Each process plays every rank in turn: no process group.
"""

from __future__ import annotations

from itertools import combinations

import torch

from ._util import torch_device

# (windows n, world size W, seed, per-rank batch B): n >= 16 throughout, four sizes not divisible
# by W (25 = 3·8 + 1, 37 = 4·9 + 1, 30 = 4·7 + 2, 50 = 3·16 + 2), one W = 8, and two whose shard
# is not a whole number of batches (floor(30 / 4) = 7 = 2·3 + 1; floor(50 / 3) = 16 = 3·5 + 1):
# the windows that do not fill a last global batch are left out of that epoch, never trained
# as a short batch
CASES = ((16, 2, 0, 2), (25, 3, 1, 2), (37, 4, 2026, 3), (64, 8, 7, 2), (30, 4, 3, 3), (50, 3, 11, 5))


def _shards(num_items: int, world_size: int, seed: int, epoch: int) -> list[list[int]]:
    from pvlab.runtime import distributed

    return [distributed.shard_indices(num_items, rank=r, world_size=world_size, seed=seed, epoch=epoch)
            for r in range(world_size)]


def _interleave(shards: list[list[int]], num_items: int) -> list[int | None]:
    """The epoch's order as the documented rule implies it: position r + W·j holds shard r's j-th."""
    world_size = len(shards)
    order: list[int | None] = [None] * num_items
    for r, shard in enumerate(shards):
        for j, item in enumerate(shard):
            position = r + world_size * j
            if position < num_items:
                order[position] = item
    return order


def _shard_faults(shards: list[list[int]], num_items: int) -> tuple[int, int]:
    """(overlaps, coverage errors) of one epoch's shards: items in more than one rank's shard or
    twice in one; items of range(n) in no shard, items outside it, shards of the wrong size."""
    world_size = len(shards)
    seen: dict[int, int] = {}
    duplicates = 0
    for shard in shards:
        duplicates += len(shard) - len(set(shard))
        for item in set(shard):
            seen[item] = seen.get(item, 0) + 1
    overlaps = duplicates + sum(1 for c in seen.values() if c > 1)
    expected = set(range(num_items))
    wrong_size = sum(1 for r, shard in enumerate(shards) if len(shard) != len(range(r, num_items, world_size)))
    coverage = len(expected - set(seen)) + len(set(seen) - expected) + wrong_size
    return overlaps, coverage


def _rank_batches(num_items: int, world_size: int, seed: int, batch_size: int, steps: int,
                  position: int = 0) -> list[list[list[int]]]:
    """batches[s][r]: the window indices rank r trains on at global step position + s, read back
    from the LMBatch its RankWindows yields (window i holds the tokens 2i, 2i + 1)."""
    from pvlab.runtime import distributed

    windows = torch.arange(2 * num_items, dtype=torch.long).view(num_items, 2)
    iterators = [distributed.RankWindows(windows, rank=r, world_size=world_size, batch_size=batch_size, seed=seed,
                                         position=position) for r in range(world_size)]
    out = []
    for _ in range(steps):
        out.append([[int(t) // 2 for t in next(it).inputs[:, 0]] for it in iterators])
    return out


def epoch_sharding_as_documented(*, device: str, epochs: int = 4) -> dict:
    """shard_indices and RankWindows for every case of CASES over `epochs` epochs.

    Observations: cases, epochs; overlaps (items in more than one rank's shard or twice in one,
    and windows trained twice in one epoch of the ranks' batches); coverage_errors (items missing
    or foreign, shards of the wrong size); batch_errors (global steps whose ranks' batches are
    not B windows each making up the s-th run of W·B windows of the epoch's order);
    repeated_epochs (pairs of epochs with the same order, or the same sequence of global
    batches); nondeterministic (orders or batches that differ when recomputed: in reverse epoch
    order under another global RNG state, and from a RankWindows resumed at a saved position)."""
    torch_device(device)
    from pvlab.runtime import distributed

    overlaps = coverage_errors = batch_errors = repeated_epochs = nondeterministic = 0
    for n, world, seed, batch in CASES:
        orders, batch_runs = [], []
        steps = distributed.RankWindows(torch.zeros(n, 2, dtype=torch.long), rank=0, world_size=world,
                                        batch_size=batch, seed=seed).steps_per_epoch
        if steps != (n // world) // batch:
            batch_errors += 1
        continuous = _rank_batches(n, world, seed, batch, steps * epochs)
        for epoch in range(epochs):
            shards = _shards(n, world, seed, epoch)
            o, c = _shard_faults(shards, n)
            overlaps, coverage_errors = overlaps + o, coverage_errors + c
            order = _interleave(shards, n)
            orders.append(order)
            run = continuous[epoch * steps:(epoch + 1) * steps]
            batch_runs.append(run)
            trained = [i for step in run for rank in step for i in rank]
            overlaps += len(trained) - len(set(trained))
            for s, step in enumerate(run):
                expected = order[s * world * batch:(s + 1) * world * batch]
                together = sorted(i for rank in step for i in rank)
                if any(len(rank) != batch for rank in step) or None in expected or together != sorted(expected):
                    batch_errors += 1
        repeated_epochs += sum(1 for a, b in combinations(range(epochs), 2) if orders[a] == orders[b])
        repeated_epochs += sum(1 for a, b in combinations(range(epochs), 2) if batch_runs[a] == batch_runs[b])

        # the same (seed, epoch), asked again: epochs in reverse, the global RNG elsewhere
        torch.manual_seed(seed + 12345)
        for epoch in reversed(range(epochs)):
            torch.rand(7)
            if _interleave(_shards(n, world, seed, epoch), n) != orders[epoch]:
                nondeterministic += 1
        # a restart: fresh iterators at a saved global step read on as the uninterrupted run did
        for position in sorted({steps, steps + 1, (epochs - 1) * steps, epochs * steps - 1}):
            if _rank_batches(n, world, seed, batch, epochs * steps - position, position) != continuous[position:]:
                nondeterministic += 1

    return {"cases": len(CASES), "epochs": epochs, "overlaps": overlaps, "coverage_errors": coverage_errors,
            "batch_errors": batch_errors, "repeated_epochs": repeated_epochs, "nondeterministic": nondeterministic}
