"""Loading a contract: the file read as safe YAML with positions (pv.safe_yaml), then checked
against the schema (pv.schema), its errors turned into diagnostics (pv.schema_errors).

`load_contract` is the one entry point the verbs use; `LoadedContract` (the file, its plain
data, positions on demand and the validated model) is re-exported here for them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pv.diagnostics import Diagnostic
from pv.safe_yaml import MAX_BYTES, MAX_DEPTH, MAX_NODES, SCHEMA_LINE_PREFIX, LoadedContract, diag, read_yaml
from pv.schema import Contract
from pv.schema_errors import PYTHON_TYPE_WORDS, schema_diagnostics

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "SCHEMA_LINE_PREFIX", "LoadedContract", "load_contract",
           "read_yaml"]


def load_contract(path: Path, display: str | None = None,
                  remembered: Any = None) -> tuple[LoadedContract | None, list[Diagnostic]]:
    """YAML + schema. Returns the loaded file (contract None if the schema failed) and problems.
    `remembered` (a pv.cache.Cache): the YAML of bytes read before comes from it (pv.loadcache)."""
    display = display or str(path)
    if remembered is not None:
        from pv.loadcache import read_yaml_remembered

        loaded, problems = read_yaml_remembered(path, display, remembered)
    else:
        loaded, problems = read_yaml(path, display)
    if loaded is None:
        return None, problems
    if loaded.data is None:
        problems.append(diag(display, 0, 0, "PV106", "empty file: the YAML document is empty",
                             "start from an existing contract in contracts/"))
        return loaded, problems
    if not isinstance(loaded.data, dict):
        kind = PYTHON_TYPE_WORDS.get(type(loaded.data).__name__, type(loaded.data).__name__)
        problems.append(diag(display, 1, 1, "PV107", f"top level is {kind}, not a mapping",
                             "a contract starts with `metadata:`"))
        return loaded, problems
    try:
        loaded.contract = Contract.model_validate(loaded.data)
    except ValidationError as exc:
        problems.extend(schema_diagnostics(loaded, exc))
    return loaded, problems

