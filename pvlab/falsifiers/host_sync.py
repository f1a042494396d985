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

import warnings
from pathlib import Path

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


def training_step_device_syncs(*, device: str, config: str = "tiny", batch: int = 2, seq: int = 32,
                               steps: int = 3) -> dict:
    """CUDA synchronisations reported by torch's sync debugger during each of `steps` fast-path
    Trainer.train_batch calls (after one warm-up step). CUDA only: DeviceUnavailable elsewhere.

    Observations: device_syncs_per_step (the most in any step), device_syncs_total, steps,
    sync_sites (the Python lines that made each synchronising call, file:line, as text: where
    to look when the count is over)."""
    if not device.startswith("cuda"):
        raise device_unavailable(f"torch's sync debugger watches CUDA streams; nothing to count on {device}")
    trainer, batches = _fast_trainer(torch_device(device), config, batch, seq)
    torch.cuda.synchronize()
    counts, sites = [], set()
    for step in range(steps):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                trainer.train_batch(batches[step % 2])
            finally:
                torch.cuda.set_sync_debug_mode("default")
        syncs = [w for w in caught if "synchroniz" in str(w.message)]
        counts.append(len(syncs))
        sites.update(f"{Path(w.filename).name}:{w.lineno}" for w in syncs)
        torch.cuda.synchronize()
    return {"device_syncs_per_step": max(counts), "device_syncs_total": sum(counts), "steps": steps,
            "sync_sites": ",".join(sorted(sites))}
