"""Planted bugs of runtime.distributed: gradient averaging, the rank sampler, accumulation, the
barrier around consolidation, resharding on load.

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`). The checks that must kill these run the runtime in spawned rank processes;
`plant` exports the mutant to child processes (planting.py), so every rank runs with the bug
(tests/falsifiers/test_launch.py proves it)."""

from __future__ import annotations

from pv.mutation import mutant

from .planting import plant, swap


@mutant("gradients_summed_not_averaged")
def gradients_summed_not_averaged():
    """The ranks' gradients are summed instead of averaged: every gradient is W times the
    gradient of the global batch (a learning rate silently multiplied by the world size where
    the optimizer is not scale-invariant, a grad norm W times too large, clipping too early).

    Imitates an all-reduce with ReduceOp.SUM and no division (a hand-written comm hook, or FSDP's
    divide factor set to 1). Seams: runtime.distributed.wrap_ddp (a summing DDP comm hook) and
    runtime.distributed.wrap_fsdp (divide factor 1 and sum-only collectives on every FSDP module)."""
    import torch.distributed as dist

    from pvlab.runtime import distributed

    original_ddp, original_fsdp = distributed.wrap_ddp, distributed.wrap_fsdp

    def summing_hook(state, bucket):
        future = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
        return future.then(lambda done: done.value()[0])

    def wrap_ddp(module, ctx):
        wrapped = original_ddp(module, ctx)
        wrapped.register_comm_hook(None, summing_hook)
        return wrapped

    def wrap_fsdp(module, ctx):
        wrapped = original_fsdp(module, ctx)
        for sub in wrapped.modules():
            if hasattr(sub, "set_gradient_divide_factor"):
                sub.set_force_sum_reduction_for_comms(True)  # plain SUM collectives (gloo has no PREMUL_SUM)
                sub.set_gradient_divide_factor(1.0)
        return wrapped

    with plant("gradients_summed_not_averaged", swap(distributed, "wrap_ddp", wrap_ddp),
               swap(distributed, "wrap_fsdp", wrap_fsdp)):
        yield


@mutant("every_rank_reads_the_same_shard")
def every_rank_reads_the_same_shard():
    """Every rank is given rank 0's shard of the epoch: the ranks train on identical batches, the
    global batch holds each window W times, and the other ranks' windows are never seen.

    Imitates a sampler built without the rank (DistributedSampler(rank=0) everywhere, or a seed
    that includes no rank). Seam: runtime.distributed.shard_indices."""
    from pvlab.runtime import distributed

    original = distributed.shard_indices

    def shard_indices(num_items, *, rank, world_size, seed, epoch):
        return original(num_items, rank=0, world_size=world_size, seed=seed, epoch=epoch)

    with plant("every_rank_reads_the_same_shard", swap(distributed, "shard_indices", shard_indices)):
        yield


@mutant("consolidation_without_barrier")
def consolidation_without_barrier():
    """The ranks do not wait for each other around the checkpoint: the ranks other than 0 return
    from save_and_consolidate (and go on to read, resume or exit) before rank 0 has written the
    consolidated directory.

    Imitates a missing dist.barrier() before/after rank 0's consolidation, so a job reads a
    checkpoint that does not exist yet (or the previous one). Seam: runtime.distributed.barrier."""
    from pvlab.runtime import distributed

    def barrier(ctx):
        return None

    with plant("consolidation_without_barrier", swap(distributed, "barrier", barrier)):
        yield


@mutant("reshard_drops_a_parameter")
def reshard_drops_a_parameter():
    """Loading a sharded checkpoint onto a new world size leaves one parameter (the final norm's
    weight) at its freshly initialised value: the resumed model is not the one that was saved.

    Imitates a reshard whose key mapping misses a tensor (a renamed FQN, a tied or wrapped
    parameter) and a load that is not strict about it. Seam: runtime.distributed.load_sharded."""
    import torch

    from pvlab.runtime import distributed

    original = distributed.load_sharded

    def load_sharded(trainer, directory):
        parameter = dict(trainer.named_parameters)["model.norm.weight"]
        kept = parameter.detach().clone()
        original(trainer, directory)
        with torch.no_grad():
            parameter.copy_(kept)

    with plant("reshard_drops_a_parameter", swap(distributed, "load_sharded", load_sharded)):
        yield


@mutant("accumulation_syncs_every_micro_batch_unscaled")
def accumulation_syncs_every_micro_batch_unscaled():
    """With gradient accumulation, every micro-batch synchronises its gradient across ranks (no
    no_sync / set_requires_gradient_sync(False)) and every micro-batch loss enters unscaled: the
    accumulated gradient is accumulation_steps times too large, and a rank's gradient between
    micro-batches is already averaged with the other ranks'.

    Imitates accumulation written without no_sync and without dividing the loss by the number of
    micro-batches. Seams: runtime.distributed.gradient_sync and runtime.distributed.loss_scale."""
    import contextlib

    from pvlab.runtime import distributed

    def gradient_sync(wrapped, strategy, enabled):
        return contextlib.nullcontext()

    def loss_scale(micro_tokens, global_tokens, world_size):
        return 1.0

    with plant("accumulation_syncs_every_micro_batch_unscaled",
               swap(distributed, "gradient_sync", gradient_sync), swap(distributed, "loss_scale", loss_scale)):
        yield


@mutant("fsdp_gradient_sync_left_off")
def fsdp_gradient_sync_left_off():
    """Under FSDP2, gradient synchronisation is switched off for the first non-final micro-batch
    and never switched on again: no gradient is reduce-scattered, so no sharded parameter gets a
    gradient and the optimizer changes nothing (DDP is unaffected).

    Imitates set_requires_gradient_sync(False) without the matching set_requires_gradient_sync(True)
    (an early return or exception path in hand-written accumulation). Seam:
    runtime.distributed.gradient_sync."""
    import contextlib

    from pvlab.runtime import distributed

    original = distributed.gradient_sync

    def gradient_sync(wrapped, strategy, enabled):
        if strategy == "fsdp":
            wrapped.set_requires_gradient_sync(False)
            return contextlib.nullcontext()
        return original(wrapped, strategy, enabled)

    with plant("fsdp_gradient_sync_left_off", swap(distributed, "gradient_sync", gradient_sync)):
        yield


# ---- fourth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Fourth blind batch"; probes in tests/falsifiers/fourth_mutant_probes.py)


@mutant("rank_sampler_reuses_first_epoch_order")
def rank_sampler_reuses_first_epoch_order():
    """The rank sampler draws every epoch's permutation as epoch 0's: the shards stay disjoint
    and cover the data, but from the second epoch on every rank sees the same windows in the
    same order, in the same batches, as in the first. Runs shorter than an epoch are untouched.

    Imitates the DistributedSampler whose set_epoch() is never called. Seam:
    runtime.distributed.shard_indices."""
    from pvlab.runtime import distributed

    original = distributed.shard_indices

    def shard_indices(num_items, *, rank, world_size, seed, epoch):
        return original(num_items, rank=rank, world_size=world_size, seed=seed, epoch=0)  # the defect

    with plant("rank_sampler_reuses_first_epoch_order", swap(distributed, "shard_indices", shard_indices)):
        yield


# ---- seventh blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Seventh blind batch"; probes in tests/falsifiers/seventh_mutant_probes.py)


@mutant("ddp_grad_norm_left_squared")
def ddp_grad_norm_left_squared():
    """The distributed global gradient norm is returned squared when no gradient is sharded
    (DDP, and any single-process run): DistributedTrainer's last_grad_norm reports norm**2 and
    its clipping scales by max_norm / norm**2, clipping far too hard above a norm of 1 and not
    at all below it. FSDP's sharded gradients are unaffected.

    Imitates the final sqrt indented into the `if sharded:` block next to the all_reduce of the
    squares. Seam: runtime.distributed.grad_norm (wrapped: squared when unsharded)."""
    from pvlab.runtime import distributed

    original = distributed.grad_norm

    def grad_norm(gradients, ctx):
        total = original(gradients, ctx)
        if any(hasattr(g, "to_local") for g in gradients):
            return total
        return total * total   # the defect: the sqrt is taken on the sharded branch only

    with plant("ddp_grad_norm_left_squared", swap(distributed, "grad_norm", grad_norm)):
        yield


# ---- eighth blind batch ----
# Written from pvlab/runtime and docs/runtime.md alone, before any kill was measured (docs/mutants.md,
# "Eighth blind batch"; probes in tests/falsifiers/eighth_mutant_probes.py).


@mutant("rank_windows_keep_short_last_batch")
def rank_windows_keep_short_last_batch():
    """RankWindows (the torchrun sampler) counts an epoch's steps rounding up: when a rank's
    shard is not a whole number of batches, the last step of every epoch trains on the
    remainder, a short batch (fewer rows, fewer tokens, the same learning rate) instead of the
    next epoch starting, and every later step's windows (and what a resumed `position` means)
    shift. A shard that divides into batches is unaffected.

    Imitates "don't drop the last partial batch" (ceil instead of floor division) in an
    epoch-based sampler. Quiet: the short step is token-weighted and trains normally (with
    accumulation_steps > 1 a remainder that does not split evenly is refused, which is loud). Seam:
    runtime.distributed.RankWindows.__init__ (wrapped: steps_per_epoch rounded up)."""
    from pvlab.runtime import distributed

    original = distributed.RankWindows.__init__

    def __init__(self, windows, *, rank, world_size, batch_size, seed, position=0):
        original(self, windows, rank=rank, world_size=world_size, batch_size=batch_size, seed=seed,
                 position=position)
        shard = windows.shape[0] // world_size
        self.steps_per_epoch = -(-shard // batch_size)   # the defect: ceil, the remainder kept as a short step

    with plant("rank_windows_keep_short_last_batch", swap(distributed.RankWindows, "__init__", __init__)):
        yield
