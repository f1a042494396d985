"""Measuring in a check's child processes: traced from the first bound import, not from start-up.

coverage.py starts in every Python a check starts (its `.pth` file reads the configuration pv
puts in COVERAGE_PROCESS_CONFIG, pv.execution), and loads this module as a plugin while it
starts. For a child started as `python -m MODULE` or `python -c CODE`, the plugin pauses the
measurement at once and resumes it when the child first imports a module of a bound package
before that import no bound code exists in the process, so none can
run and nothing is lost. What a rank or a CLI subprocess does first -- importing torch, tens of
thousands of Python calls -- then runs untraced: on Python 3.11 (no sys.monitoring) a trace
function slows every Python line of every module, measured or not.

At that first bound import the plugin imports the project's `[tool.pv] untraced_imports`
(e.g. `["torch"]`) first, still paused: no bound code exists yet, so these imports run none,
and the bound code that then imports them finds them loaded. A module that fails to import is
left for the child's own import to fail on.

A child started with a script (`python path/to/script.py`) is measured from start-up: its
`__main__` is a file, not an import. A first bound import on a thread other than the main one
resumes measurement on that thread and later ones only; the child then writes a problem file
beside its data, and the record is never fresh (pv.execution reads it).
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from typing import Any

PLUGIN = "pv.childtrace"
PROBLEM_PREFIX = "problem-"


def _bound(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


class _ResumeOnBoundImport:
    """A meta path finder that finds nothing: it pauses coverage once it has started, and
    resumes it at the first import of a bound module."""

    def __init__(self, packages: tuple[str, ...], untraced: tuple[str, ...]):
        self.packages = packages
        self.untraced = untraced
        self.paused = False
        self.done = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if self.done:
            return None
        import coverage

        cov = coverage.Coverage.current()
        if not self.paused:
            if cov is None:  # coverage is still starting (importing its own modules)
                return None
            if _bound(name, self.packages):  # the very first import is a bound one
                skip_unexecuted_file_search(cov)
                self.done = True
                return None
            skip_unexecuted_file_search(cov)
            cov.stop()
            self.paused = True
            self.cov = cov
        if not _bound(name, self.packages):
            return None
        self.done = True
        for module in self.untraced:
            try:
                importlib.import_module(module)
            except Exception:  # noqa: BLE001 - the child's own import of it fails the same way, traced
                pass
        if threading.current_thread() is not threading.main_thread():
            _report(self.cov, f"a child process (pid {os.getpid()}) first imported {name} on a thread other "
                              "than its main one; code its main thread ran was not measured")
        self.cov.start()
        return None


def skip_unexecuted_file_search(cov: Any) -> None:
    """Each time coverage.py saves or hands over its data it walks every directory of the
    measured packages for the files that never ran (to report them at 0 %) and writes each one
    into its data. pv reads only the lines that ran, after every check and in every child: the
    walk was tens of milliseconds per check. Coverage offers no setting for it, so its one hook
    for that work is emptied on this instance (absent in a coverage.py without it: no harm)."""
    if hasattr(cov, "_post_save_work"):
        cov._post_save_work = lambda: None  # noqa: SLF001 - see above


def _report(cov: Any, problem: str) -> None:
    directory = os.path.dirname(cov.config.data_file or "")
    try:
        with open(os.path.join(directory, f"{PROBLEM_PREFIX}{os.getpid()}"), "w", encoding="utf-8") as file:
            file.write(problem)
    except OSError:
        pass


def coverage_init(reg: Any, options: dict[str, Any]) -> None:
    """coverage.py's plugin entry point, called while coverage starts in the child."""
    if getattr(sys, "argv", [""])[0] not in ("-c", "-m"):
        return  # a script, stdin or the interactive prompt: measured from start-up
    packages = tuple(str(p) for p in options.get("packages", ()))
    untraced = tuple(str(m) for m in options.get("untraced_imports", ()))
    if packages and not any(isinstance(f, _ResumeOnBoundImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _ResumeOnBoundImport(packages, untraced))
