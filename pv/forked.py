"""Independent work done in a forked child while this process does other work (`pv validate`
with nothing remembered and nothing recorded: its per-file checks beside PV501's evidence, and
PV501's contracts in two halves).

`Forked(fn)` forks a child that runs `fn()` and hands its value back pickled through a pipe;
`result()` returns it. The child sees what this process had when it forked (copy on write:
nothing is sent to it) and shares nothing with it afterwards, so `fn` must need nothing this
process computes later, and what it leaves behind (facts for pv's caches, inputs noted for a
recorded run) is lost unless its value carries it (pv.validation's file checks hand theirs back;
PV501's halves and the checks beside it fork only where nothing is remembered or recorded).
Wherever no child can do it — not Linux, another thread running (a fork would copy the locks
it holds), a single core, `PV_JOBS=1`, fork failing — or the child does not hand a value back
(it raised, was killed, its value does not pickle), `result()` computes it here (`here()`, by
default `fn()`): the same value, or the same exception, so which process ran it never shows in
what a run reports.
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any, Callable


def available() -> bool:
    """Whether a forked child could run beside this process on another core."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    wanted = os.environ.get("PV_JOBS", "")
    if wanted.isdigit() and int(wanted) <= 1:
        return False  # one process, as asked
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if cores < 2 and not (wanted.isdigit() and int(wanted) > 1):
        return False
    import threading

    return threading.active_count() == 1


def idle_core() -> bool:
    """Whether another core is free right now: fewer runnable tasks on the machine than cores
    (Linux's /proc/loadavg counts this process among them). A child that only splits work this
    process could do itself (and costs more CPU in all: lost sharing, duplicated setup, copied
    pages) is forked only then: on a machine whose other cores are busy it would only be slower.
    This process's own children whose value it has not read yet are not counted: each ends
    within the run, and work split with a new child (Tokens) is taken by whichever process is
    free (`pv validate` asked as its per-file child was ending, and a split lost to that race
    was a third of a cold run). True where it cannot be told, and where PV_JOBS asks for more
    than one process."""
    wanted = os.environ.get("PV_JOBS", "")
    if wanted.isdigit() and int(wanted) > 1:
        return True
    try:
        with open("/proc/loadavg", "rb") as handle:
            running = int(handle.read().split()[3].split(b"/")[0])
        cores = len(os.sched_getaffinity(0))
    except (OSError, ValueError, IndexError, AttributeError):
        return True
    return running - sum(map(_runnable, _CHILDREN)) < cores


_CHILDREN: set[int] = set()  # this process's forked children whose value it has not read yet


def _runnable(pid: int) -> bool:
    """Whether process `pid` is running or waiting for a core (Linux's state R, a task
    /proc/loadavg counts); False where it cannot be told."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] == b"R"


class Forked:
    """`fn()`, run in a forked child where one can run it (see the module's docstring)."""

    def __init__(self, fn: Callable[[], Any], here: Callable[[], Any] | None = None) -> None:
        self._fn = fn
        self._here = here or fn  # what result() computes in this process where no child handed a value back
        self._pid: int | None = None
        self._pipe: int | None = None
        if not available():
            return
        try:
            read, write = os.pipe()
        except OSError:
            return
        try:
            sys.stdout.flush()  # nothing buffered is written twice (the child never flushes: os._exit)
            sys.stderr.flush()
            pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            return
        if pid == 0:  # the child: compute, hand the value back, leave without running any exit handler
            status = 1
            try:
                os.close(read)
                payload = pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write, "wb") as out:
                    out.write(payload)
                status = 0
            except BaseException:  # noqa: BLE001 - the parent computes it again, and meets the error itself
                pass
            finally:
                os._exit(status)
        os.close(write)
        self._pid, self._pipe = pid, read
        _CHILDREN.add(pid)

    @property
    def forked(self) -> bool:
        return self._pid is not None

    def result(self) -> Any:
        """The child's value; `here()` (by default `fn()`) computed here where it did not hand one back."""
        pid, pipe = self._pid, self._pipe
        self._pid = self._pipe = None
        _CHILDREN.discard(pid)  # type: ignore[arg-type]
        if pid is not None and pipe is not None:
            payload = b""
            try:
                with os.fdopen(pipe, "rb") as handle:
                    payload = handle.read()
            except OSError:
                payload = b""
            finally:
                try:
                    _, status = os.waitpid(pid, 0)
                except ChildProcessError:
                    status = -1
            if status == 0 and payload:
                try:
                    return pickle.loads(payload)
                except Exception:  # noqa: BLE001 - computed here instead
                    pass
        return self._here()


class Tokens:
    """The numbers 0 .. count-1, each handed to exactly one of the processes that take from it:
    written to a pipe before the children are forked, read four bytes at a time (a read from a
    pipe takes its bytes whole, under the pipe's lock), so whichever process is free takes the
    next piece of work and none waits for a share that another, slower one was given up front.
    At most MAX_TOKENS (the pipe's buffer: writing more before any reader would block)."""

    MAX_TOKENS = 65536 // 4

    def __init__(self, count: int) -> None:
        if not 0 <= count <= self.MAX_TOKENS:
            raise ValueError(f"{count} tokens: at most {self.MAX_TOKENS}")
        read, write = os.pipe()
        try:
            # never blocking: a pipe can be smaller than 64 KiB (a user past the kernel's
            # pipe-user-pages-soft gets one page), and nobody reads it yet
            os.set_blocking(write, False)
            payload = b"".join(n.to_bytes(4, "little") for n in range(count))
            while payload:
                payload = payload[os.write(write, payload):]
        except BaseException:
            os.close(read)
            raise  # BlockingIOError where the pipe cannot hold them: no Tokens
        finally:
            os.close(write)
        self._read: int | None = read

    def take(self) -> int | None:
        """The next number nobody took yet; None when none is left."""
        if self._read is None:
            return None
        data = os.read(self._read, 4)
        return int.from_bytes(data, "little") if len(data) == 4 else None

    def close(self) -> None:
        if self._read is not None:
            os.close(self._read)
            self._read = None


def tokens(count: int) -> Tokens | None:
    """Tokens of `count`, or None where no pipe can hold them (too many, no descriptor left, a
    pipe too small)."""
    try:
        return Tokens(count)
    except (OSError, ValueError):
        return None
