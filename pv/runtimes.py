"""Runtimes: the names `[tool.pv] runtimes` gives the training runtimes a project's checks drive.

    [tool.pv]
    runtimes = { pvlab = "pvlab.adapter:PvlabAdapter", transformers = "pvpack.adapters.transformers:TransformersAdapter" }
    subject_provider = "pvlab.adapter:subject_directory"

Each value is `module:factory`: a callable (a class, usually) returning the runtime's adapter.
A falsifier that lists `runtimes: [...]` runs once per runtime; the harness resolves the name
here **at run time only** (pv validate and pv generate check the names against the table and
never import an adapter) and passes the adapter to the check as its `runtime` parameter. The
first runtime of the table is the project's *default runtime*: ledger records written before
records named their runtime count as its evidence (pv.lifecycle).

pv knows nothing of what an adapter does (the falsifier pack, pvpack.protocol, does); this
module never imports torch. Adapters are built once per process and kept.
"""

from __future__ import annotations

import importlib
import re
from typing import Any, Callable, Mapping

_BINDING = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
RUNTIME_PARAM = "runtime"  # the check parameter a runtime fills


class RuntimeUnavailable(Exception):
    """A runtime name cannot be resolved to an adapter (unknown name, import or factory failure)."""


def check_table(value: object, where: str) -> dict[str, str]:
    """`[tool.pv] runtimes` as {name: "module:factory"}, or ValueError saying what is wrong."""
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a table of runtime names to \"module:factory\", got {type(value).__name__}")
    for name, binding in value.items():
        if not _NAME.match(name):
            raise ValueError(f"{where}: runtime name {name!r} must be lowercase letters, digits, '.', '_' or '-'")
        if not isinstance(binding, str) or not _BINDING.match(binding):
            raise ValueError(f"{where}.{name} must be \"package.module:factory\", got {binding!r}")
    return dict(value)


def check_provider(value: object, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _BINDING.match(value):
        raise ValueError(f"{where} must be \"package.module:function\", got {value!r}")
    return value


# Set by pv.plugin from the workspace (configure); read lazily from the current directory's
# workspace otherwise (a check called directly, e.g. from a unit test).
_table: dict[str, str] | None = None
_provider: str | None = None
_built: dict[str, Any] = {}
_versions: dict[str, str] = {}


def configure(table: Mapping[str, str] | None, provider: str | None = None) -> None:
    global _table, _provider
    _table = None if table is None else dict(table)
    _provider = provider
    _built.clear()
    _versions.clear()


def _settings() -> tuple[dict[str, str], str | None]:
    if _table is None:
        from pv.config import load_workspace

        workspace = load_workspace()
        configure(workspace.runtimes, workspace.subject_provider)
    return dict(_table or {}), _provider


def names() -> tuple[str, ...]:
    return tuple(_settings()[0])


def _resolve(binding: str, what: str) -> Callable[..., Any]:
    module_name, _, attr = binding.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - an adapter that cannot import is a named failure
        raise RuntimeUnavailable(f"{what} {binding!r}: cannot import {module_name}: "
                                 f"{type(error).__name__}: {error}") from error
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise RuntimeUnavailable(f"{what} {binding!r}: {module_name} has no callable {attr!r}")
    return factory


def adapter(name: str) -> Any:
    """The adapter of runtime `name`, built once per process."""
    if name in _built:
        return _built[name]
    table, _ = _settings()
    if name not in table:
        known = ", ".join(table) or "none: [tool.pv] runtimes is empty"
        raise RuntimeUnavailable(f"unknown runtime {name!r}; [tool.pv] runtimes names {known}")
    factory = _resolve(table[name], f"runtime {name!r}:")
    try:
        built = factory()
    except Exception as error:  # noqa: BLE001
        raise RuntimeUnavailable(f"runtime {name!r}: its factory {table[name]} raised "
                                 f"{type(error).__name__}: {error}") from error
    _built[name] = built
    return built


def binding_of(name: str) -> str | None:
    """The `module:factory` runtime `name` is bound to in [tool.pv] runtimes now (None: unknown)."""
    return _settings()[0].get(name)


def name_of(built: Any) -> str | None:
    """The name a built adapter was registered under (None: not one of ours)."""
    for name, candidate in _built.items():
        if candidate is built:
            return name
    return None


def version(name: str) -> str | None:
    """What a record says the runtime was: the adapter's `version()` (e.g. "transformers 4.57.1"),
    else the version of the distribution holding its factory's module; None when unknown."""
    if name in _versions:
        return _versions[name]
    built = adapter(name)
    text: str | None = None
    method = getattr(built, "version", None)
    if callable(method):
        try:
            answer = method()
            text = answer if isinstance(answer, str) and answer else None
        except Exception:  # noqa: BLE001 - a version is provenance, never worth the verdict
            text = None
    if text is None:
        text = _distribution_version(_settings()[0][name].partition(":")[0])
    _versions[name] = text
    return text


def _distribution_version(module_name: str) -> str | None:
    from importlib import metadata

    top = module_name.split(".")[0]
    for distribution in metadata.packages_distributions().get(top, []):
        try:
            return f"{distribution} {metadata.version(distribution)}"
        except metadata.PackageNotFoundError:
            continue
    return None


def subject_provider() -> Callable[[str], Any] | None:
    """The project's subject provider (`[tool.pv] subject_provider`), or None."""
    _, provider = _settings()
    return None if provider is None else _resolve(provider, "[tool.pv] subject_provider")


def cells(declared: list[str] | None, subjects: list[Any], devices: list[str],
          only: str | None = None) -> list[tuple[Any, str, str | None]]:
    """(subject, device, runtime) of the tests to select for one falsifier: its runtimes x
    subjects x devices (runtime None without `runtimes:`); with `only` (pv run --runtime), that
    runtime's cells alone — none for a falsifier that does not run on it."""
    if only is not None:
        declared = [only] if declared and only in declared else []
        if not declared:
            return []
    return [(s, d, rt) for rt in (declared or [None]) for s in subjects for d in devices]


def cell_runtime(recorded: str | None, declared: list[str] | None) -> str | None:
    """The runtime of the lifecycle cell a record belongs to (pv.lifecycle): the one it names, or —
    a record written before records named their runtime — the falsifier's first runtime
    (contracts list the project's default runtime first). None for a falsifier without
    `runtimes:`."""
    if not declared:
        return None
    return recorded or declared[0]
