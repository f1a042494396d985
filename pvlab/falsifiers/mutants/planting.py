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

builds any checkpoint the shared on-disk cache (runtime.zoo.build_cached) lacks with the bug
*lifted*, so a planted bug never reaches `.pv-cache/`.

Elsewhere, each in one place: pv.mutation knows which mutants are planted (`planted()`); the
check package's caches (pvlab.falsifiers.fixtures) drop themselves when that changes; child
Python processes plant the same mutants through `mutants.child.python_command`.

This module imports nothing heavy at import time (pv reads the registry just to list names);
torch and the runtime are imported when a mutant is entered.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

PACKAGE = __name__.rpartition(".")[0]  # pvlab.falsifiers.mutants: the registry


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
        self.replant()

    def replant(self) -> None:
        """Put `new` back after stop(), keeping what start() saved."""
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
        self.replant()

    def replant(self) -> None:
        """Put `new` back after stop(), keeping what start() saved."""
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

_ACTIVE: list[Any] = []  # swaps of the mutant(s) planted in this process, in the order applied
_LIFTED: list[bool] = []  # non-empty while _suspended() has lifted them (a build inside a build)


@contextlib.contextmanager
def _suspended() -> Iterator[None]:
    """Lift every active mutant for the duration (clean code), then plant them again."""
    if _LIFTED:  # already clean: an inner guard of a nested mutant
        yield
        return
    lifted = list(_ACTIVE)
    for one in reversed(lifted):
        one.stop()
    _LIFTED.append(True)
    try:
        yield
    finally:
        _LIFTED.pop()
        for one in lifted:
            one.replant()


def _guards() -> list[Any]:
    """Swaps every mutant carries besides its own: clean builds of cached checkpoints."""
    from pvlab.runtime import zoo

    build_cached = zoo.build_cached

    @functools.wraps(build_cached)
    def clean_build_cached(*args: Any, **kwargs: Any) -> Any:
        with _suspended():
            return build_cached(*args, **kwargs)

    return [swap(zoo, "build_cached", clean_build_cached)]


@contextlib.contextmanager
def plant(name: str, *swaps: Any) -> Iterator[None]:
    """Apply `swaps` (swap(), swap_item()) for the body; undo them, last first, whatever happens.
    `name` is the mutant's, for messages."""
    applied: list[Any] = []
    try:
        for one in (*_guards(), *swaps):
            try:
                one.start()
            except Exception as exc:
                raise RuntimeError(f"mutant {name!r} could not plant {one!r}: {exc}") from exc
            applied.append(one)
            _ACTIVE.append(one)
        yield
    finally:
        for one in reversed(applied):
            one.stop()
            _ACTIVE.remove(one)


def active() -> list[str]:
    """Names of the registered mutants planted in this process right now (pv.mutation knows)."""
    from pv import mutation

    return list(mutation.planted())


def acts_on(*devices: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Where the planted bug can show: `pv strength` runs a mutant only on these devices (a
    mutant of the CUDA path alone that PASSes on the CPU is not blindness). Default: both."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.pv_devices = tuple(devices)  # type: ignore[attr-defined]
        return fn

    return mark


def registry() -> dict[str, Any]:
    """The planted bugs of this package (name -> pv.mutation.Mutant)."""
    from pv import mutation

    return {k: v for k, v in mutation.REGISTRY.items() if v.module.startswith(PACKAGE + ".")}
