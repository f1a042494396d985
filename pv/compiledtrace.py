"""The code torch.compile ran: lines coverage cannot see, given to the check that ran them.

torch.compile (TorchDynamo) does not execute a compiled function's Python: it traces the
bytecode symbolically, inlining every function the body calls, and runs generated code from
then on. So coverage.py (pv.execution) records only the compiled function's first line, on
every call, and nothing of its body or of what it inlined: a record of a check whose model
was compiled stayed fresh when `kernels.rope_cos_sin` or the loss's chunk step changed.

This module closes that gap with dynamo's own record. Dynamo lists, for each frame it
compiles, every code object it traced (the frame's and each inlined function's); a bytecode
hook (`torch._dynamo.convert_frame.register_bytecode_hook`, called once per compiled frame)
reads that list from the compiling frame's `OutputGraph.traced_code` and remembers it under
the frame's code. Then:

* a check during which a frame is compiled gets every line of the traced code objects;
* a later check that runs the compiled frame (a cache hit: dynamo traces nothing, and coverage
  records the frame's first line) gets them too, because coverage saw the frame's code run.

Binding more than ran is the safe side (evidence goes stale more often, never less): every
line of a traced function counts, whichever branch the trace took. What cannot be told is said:
if dynamo compiled a frame while no hook listened (torch imported mid-check before the hook was
installed, or a torch whose compiler this hook cannot read), the check's record carries a problem
and is never fresh (`problems_since`). pv never imports torch for this: the hook is installed
only where the process already has it.
"""

from __future__ import annotations

import os
import sys
import threading
from types import CodeType
from typing import Iterable

# original code of each compiled frame -> {file: lines} of everything its trace covered
_traced: dict[CodeType, dict[str, frozenset[int]]] = {}
_sinks: list[dict[str, set[int]]] = []     # the runs collecting now (pv.execution), outermost first
_lock = threading.Lock()
_installed = False
_unreadable: list[str] = []                 # compiled frames whose traced code could not be read


def _lines_of(code: CodeType) -> frozenset[int]:
    lines = {line for _, _, line in code.co_lines() if line is not None}
    lines.add(code.co_firstlineno)
    return frozenset(lines)


def _traced_code(depth: int = 4) -> list[CodeType] | None:
    """The compiling frame's OutputGraph.traced_code: a local of the dynamo function that
    calls the bytecode hooks (`output`), looked up a few frames out so that a refactor moving
    the call one level deeper still finds it."""
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return None
        for value in frame.f_locals.values():
            traced = _traced_code_of(value)
            if traced is not None:
                return traced
        frame = frame.f_back
    return None


def _traced_code_of(value: object) -> list[CodeType] | None:
    """traced_code held by `value`: an OutputGraph (`.traced_code`, torch >= 2.12, or
    `.tracing_context.traced_code`), or what holds one (`.output_graph`, `.output`)."""
    try:   # arbitrary locals: an attribute lookup may run code, and must not fail the compilation
        for holder in (value, getattr(value, "output_graph", None), getattr(value, "output", None)):
            for owner in (holder, getattr(holder, "tracing_context", None)):
                traced = getattr(owner, "traced_code", None)
                if isinstance(traced, list) and traced and all(isinstance(c, CodeType) for c in traced):
                    return traced
    except Exception:  # noqa: BLE001 - not this local
        return None
    return None


def _hook(code: CodeType, new_code: CodeType) -> None:
    try:
        traced = _traced_code()
    except Exception:  # noqa: BLE001 - never fail the user's compilation: the record says it
        traced = None
    with _lock:
        if traced is None:
            _unreadable.append(f"{code.co_filename}:{code.co_firstlineno} ({code.co_name})")
            return None
        lines: dict[str, set[int]] = {}
        for traced_code in [code, *traced]:
            lines.setdefault(traced_code.co_filename, set()).update(_lines_of(traced_code))
        frozen = {name: frozenset(found) for name, found in lines.items()}
        _traced[code] = frozen
        for sink in _sinks:
            for name, found in frozen.items():
                sink.setdefault(name, set()).update(found)
    return None


def install() -> bool:
    """Listen to dynamo's compilations if this process has torch (idempotent); whether it does."""
    global _installed
    if _installed:
        return True
    if "torch" not in sys.modules:
        return False
    try:
        from torch._dynamo.convert_frame import register_bytecode_hook
    except Exception:  # noqa: BLE001 - a torch without dynamo compiles nothing this could bind
        return False
    register_bytecode_hook(_hook)
    _installed = True
    return True


def compiled_frames() -> int:
    """How many frames dynamo has compiled in this process (0 without torch)."""
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(dynamo_utils, "counters", None)
    if counters is None:
        return 0
    return int(sum(counters["frames"].get(key, 0) for key in ("ok",)))


def open_sink() -> dict[str, set[int]]:
    """Start giving traced lines to a run: what is compiled from now on lands in the sink."""
    sink: dict[str, set[int]] = {}
    with _lock:
        _sinks.append(sink)
    return sink


def close_sink(sink: dict[str, set[int]], executed: dict[str, set[int]]) -> None:
    """Stop the sink and merge it into `executed` (file -> lines coverage saw), together with
    what every compiled frame whose code coverage saw running had traced (cache hits)."""
    with _lock:
        if sink in _sinks:
            _sinks.remove(sink)
        remembered = list(_traced.items())
    for name, lines in sink.items():
        executed.setdefault(name, set()).update(lines)
    by_real_path: dict[str, set[int]] = {}
    for name, lines in executed.items():
        by_real_path.setdefault(os.path.realpath(name), set()).update(lines)
    for code, traced in remembered:
        seen = by_real_path.get(os.path.realpath(code.co_filename))
        if seen and not seen.isdisjoint(_lines_of(code)):
            for name, lines in traced.items():
                executed.setdefault(name, set()).update(lines)


def drop_sink(sink: dict[str, set[int]]) -> None:
    """Stop the sink without merging it (close_sink did, or the run failed)."""
    with _lock:
        if sink in _sinks:
            _sinks.remove(sink)


def problems_since(frames_before: int, unreadable_before: int, installed: bool) -> list[str]:
    """What a check's binding cannot vouch for: frames compiled while no hook listened, or
    whose traced code could not be read."""
    problems = []
    if not installed and compiled_frames() > frames_before:
        problems.append("torch.compile compiled code while pv was not listening (torch was imported during "
                        "the check): the compiled functions' bodies are not bound; run the check again")
    with _lock:
        unreadable = _unreadable[unreadable_before:]
    if unreadable:
        problems.append(f"torch.compile traced {', '.join(sorted(set(unreadable))[:3])} but this torch's "
                        "compiler did not say which code it traced: the compiled bodies are not bound")
    return problems


def unreadable_count() -> int:
    with _lock:
        return len(_unreadable)


def clear(codes: Iterable[CodeType] | None = None) -> None:
    """Forget remembered traces (tests)."""
    with _lock:
        if codes is None:
            _traced.clear()
        else:
            for code in codes:
                _traced.pop(code, None)
