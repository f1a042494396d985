"""Falsifiers whose observations are timings: run without the line tracer, bound to whole modules.

A check's executed code is collected with a line tracer (pv.execution). A tracer slows every
line of the bound packages it measures, and unevenly (a Python loop far more than a kernel
launch), so a throughput, a speed-up or an MFU measured under it is not the runtime's: on an
H100 the peer's timings under the tracer were too unstable to judge at all. A falsifier
declares which of its prediction's observations are timings:

    timing_observations: [speedup]

and its check then runs with no collector measuring, here or in the processes it starts
(`untraced`). What the record can state without tracing is coarser: the whole modules the check
can run — the static import closure of its module, of the planted bug's module and of the
runtime adapter's module, inside the bound packages, plus every bound module first imported
while it ran — each by its syntax-tree digest (pv.codebind), with `binding: modules`. Such a
record stales on ANY edit of ANY of those modules, not only of the functions that ran.

The declaration gains an attacker nothing: a module-bound record stales on ANY edit of any
bound module, so it is never fresh where a traced record of the same run would be stale, except
for code reached only through a bound module imported before the check and outside its closure
(the runtime adapter, the one such path pv knows of, is bound by name). `pv validate` refuses a
declaration naming an observation the prediction does not read (PV409); `pv status` shows
`binding: modules` on the evidence it decides. The declaration is rendered into the generated
test, so adding or removing it refuses the records made before (their test digest changed).
"""

from __future__ import annotations

import contextlib
from typing import Iterable, Iterator

UNTRACED_BINDING = "modules"  # a record's `binding`: whole modules, the check ran untraced
NOTE = "bound to whole modules: timed without the line tracer"


@contextlib.contextmanager
def untraced() -> Iterator[None]:
    """The block runs with no pv collector measuring (yields None: no executed-code run)."""
    from pv import execution  # here: pv status reads `note` without the collector's imports

    with execution.paused():
        yield None


def note(records: Iterable[object]) -> str:
    """` (bound to whole modules: ...)` when any of `records` is bound that way, else ``."""
    coarse = any(getattr(r, "binding", None) == UNTRACED_BINDING for r in records)
    return f" ({NOTE})" if coarse else ""
