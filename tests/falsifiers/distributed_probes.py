"""Probes of the planted bugs in pvlab/falsifiers/mutants/distributed.py (test_mutants.py collects
every `probe_*` here): what a cheap call without ranks can see. That each one reaches the spawned
ranks and makes its falsifier FAIL is shown in test_launch.py and test_data_parallel_checks.py."""

from __future__ import annotations

import torch

from pvlab.runtime import distributed


def probe_gradients_summed_not_averaged():
    return distributed.wrap_ddp.__qualname__, distributed.wrap_fsdp.__qualname__


def probe_every_rank_reads_the_same_shard():
    return distributed.shard_indices(10, rank=1, world_size=2, seed=0, epoch=0)


def probe_consolidation_without_barrier():
    try:  # no process group here: a real barrier refuses, a missing one returns
        distributed.barrier(distributed.Context(0, 1, 0, "gloo", torch.device("cpu")))
        return "returned"
    except ValueError as error:
        return type(error).__name__


def probe_reshard_drops_a_parameter():
    return distributed.load_sharded.__qualname__


def probe_accumulation_syncs_every_micro_batch_unscaled():
    return distributed.loss_scale(3, 12, 2), type(distributed.gradient_sync(_SyncSwitch(), "ddp", False)).__name__


class _SyncSwitch:
    """Stands in for a DDP/FSDP module: records the synchronisation switches it is given."""

    def __init__(self):
        self.calls: list[bool] = []

    def set_requires_gradient_sync(self, value: bool) -> None:
        self.calls.append(value)

    def no_sync(self):
        return _NoSync()


class _NoSync:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def probe_fsdp_gradient_sync_left_off():
    switch = _SyncSwitch()
    with distributed.gradient_sync(switch, "fsdp", False):
        pass
    return tuple(switch.calls)


