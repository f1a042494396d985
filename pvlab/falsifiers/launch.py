"""Start W ranks of a check on this machine, collect what each observed, never hang.

    results = launch.run_ranks(target, world_size=2, backend="gloo", kwargs={...}, timeout_s=120)

`target(**kwargs)` (a module-level function, named `module:function`) runs in W fresh Python
processes, `python -m pvlab.falsifiers.launch WORKDIR module:function` -- like torchrun's workers:
no forked torch state, no re-import of the caller's main module, and a planted bug reaches them
the way it reaches every child process (below). Each rank gets torchrun's environment -- RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT and TORCHELASTIC_USE_AGENT_STORE=True -- so the rank code is exactly the code that
runs under `torchrun`: `init_process_group(init_method="env://")` connects to the rendezvous
store. Like torchrun's agent, this process hosts that store (a TCPStore on a port the kernel
chooses), so no port is guessed and none can be taken in between.

Every rank's return value (a dict, tensors allowed) is saved to a file in a private temporary
directory; `run_ranks` returns them in rank order. It raises instead of returning when:

- a rank raises or dies (non-zero exit, a signal): `RankFailed`, naming the rank and its error;
  the other ranks are killed at once (they would otherwise wait for it in a collective);
- the ranks are not all done within `timeout_s`: `RanksTimedOut`, naming the ranks still running;
  all are killed.

Under pv a raised check is an ERROR, never a pass, so a failing or hanging rank cannot make a
falsifier pass, and cannot make `pv run` hang.

Planted bugs: each rank's command line comes from `pvlab.falsifiers.mutants.child.python_command`,
so the mutants planted in this process are planted in every rank before the target runs
(tests/falsifiers/test_launch.py proves it).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

from .mutants.child import python_command

RESULT = "rank-{rank}.pt"
ERROR = "rank-{rank}.error"
LOG = "rank-{rank}.log"
KWARGS = "kwargs.pt"
_KILL_GRACE_S = 5.0


class RankFailed(RuntimeError):
    """A rank raised or died; the message names it and carries its error."""


class RanksTimedOut(RuntimeError):
    """The ranks were not all done within the timeout; they were killed."""


def backend_for(device: str) -> str:
    """NCCL for CUDA devices, gloo for the CPU."""
    return "nccl" if str(device).startswith("cuda") else "gloo"


def binding(target: Callable[..., Any]) -> str:
    """`module:function` of a module-level function (what a rank imports)."""
    module, name = getattr(target, "__module__", None), getattr(target, "__qualname__", "")
    if not module or not name or "<" in name or "." in name or module == "__main__":
        raise ValueError(f"{target!r} is not a module-level function of an importable module")
    return f"{module}:{name}"


def _rank_main(workdir: str, target_binding: str) -> int:
    """One rank (this process, started by run_ranks): import the target, run it, save its result."""
    import torch

    rank = int(os.environ["RANK"])
    try:
        module, _, name = target_binding.partition(":")
        target = getattr(importlib.import_module(module), name)
        kwargs = torch.load(Path(workdir) / KWARGS, weights_only=False)
        result = target(**kwargs)
        partial = Path(workdir) / (RESULT.format(rank=rank) + ".partial")
        torch.save(result, partial)
        partial.replace(Path(workdir) / RESULT.format(rank=rank))
        return 0
    except BaseException:  # noqa: BLE001 - any failure is reported to the parent, then the rank dies
        (Path(workdir) / ERROR.format(rank=rank)).write_text(traceback.format_exc(), encoding="utf-8")
        return 1
    finally:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - the result (or the error) is already written
                pass


def _kill(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + _KILL_GRACE_S
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _error_of(workdir: Path, rank: int, exitcode: int | None) -> str:
    file = workdir / ERROR.format(rank=rank)
    if file.is_file():
        lines = [line for line in file.read_text(encoding="utf-8").strip().splitlines() if line.strip()]
        return lines[-1] if lines else "(empty traceback)"
    log = workdir / LOG.format(rank=rank)
    tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:] if log.is_file() else []
    how = f"killed by signal {-exitcode}" if exitcode is not None and exitcode < 0 else f"exit status {exitcode}"
    return how + (": " + " | ".join(tail) if tail else " without a traceback")


def _child_path() -> str:
    """PYTHONPATH for a rank: this process's own PYTHONPATH first (a planted bug's hook lives
    there), then the directory holding pvlab, then every directory on this process's sys.path,
    so the rank imports the same modules (and the target) this process does."""
    root = str(Path(__file__).resolve().parents[2])
    entries = [*filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)), root,
               *(entry for entry in sys.path if entry and os.path.isdir(entry))]
    return os.pathsep.join(dict.fromkeys(entries))


def run_ranks(target: Callable[..., Any], *, world_size: int, kwargs: dict[str, Any] | None = None,
              timeout_s: float = 300.0, environment: dict[str, str] | None = None) -> list[Any]:
    """Run `target(**kwargs)` on `world_size` ranks; return their results in rank order (see above).

    `environment` is added to each rank's environment (e.g. thread counts)."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    import torch
    from torch.distributed import TCPStore

    target_binding = binding(target)
    store = TCPStore("127.0.0.1", 0, world_size, is_master=True, timeout=timedelta(seconds=timeout_s),
                     wait_for_workers=False)
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="pv-ranks-") as tmp:
        workdir = Path(tmp)
        torch.save(dict(kwargs or {}), workdir / KWARGS)
        try:
            for rank in range(world_size):
                env = {**os.environ, **(environment or {}), "PYTHONPATH": _child_path(),
                       "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
                       "LOCAL_WORLD_SIZE": str(world_size), "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(store.port), "TORCHELASTIC_USE_AGENT_STORE": "True"}
                with open(workdir / LOG.format(rank=rank), "wb") as log:
                    processes.append(subprocess.Popen(python_command("-m", __name__, tmp, target_binding),
                                                      env=env, stdout=log, stderr=subprocess.STDOUT,
                                                      stdin=subprocess.DEVNULL))
            deadline = time.monotonic() + timeout_s
            while True:
                codes = [p.poll() for p in processes]
                failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
                if failed:
                    rank, code = failed[0]
                    _kill(processes)
                    raise RankFailed(f"rank {rank} of {world_size} failed: {_error_of(workdir, rank, code)}")
                if all(code == 0 for code in codes):
                    break
                if time.monotonic() > deadline:
                    running = [rank for rank, code in enumerate(codes) if code is None]
                    _kill(processes)
                    raise RanksTimedOut(f"rank(s) {running} of {world_size} still running after {timeout_s:g} s "
                                        "(a hang, or too slow for the timeout); all ranks killed")
                time.sleep(0.05)
            results = []
            for rank in range(world_size):
                file = workdir / RESULT.format(rank=rank)
                if not file.is_file():
                    raise RankFailed(f"rank {rank} of {world_size} exited 0 without a result")
                results.append(torch.load(file, weights_only=False))
            return results
        finally:
            _kill(processes)
            del store


if __name__ == "__main__":
    code = _rank_main(sys.argv[1], sys.argv[2])
    # The result (or the traceback) is written and the process group destroyed: leave without
    # the interpreter's teardown, where a collective library's C++ threads can still abort the
    # process ("terminate called without an active exception", signal 6; seen on the 2-core
    # CI machine in FSDP ranks) and turn a finished rank into a failed one.
    sys.stdout.flush()
    sys.stderr.flush()
    from pv.execution import save_before_hard_exit

    save_before_hard_exit()  # os._exit skips atexit: save the code this rank ran for its record
    os._exit(code)
