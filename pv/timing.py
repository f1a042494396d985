"""Falsifiers whose observations are timings: run without the line tracer, bound to the modules they can run.

A check's executed code is collected with a line tracer (pv.execution). A tracer slows every
line of the bound packages it measures, and unevenly (a Python loop far more than a kernel
launch), so a throughput, a speed-up or an MFU measured under it is not the runtime's: on an
H100 the peer's timings under the tracer were too unstable to judge at all. A falsifier
declares which of its prediction's observations are timings:

    timing_observations: [speedup]

and its check then runs with no collector measuring, here or in the processes it starts
(`untraced`). What the record can state without tracing is coarser (pv.untracedbind): the
modules the check can run — the static import closure of its module, of the planted bug's
module and of the runtime adapter's module, inside the bound packages, plus every bound module
first imported while it ran — each with EVERY one of its code units (pv.codeunits: each
function by qualname, and `<module>`), in `executed_code` and `code_origins` as a traced
record has them, with `binding: modules`. Such a record stales on any edit of any function or
of the module-level code of those modules, not only of the functions that ran; as for every
unit-bound record, docstrings, comments, positions and a newly added function stale nothing.

One refinement: a sibling planted-bug module — a module of `[tool.pv] mutants_module` that
declares planted bugs (`@mutant("name")`, read statically), not the active one, and that no
module bound whole imports (the package `__init__`'s registration imports of its submodules
aside) — is bound without its bugs' functions (and what they nest): its `<module>` code and
any helper stay bound. That rests on one assumption: a planted bug's function runs only when
that bug is entered, and pv enters only the active one. So adding a planted bug to the mutants
package stales no timing record, while an edit of a sibling's imports or registration lines
still does. The package `__init__` and its machinery modules (no bug declared) are bound whole.
Records made before (only `code_digests`, module -> digest) are judged by those as ever.

The declaration gains an attacker nothing: the record binds every unit a traced record of the
same run could have named (a traced record names only units that ran, and the only units left
out here are planted bugs that were not entered, which cannot have run), so it is never fresh
where a traced record of the same run would be stale, except for code reached only through a
bound module imported before the check and outside its closure (the runtime adapter, the one
such path pv knows of, is bound by name). `pv validate` refuses a declaration naming an
observation the prediction does not read (PV409); `pv status` shows `binding: modules` on the
evidence it decides. The declaration is rendered into the generated test, so adding or
removing it refuses the records made before (their test digest changed).
"""

from __future__ import annotations

import contextlib
from typing import Iterable, Iterator

UNTRACED_BINDING = "modules"  # a record's `binding`: every unit of the modules it can run, the check ran untraced
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
