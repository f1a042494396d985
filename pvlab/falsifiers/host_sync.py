"""How often a fast-path training step makes the host wait for the device, counted, not timed.

A host synchronisation costs little at a large batch and a lot at a small one, so a speed
figure hides it; a count does not. Two counts, each with its own oracle outside the runtime:

* host reads (`training_step_host_reads`, any device): every call that turns a tensor's value
  into a Python value — item(), tolist(), float(), int(), bool(), as torch's function-override
  mode sees them (torch.overrides.TorchFunctionMode). On a GPU each one waits for every queued
  kernel. On the CPU nothing waits, but a read there is a read on the GPU too.
* device synchronisations (`training_step_device_syncs`, CUDA only): what torch's own sync
  debugger reports (torch.cuda.set_sync_debug_mode("warn")), which also sees the waits that are
  not value reads (a blocking copy to the host, nonzero, masked indexing).

The step is allowed one of each: Trainer._read_step reads loss, grad norm and token count
together at the end of the step, after the update is queued.
"""

from __future__ import annotations


import torch
from torch.overrides import TorchFunctionMode

from ._util import device_unavailable, generator, torch_device

HOST_READS = frozenset({"item", "tolist", "__float__", "__int__", "__bool__", "__index__"})


class HostReads(TorchFunctionMode):
    """Records the name of every tensor-to-Python value read made while it is active."""

    def __init__(self):
        super().__init__()
        self.reads: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_READS:
            self.reads.append(name)
        return func(*args, **(kwargs or {}))


def _fast_trainer(device: torch.device, config: str, batch: int, seq: int):
    """A fast-path Trainer on a preset with random weights, and two batches already on the
    device (moving a host batch is a copy the data loader owns, not the step)."""
    from pvlab import runtime

    model = runtime.init_model(config=config, weights="random", seed=0, device=device, path="fast")
    trainer = runtime.Trainer(model, lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95), grad_clip=1.0)
    tokens = torch.randint(0, model.config.vocab_size, (2, batch, seq + 1), generator=generator(0))
    batches = [runtime.LMBatch.from_sequences(tokens[i]).to(model.device) for i in range(2)]
    trainer.train_batch(batches[0])   # warm-up: optimizer state, one-time probes, allocator
    return trainer, batches


def training_step_host_reads(*, device: str, config: str = "tiny", batch: int = 2, seq: int = 32,
                             steps: int = 3) -> dict:
    """Host reads of tensor values during each of `steps` fast-path Trainer.train_batch calls
    (after one warm-up step).

    Observations: host_reads_per_step (the most in any step), host_reads_total, steps,
    read_kinds (the distinct kinds seen, as text)."""
    trainer, batches = _fast_trainer(torch_device(device), config, batch, seq)
    counts, kinds = [], set()
    for step in range(steps):
        with HostReads() as seen:
            trainer.train_batch(batches[step % 2])
        counts.append(len(seen.reads))
        kinds.update(seen.reads)
    return {"host_reads_per_step": max(counts), "host_reads_total": sum(counts), "steps": steps,
            "read_kinds": ",".join(sorted(kinds))}


SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def _profiled_syncs(work) -> list[str]:
    """The blocking CUDA runtime calls made while `work()` runs (torch.profiler), each named
    with the operators it happened under, innermost first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        work()
    found = []
    for event in prof.events():
        if event.name in SYNC_CALLS:
            chain, parent = [], event.cpu_parent
            while parent is not None and len(chain) < 4:
                chain.append(parent.name)
                parent = parent.cpu_parent
            found.append(" < ".join([event.name, *chain]))
    return found


def training_step_device_syncs(*, device: str, config: str = "tiny", batch: int = 2, seq: int = 32,
                               steps: int = 3) -> dict:
    """Blocking CUDA runtime calls (cudaStreamSynchronize, cudaDeviceSynchronize,
    cudaEventSynchronize: each one a wait of the host for the GPU) during each of `steps`
    fast-path Trainer.train_batch calls after one warm-up step, counted by torch.profiler.
    The profiler's own calls are measured on an empty region and subtracted. CUDA only:
    DeviceUnavailable elsewhere. (torch's sync debugger was the first instrument: on an H100 it
    reported two per step where the profile shows one, the second attributed to the line that
    switches the debugger off.)

    Observations: device_syncs_per_step (the most in any step), device_syncs_total, steps,
    sync_sites (each call with the operators it ran under, as text: where to look when the
    count is over)."""
    if not device.startswith("cuda"):
        raise device_unavailable(f"CUDA synchronisations are counted on CUDA streams; nothing to count on {device}")
    trainer, batches = _fast_trainer(torch_device(device), config, batch, seq)
    torch.cuda.synchronize()
    baseline = len(_profiled_syncs(lambda: None))
    counts, sites = [], set()
    for step in range(steps):
        found = _profiled_syncs(lambda: trainer.train_batch(batches[step % 2]))
        counts.append(max(0, len(found) - baseline))
        sites.update(found)
        torch.cuda.synchronize()
    return {"device_syncs_per_step": max(counts), "device_syncs_total": sum(counts), "steps": steps,
            "profiler_own_syncs": baseline, "sync_sites": "; ".join(sorted(sites))}
