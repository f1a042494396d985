"""Planted bugs of runtime.devices: device resolution (CUDA only).

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

from pv.mutation import mutant

from .planting import acts_on, plant, swap


@mutant("no_gpu_ignored")
@acts_on("cuda")
def no_gpu_ignored():
    """`--no-gpu` (allow_gpu=False) is ignored: the device is resolved as if the GPU were allowed,
    so `run --no-gpu` asks torch.cuda and, on a machine with a GPU, creates a CUDA context and
    runs there.

    Imitates the seed defect "--no-gpu ignored (touches CUDA)". Seam:
    runtime.devices.resolve_device (which runtime.checkpoint, runtime.trainer, runtime.pretrain
    and `python -m pvlab.runtime run` look up at call time). It reaches `python -m pvlab.runtime`
    child processes too. On a machine without a GPU there is no CUDA context to create: the
    falsifier is CUDA-only."""
    from pvlab.runtime import devices

    original = devices.resolve_device

    def resolve_device(requested=None, *, allow_gpu=True, argument="device"):
        return original(requested, allow_gpu=True, argument=argument)

    with plant("no_gpu_ignored", swap(devices, "resolve_device", resolve_device)):
        yield

