"""Which falsifier executes which line: the baseline run under coverage.py, one context per test.

`pv mutate` runs the baseline (the judging falsifiers, unmutated) with `PV_AUTOMUTATE_COVERAGE`
naming a data file: pv/automutate/site/sitecustomize.py calls `start()` in that process and
in every Python process it starts (a CLI run, a rank of a data-parallel check), and the pytest
plugin here (`-p pv.automutate.coverage_map`) switches the context to the running test's node
id, also exporting it so child processes started by that test record under it. Lines run while
no test is running (imports, collection) are recorded under the empty context.

`executed_by(data_dir, files)` reads it back: file -> line -> the node ids that ran the line.
A mutant is then judged by the falsifiers that execute its line (a line run only at import
time: by every falsifier bound to the module); a mutant of a line that no falsifier executes
cannot be killed and is recorded SURVIVED (not executed) without a run.

The baseline's own verdicts are unaffected (coverage only observes), but it is slower: the
tracer costs time in Python-heavy code.
"""

from __future__ import annotations

import atexit
import json
import os
from pathlib import Path
from typing import Any, Iterable

ENV = "PV_AUTOMUTATE_COVERAGE"  # JSON: {"data_file": ..., "source": [dirs]}
CONTEXT_ENV = "PV_AUTOMUTATE_CONTEXT"


def start(spec: str) -> None:
    """Start measuring this process (from sitecustomize); saved at exit."""
    try:
        import coverage
    except ImportError:  # coverage is not installed here: the engine falls back to per-module
        return
    config = json.loads(spec)
    cov = coverage.Coverage(data_file=config["data_file"], data_suffix=True, source=config["source"],
                            config_file=False, branch=False)
    cov.start()
    cov.switch_context(os.environ.get(CONTEXT_ENV, ""))

    def save() -> None:
        try:
            cov.stop()
            cov.save()
        except Exception:  # noqa: BLE001 - a process dying at exit must not print our traceback
            pass

    atexit.register(save)


def _switch(context: str) -> None:
    try:
        import coverage
    except ImportError:
        return
    cov = coverage.Coverage.current()
    if cov is not None:
        cov.switch_context(context)
    os.environ[CONTEXT_ENV] = context


def pytest_runtest_setup(item: Any) -> None:
    _switch(item.nodeid)


def pytest_runtest_teardown(item: Any) -> None:
    _switch("")


def executed_by(data_dir: Path, files: Iterable[Path]) -> dict[str, dict[int, set[str]]] | None:
    """file (resolved, as str) -> line -> node ids ("" for import time); None without coverage data."""
    try:
        import coverage
    except ImportError:
        return None
    parts = sorted(str(p) for p in Path(data_dir).glob("coverage*"))
    if not parts:
        return None
    wanted = {str(Path(f).resolve()) for f in files}
    out: dict[str, dict[int, set[str]]] = {}
    for part in parts:
        data = coverage.CoverageData(basename=part)
        try:
            data.read()
        except Exception:  # noqa: BLE001 - a process killed while saving: its part is lost, not fatal
            continue
        for measured in data.measured_files():
            resolved = str(Path(measured).resolve())
            if resolved not in wanted:
                continue
            lines = out.setdefault(resolved, {})
            for line, contexts in data.contexts_by_lineno(measured).items():
                lines.setdefault(line, set()).update(contexts)
    return out
