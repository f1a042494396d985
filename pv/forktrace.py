"""The code a forked child process runs while a check is measured, bound like a spawned child's.

A child started with fork (multiprocessing's default start method on Linux, so torch DataLoader
workers, multiprocessing pools, or a bare os.fork) starts no interpreter, so the start-up hook
pv.execution sets for child processes (COVERAGE_PROCESS_CONFIG) never runs in it. It inherits
the parent's tracer instead and goes on measuring into its own copy of the parent's memory.
multiprocessing ends such a child with os._exit, so what it measured was lost, and a record
made while a data pipeline ran in worker processes bound none of the pipeline's code. Editing
that code then left the record fresh.

So, at every fork while a check is measured, the child:
- leaves a problem file in the check's private directory (pv.execution reads it into the
  record's binding problems: a record with one is never fresh);
- saves the lines it measured under the check's context as it leaves, if it leaves through
  multiprocessing's exit path (its finalizers run before os._exit) or through a normal
  interpreter exit (atexit). The save then removes the problem file.

A child that leaves any other way keeps the problem file: os._exit after a bare os.fork without
pv.execution.save_before_hard_exit first, a signal, Pool.terminate (what `with Pool() as pool:`
calls), or a child still running when the check ends (a persistent worker). The record then says its binding is incomplete, instead of binding less than ran.

Why not coverage.py's own `concurrency = multiprocessing`: it starts a fresh Coverage in each
child from a configuration file and covers multiprocessing only. pv keeps one collector per
session, under a context per check, and a bare fork must be caught too.
"""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path
from typing import Any, Callable

FORK_PROBLEM = "problem-fork-"

# Set by pv.execution while a check is measured: () -> (collector's Coverage, context, directory),
# or None. A function, not the values, so that a fork sees the check measured at that moment.
_measured: Callable[[], tuple[Any, str, str] | None] = lambda: None
_installed = False
_pending: list[Callable[[], None]] = []  # in a forked child: its save, until it has run


def install(measured: Callable[[], tuple[Any, str, str] | None]) -> None:
    """Watch forks from now on (once per process; os.register_at_fork cannot be undone)."""
    global _measured, _installed
    _measured = measured
    if not _installed:
        os.register_at_fork(after_in_child=_in_child)
        _installed = True


def _in_child() -> None:
    try:
        now = _measured()
        if now is None:
            return
        cov, context, directory = now
        problem = Path(directory) / f"{FORK_PROBLEM}{os.getpid()}"
        problem.write_text(
            f"a forked child process (pid {os.getpid()}) ran while the check was measured and left "
            "without saving what it ran (os._exit after os.fork, a signal, or Pool.terminate): the "
            "record does not show all the code the check executed", encoding="utf-8")
        saved = []

        def save() -> None:
            if saved:
                return
            saved.append(True)
            _save(cov, context, directory, problem)

        _pending[:] = [save]
        atexit.register(save)
        if "multiprocessing" in sys.modules:
            from multiprocessing import util

            # A multiprocessing child clears the finalizers it inherited when it starts, then
            # runs its after-fork callbacks: register the save from one of them.
            util.register_after_fork(_KEEP, lambda _: util.Finalize(None, save, exitpriority=100))
    except Exception:  # noqa: BLE001 - a fork must never fail over its measurement
        pass


class _Keep:
    """An object to hang the after-fork callback on (multiprocessing keeps it weakly)."""


_KEEP = _Keep()


def save_now() -> None:
    """In a forked child about to leave with os._exit: save what it measured now
    (pv.execution.save_before_hard_exit calls this)."""
    for save in list(_pending):
        save()


def _save(cov: Any, context: str, directory: str, problem: Path) -> None:
    """Write the lines this child measured under `context` beside the spawned children's data,
    then remove the problem file."""
    from coverage import CoverageData

    try:
        cov.stop()
        data = cov.get_data()
        data.set_query_context(context)
        lines = {name: sorted(data.lines(name) or ()) for name in data.measured_files()}
        out = CoverageData(basename=os.path.join(directory, "child"), suffix=f"fork.{os.getpid()}")
        out.add_lines({name: numbers for name, numbers in lines.items() if numbers})
        out.write()
        problem.unlink()
    except Exception:  # noqa: BLE001 - the problem file stays: the record says it is incomplete
        pass
