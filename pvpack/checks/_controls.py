"""What a check holds fixed around the runtime it drives: the tolerance it judges a dtype by, and
the state of torch's random generators while the runtime steps."""

from __future__ import annotations

import contextlib
from typing import Iterator, Mapping

import torch


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
