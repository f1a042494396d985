"""Helpers for writing checks (imported by checks only, never by `pv validate`).

- `sweep_seed(default)`: the seed `pv measure` is sweeping (the PV_SEED environment variable),
  for a check without a `seed` parameter.
- `pv.testing.torch_helpers`: device and tensor helpers for torch checks (imports torch; import
  it from a check, never from pv itself).
"""

from __future__ import annotations

import os


def sweep_seed(default: int = 0) -> int:
    """The seed of the current `pv measure` call (PV_SEED), else `default`. A check that takes
    no `seed` parameter builds its inputs from this so that a sweep reaches it."""
    text = os.environ.get("PV_SEED", "")
    try:
        return int(text)
    except ValueError:
        return default
