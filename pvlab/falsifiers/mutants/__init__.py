"""Planted bugs (mutants): each breaks the runtime in one named way for the duration of one run.

`pv strength` runs every falsifier under the mutants its contract declares and expects it to
FAIL (the mutant is *killed*); a PASS means the falsifier is blind to that bug (*survived*).
See docs/mutants.md for the catalogue, the kill matrix and "How to add a planted bug".

This package is `[tool.pv] mutants_module`: importing it registers every planted bug of every
submodule (the registry is pv.mutation.REGISTRY; `registry()` gives this package's part). The
machinery lives in `planting` (child processes: `child`); the bugs are grouped by the runtime
seam they patch. Nothing heavy
is imported here: torch and the runtime are imported when a mutant is entered.
"""

from __future__ import annotations

from . import attention, checkpoint, config, data, devices, distributed, equivalence, kernels, loss, model, trainer  # noqa: F401 - registers
from . import independent, independent_review, oracles  # noqa: F401 - registers (issue #12: independent oracles, seam-by-seam bugs)
from . import performance  # noqa: F401 - registers (issue #14: slow but right)
from . import adapters  # noqa: F401 - registers (issue #25: the pack's transformers adapter)
from . import domains  # noqa: F401 - registers (issue #26: survivors of pv mutate)
from .planting import acts_on, active, plant, registry, swap, swap_item

__all__ = ["acts_on", "active", "plant", "registry", "swap", "swap_item"]
