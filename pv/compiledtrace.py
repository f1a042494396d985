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
if dynamo compiled a frame while no hook listened (a torch without the hook, or whose compiler
this module cannot read), the check's record carries a problem and is never fresh
(`problems_since`). pv never imports torch or dynamo for this (importing dynamo alone costs
about 1.3 s): `install` registers the hook at once where dynamo is loaded, and otherwise puts a
finder on `sys.meta_path` that registers it the moment anything imports dynamo's
`convert_frame`, before dynamo can compile a frame.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
import threading
from types import CodeType
from typing import Iterable

_DYNAMO = "torch._dynamo.convert_frame"   # the module whose register_bytecode_hook pv calls

# original code of each compiled frame -> (its real path and lines, {file: lines} of its whole trace)
_traced: dict[CodeType, tuple[str, frozenset[int], dict[str, frozenset[int]]]] = {}
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
        _traced[code] = (os.path.realpath(code.co_filename), _lines_of(code), frozen)
        for sink in _sinks:
            for name, found in frozen.items():
                sink.setdefault(name, set()).update(found)
    return None


def _register(module) -> None:
    """Register the hook with dynamo's convert_frame module (a torch without the call compiles
    unheard: problems_since says so)."""
    global _installed
    try:
        module.register_bytecode_hook(_hook)
    except Exception:  # noqa: BLE001 - never fail torch's own import
        return
    _installed = True


class _ListenOnImport(importlib.abc.MetaPathFinder):
    """Registers the hook as dynamo's convert_frame module finishes loading: found by the
    finders after this one, its loader's exec_module wrapped."""

    def find_spec(self, name, path, target=None):
        if name != _DYNAMO or _installed:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = None if finder is self or find is None else find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        load = loader.exec_module

        def exec_module(module):
            load(module)
            _register(module)

        loader.exec_module = exec_module
        return spec


def install() -> None:
    """Listen to dynamo's compilations from now on (idempotent), without importing it."""
    if _installed:
        return
    module = sys.modules.get(_DYNAMO)
    if module is not None:
        _register(module)
    elif not any(isinstance(finder, _ListenOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ListenOnImport())


def compiled_frames() -> int:
    """How many frames dynamo has compiled in this process (0 without torch)."""
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(dynamo_utils, "counters", None)
    if counters is None:
        return 0
    return int(counters["frames"].get("ok", 0))


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
    if not remembered:
        return
    by_real_path: dict[str, set[int]] = {}
    for name, lines in executed.items():
        by_real_path.setdefault(os.path.realpath(name), set()).update(lines)
    for real_path, frame_lines, traced in (entry for _, entry in remembered):
        seen = by_real_path.get(real_path)
        if seen and not seen.isdisjoint(frame_lines):
            for name, lines in traced.items():
                executed.setdefault(name, set()).update(lines)


def drop_sink(sink: dict[str, set[int]]) -> None:
    """Stop the sink without merging it (close_sink did, or the run failed)."""
    with _lock:
        if sink in _sinks:
            _sinks.remove(sink)


def problems_since(frames_before: int, unreadable_before: int) -> list[str]:
    """What a check's binding cannot vouch for: frames compiled while no hook listened, or
    whose traced code could not be read."""
    problems = []
    if not _installed and compiled_frames() > frames_before:
        problems.append("torch.compile compiled code while pv was not listening (this torch's dynamo has no "
                        "bytecode hook pv could register): the compiled functions' bodies are not bound")
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
