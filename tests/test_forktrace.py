"""pv.forktrace: the code a forked child of a measured check runs (multiprocessing's fork start
method, a pool, DataLoader workers, a bare os.fork) is bound like a spawned child's, or the
record says it cannot show it. Built on tests/test_execution.py's small package and helpers."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest

from pv import execution
from test_execution import changes, edit, pkg, record  # noqa: F401 - pkg is a fixture


FORKED = '''\
import multiprocessing
import os
import signal
import time


def square(x):
    return x * x


def in_process(queue):
    queue.put(square(3))


def process():
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=in_process, args=(queue,))
    child.start()
    value = queue.get(timeout=60)
    child.join(60)
    return value


def pool():
    p = multiprocessing.get_context("fork").Pool(2)
    try:
        return sum(p.map_async(square, range(4)).get(timeout=60))
    finally:
        p.close()
        p.join()


def bare(save):
    pid = os.fork()
    if pid == 0:
        square(5)
        if save:
            from pv.execution import save_before_hard_exit
            save_before_hard_exit()
        os._exit(0)
    deadline = time.monotonic() + 60   # a child stuck on a lock held at the fork fails the test, never hangs it
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise TimeoutError("the forked child did not finish in 60 s")
        time.sleep(0.01)
    return 1
'''


def record_forked(pkg, function: str, *args) -> SimpleNamespace:
    (pkg.dir / "forked.py").write_text(FORKED)
    forked = importlib.import_module(f"{pkg.name}.forked")
    with execution.collecting([pkg.name]) as run:
        getattr(forked, function)(*args)
    bound = execution.bind(run, [pkg.name], pkg.root)
    return SimpleNamespace(executed_code=bound.executed, code_origins=bound.origins,
                           binding_problems=bound.problems, code_digests=None)


@pytest.mark.parametrize("function", ["process", "pool"])
def test_code_a_multiprocessing_fork_child_ran_is_bound(pkg, function):
    """Before pv.forktrace the child's lines were lost at its os._exit: `square` (run only in
    the children) was not bound, and editing it left the record fresh."""
    rec = record_forked(pkg, function)
    assert not rec.binding_problems
    assert "square" in rec.executed_code[f"{pkg.name}.forked"]
    edit(pkg.dir / "forked.py", "return x * x", "return x * x * x")
    assert changes(pkg, rec) == (f"{pkg.name}.forked:square",)


def test_a_bare_fork_that_leaves_without_saving_is_a_binding_problem(pkg):
    rec = record_forked(pkg, "bare", False)
    assert any("forked child" in p for p in rec.binding_problems)
    assert changes(pkg, rec)  # a record with a binding problem is never fresh


def test_a_bare_fork_that_saves_before_os_exit_is_bound(pkg):
    rec = record_forked(pkg, "bare", True)
    assert not rec.binding_problems
    assert "square" in rec.executed_code[f"{pkg.name}.forked"]


def test_a_fork_outside_any_check_leaves_nothing(pkg):
    (pkg.dir / "forked.py").write_text(FORKED)
    forked = importlib.import_module(f"{pkg.name}.forked")
    rec = record(pkg, "check")          # installs the fork hook
    assert forked.bare(False) == 1      # a fork with no check measured: no problem file anywhere
    assert not rec.binding_problems and record(pkg, "check").binding_problems == []
