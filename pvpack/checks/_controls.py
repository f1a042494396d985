"""What a check holds fixed around the runtime it drives: the dtype a path computes in and the
tolerance it judges that dtype by, the state of torch's random generators while the runtime
steps, and the one step whose loss and gradients several checks read."""

from __future__ import annotations

import contextlib
from typing import Iterator, Mapping

import torch

from ..protocol import REFERENCE, Batch, Model


def path_dtype(path: str) -> str:
    """The dtype `path` computes in, which names the tolerance a check judges it by: float32 on
    the reference path, bfloat16 on a fast one."""
    return "float32" if path == REFERENCE else "bfloat16"


def tolerance_of(tolerance: Mapping[str, Mapping[str, float]] | None, dtype: str,
                 fallback: Mapping[str, tuple[float, float]]) -> tuple[float, float]:
    """(rtol, atol) for `dtype`: the falsifier's `tolerance` entry for it where there is one,
    else the check's own `fallback`."""
    if tolerance and dtype in tolerance:
        return float(tolerance[dtype]["rtol"]), float(tolerance[dtype]["atol"])
    return fallback[dtype]


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """torch's generators (the CPU's, and every GPU's where CUDA is there) in a state of their
    own, seeded with `seed`, and put back afterwards: what a fresh process seeded so would draw,
    without moving the draws of anything run after it."""
    with torch.random.fork_rng(devices=[] if not torch.cuda.is_available() else None):
        torch.manual_seed(seed)
        yield


def stepped(model: Model, batch: Batch, *, rng_seed: int) -> tuple[float, dict[str, torch.Tensor]]:
    """One train_step of `model` on `batch` with torch's generators `seeded(rng_seed)`, then
    `model` closed: the loss the step reported and the gradients it applied (float64, on the
    CPU, by parameter name)."""
    try:
        with seeded(rng_seed):
            loss = model.train_step(batch)
        return loss, {name: g.detach().to("cpu", torch.float64) for name, g in model.gradients().items()}
    finally:
        model.close()
