"""The machinery that plants a bug and takes it out again (docs/mutants.md, "How to add a planted bug").

    @mutant("final_norm_skipped")
    def final_norm_skipped():
        '''... Imitates ... Seam: runtime.model.apply_final_norm.'''
        from pvlab.runtime import model

        def apply_final_norm(norm, hidden):
            return hidden

        with plant("final_norm_skipped", swap(model, "apply_final_norm", apply_final_norm)):
            yield

`swap(owner, name, new)` replaces one attribute of a runtime module or class, `swap_item(mapping,
key, new)` one entry of a runtime dict; `plant(name, *swaps)` applies them on entry and undoes
them, last first, in its `finally`, whatever the run does. Besides the mutant's own swaps it:

* builds any checkpoint the shared on-disk cache (runtime.zoo.build_cached) lacks with the
  mutant *lifted*, so a planted bug never reaches `.pv-cache/`;
* drops the check package's in-process caches when the planted bug changes (see
  pvlab.falsifiers.fixtures), so a model built with the bug is never reused without it;
* plants the same mutant in child Python processes started while it is active.

This module imports nothing heavy at import time (pv reads the registry just to list names);
torch and the runtime are imported when a mutant is entered.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

PACKAGE = __name__.rpartition(".")[0]  # pvlab.falsifiers.mutants: the registry
CHECKS = PACKAGE.rpartition(".")[0]  # pvlab.falsifiers: the check package whose caches are dropped
CHILD_ENV = "PV_MUTANT_IN_CHILD"  # "<module>:<mutant name>", read by the sitecustomize below


# ---- swaps ---------------------------------------------------------------------------------------


class Swap:
    """Replace `owner.name` (a module or class attribute) by `new`; restore it exactly on stop.

    The raw entry of the owner's __dict__ is saved (so a property, staticmethod or plain
    function of a class comes back as it was) and an attribute that the owner did not define
    itself (inherited) is deleted again rather than shadowed."""

    def __init__(self, owner: Any, name: str, new: Any):
        if not hasattr(owner, name):
            raise AttributeError(f"cannot plant {owner!r}.{name}: no such attribute (a renamed seam?)")
        self.owner, self.name, self.new = owner, name, new
        self.had_own = False
        self.original: Any = None

    def start(self) -> None:
        namespace = vars(self.owner)
        self.had_own = self.name in namespace
        self.original = namespace.get(self.name)
        setattr(self.owner, self.name, self.new)

    def stop(self) -> None:
        if self.had_own:
            setattr(self.owner, self.name, self.original)
        else:
            delattr(self.owner, self.name)

    def __repr__(self) -> str:
        owner = getattr(self.owner, "__name__", type(self.owner).__name__)
        return f"{owner}.{self.name}"


class ItemSwap:
    """Replace `mapping[key]`; restore (or remove) it on stop."""

    MISSING = object()

    def __init__(self, mapping: Any, key: str, new: Any, label: str = ""):
        self.mapping, self.key, self.new, self.label = mapping, key, new, label
        self.original: Any = self.MISSING

    def start(self) -> None:
        self.original = self.mapping.get(self.key, self.MISSING)
        if self.new is self.MISSING:
            self.mapping.pop(self.key, None)
        else:
            self.mapping[self.key] = self.new

    def stop(self) -> None:
        if self.original is self.MISSING:
            self.mapping.pop(self.key, None)
        else:
            self.mapping[self.key] = self.original

    def __repr__(self) -> str:
        return f"{self.label or 'mapping'}[{self.key!r}]"


def swap(owner: Any, name: str, new: Any) -> Swap:
    """Replace `owner.name` by `new`: a function of the runtime module that defines it, a method
    or classmethod of a runtime class. The runtime looks its seams up through the module
    attribute at call time (`kernels.rms_norm(...)`, `devices.resolve_device(...)`;
    tests/runtime/test_runtime_seams.py proves it), so this one setattr reaches every caller."""
    return Swap(owner, name, new)


def swap_item(mapping: Any, key: str, new: Any, label: str = "") -> ItemSwap:
    """Replace one entry of a runtime dict (e.g. runtime.config.PRESETS)."""
    return ItemSwap(mapping, key, new, label)


# ---- planting ------------------------------------------------------------------------------------

_ACTIVE: list[Any] = []  # swaps of the mutant(s) active in this process, in the order applied
_CACHE_OWNER: str | None = None  # the mutant whose run filled the check package's caches
_ENTERED: list[str] = []  # names of the active mutants (for tests and the child-process hook)


def _check_caches() -> list[Any]:
    out = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == CHECKS or name.startswith(CHECKS + ".")) or name.startswith(PACKAGE):
            continue
        for value in list(vars(module).values()):
            if callable(getattr(value, "cache_clear", None)) and not isinstance(value, type):
                out.append(value)
    return out


def _forget_check_caches() -> None:
    for cached in _check_caches():
        cached.cache_clear()


def _plugin_mutant() -> str | None:
    """The mutant pytest's pv plugin wraps every check call in (None outside such a run)."""
    harness = sys.modules.get("pv.harness")
    return harness.active_mutant() if harness is not None else None


@contextlib.contextmanager
def _suspended() -> Iterator[None]:
    """Lift every active mutant for the duration (clean code), then plant them again."""
    lifted = list(_ACTIVE)
    for one in reversed(lifted):
        one.stop()
    try:
        yield
    finally:
        for one in lifted:
            one.start()


def _guards() -> list[Any]:
    """Swaps every mutant carries besides its own: clean builds of cached checkpoints."""
    from pvlab.runtime import zoo

    build_cached = zoo.build_cached

    @functools.wraps(build_cached)
    def clean_build_cached(*args: Any, **kwargs: Any) -> Any:
        with _suspended():
            return build_cached(*args, **kwargs)

    return [swap(zoo, "build_cached", clean_build_cached)]


def _child_env(name: str) -> list[ItemSwap]:
    hook = _child_hook_dir()
    root = str(Path(__file__).resolve().parents[PACKAGE.count(".") + 1])
    path = os.pathsep.join([hook, root, *filter(None, [os.environ.get("PYTHONPATH")])])
    return [ItemSwap(os.environ, "PYTHONPATH", path, "os.environ"),
            ItemSwap(os.environ, CHILD_ENV, f"{__name__}:{name}", "os.environ")]


@contextlib.contextmanager
def plant(name: str, *swaps: Any) -> Iterator[None]:
    """Apply `swaps` (swap(), swap_item()) for the body; undo them, last first, whatever happens."""
    global _CACHE_OWNER
    if _CACHE_OWNER != name:
        _forget_check_caches()
        _CACHE_OWNER = name
    applied: list[Any] = []
    try:
        for one in (*_guards(), *_child_env(name), *swaps):
            one.start()
            applied.append(one)
            _ACTIVE.append(one)
        _ENTERED.append(name)
        yield
    finally:
        if _ENTERED and _ENTERED[-1] == name:
            _ENTERED.pop()
        for one in reversed(applied):
            one.stop()
            _ACTIVE.remove(one)
        if _plugin_mutant() != name:
            _forget_check_caches()
            _CACHE_OWNER = None


def active() -> list[str]:
    """Names of the mutants active in this process right now (normally none or one)."""
    return list(_ENTERED)


def acts_on(*devices: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Where the planted bug can show: `pv strength` runs a mutant only on these devices (a
    mutant of the CUDA path alone that PASSes on the CPU is not blindness). Default: both."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.pv_devices = tuple(devices)  # type: ignore[attr-defined]
        return fn

    return mark


# ---- child processes ---------------------------------------------------------------------------

_SITECUSTOMIZE = '''\
"""Written by {module}: plants the mutant named in ${env} in this Python process."""
import os as _os
import sys as _sys


def _chain_to_the_real_sitecustomize():
    here = _os.path.dirname(_os.path.abspath(__file__))
    saved = list(_sys.path)
    _sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    mine = _sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401 - the interpreter's own, if there is one
    except ImportError:
        pass
    finally:
        _sys.path[:] = saved
        if mine is not None:
            _sys.modules["sitecustomize"] = mine


_chain_to_the_real_sitecustomize()
_wanted = _os.environ.get("{env}", "")
if _wanted:
    try:
        import importlib as _importlib

        _module, _, _name = _wanted.partition(":")
        _importlib.import_module(_module)._enter_for_process(_name)
    except Exception as _exc:  # never break the child: say so, loudly
        _sys.stderr.write(f"pv: could not plant mutant {{_wanted!r}} in this process: {{_exc!r}}\\n")
'''

_HOOK_DIR: str | None = None


def _child_hook_dir() -> str:
    global _HOOK_DIR
    if _HOOK_DIR is None or not os.path.isdir(_HOOK_DIR):
        _HOOK_DIR = tempfile.mkdtemp(prefix="pv-mutant-hook-")
        Path(_HOOK_DIR, "sitecustomize.py").write_text(
            _SITECUSTOMIZE.format(module=__name__, env=CHILD_ENV), encoding="utf-8")
        atexit.register(shutil.rmtree, _HOOK_DIR, True)
    return _HOOK_DIR


def _enter_for_process(name: str) -> None:
    """Enter mutant `name` for the rest of this (child) process; called by the sitecustomize."""
    import importlib

    from pv import mutation

    importlib.import_module(PACKAGE)
    context = mutation.get(registry(), name)()
    context.__enter__()
    atexit.register(context.__exit__, None, None, None)


def registry() -> dict[str, Any]:
    """The planted bugs of this package (name -> pv.mutation.Mutant)."""
    from pv import mutation

    return {k: v for k, v in mutation.REGISTRY.items() if v.module.startswith(PACKAGE + ".")}
