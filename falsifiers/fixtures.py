"""Expensive things the checks share, built once per process (functools.lru_cache).

`pv run --all` runs every falsifier in one pytest process; a trained checkpoint, a loaded model
or a tokenised corpus is built on first use and reused by every later check. Cached objects are
shared: a check that changes a model (training, zeroing weights) takes `fresh_copy()` first.
"""

from __future__ import annotations

import copy
import functools

import torch


def fresh_copy(model):
    """A deep copy of a cached model (weights, path, config) that a check may modify."""
    return copy.deepcopy(model)


@functools.lru_cache(maxsize=None)
def random_model(preset: str = "tiny", *, seed: int = 0, initializer_range: float | None = None,
                 device: str = "cpu", path: str = "reference"):
    """A randomly initialised model of a preset through the runtime's own init_model (ungated:
    the parity gate has falsifiers of its own). `initializer_range` overrides the preset's std."""
    from runtime import checkpoint
    from runtime.config import preset as preset_config

    config = preset_config(preset)
    if initializer_range is not None:
        config = config.replace(initializer_range=initializer_range)
    model = checkpoint.init_model(config=config, weights="random", seed=seed, device=device, path=path,
                                  parity_gate=False)
    model.eval()
    return model
