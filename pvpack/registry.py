"""Runtime name -> the validated runtime a check drives.

The names and their factories live in `[tool.pv] runtimes` (pv.runtimes resolves them, only at
run time: pv validate and pv generate never import an adapter). Here the adapter pv hands a
check is wrapped in the protocol's validating facade, under the name it was registered with.
"""

from __future__ import annotations

from typing import Any

from pv import runtimes

from .protocol import Runtime


def runtime(adapter_or_name: Any) -> Runtime:
    """The validating facade of a runtime: given its name, or the adapter pv passed to a check
    (a bare adapter built outside the registry, e.g. in a unit test, is named by its class)."""
    if isinstance(adapter_or_name, Runtime):
        return adapter_or_name
    if isinstance(adapter_or_name, str):
        return Runtime(runtimes.adapter(adapter_or_name), adapter_or_name)
    name = runtimes.name_of(adapter_or_name) or type(adapter_or_name).__name__
    return Runtime(adapter_or_name, name)


def names() -> tuple[str, ...]:
    """The runtimes this project names, default first."""
    return runtimes.names()
