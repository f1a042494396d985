"""Loading contract files: safe YAML with positions, then the schema.

Only YAML's safe subset is accepted (no python/* tags, nothing constructed from a tag).
The document is composed into nodes and built here by hand, which lets pv
  - remember the line:col of every key and value, so schema errors point at the source;
  - bound alias expansion (a "billion laughs" file is rejected after MAX_NODES nodes);
  - report duplicate keys, which PyYAML would silently resolve to the last one.
Files are also capped in size, and binary or empty files are rejected before parsing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from pv.diagnostics import Diagnostic
from pv.schema import Contract

MAX_BYTES = 1_000_000
MAX_NODES = 100_000  # after alias expansion; real contracts have a few hundred
SCHEMA_LINE_PREFIX = "# yaml-language-server: $schema="

Loc = tuple  # a path into the document: ("falsification_tests", 0, "prediction")


@dataclass
class LoadedContract:
    path: Path
    display_path: str
    text: str
    sha256: str  # of the file's bytes: generated tests record it to detect drift
    data: Any  # the plain YAML data
    contract: Contract | None  # None when the schema rejected it
    positions: dict[Loc, tuple[int, int]] = field(default_factory=dict)  # value positions
    key_positions: dict[Loc, tuple[int, int]] = field(default_factory=dict)

    def position(self, loc: Loc, key: bool = False) -> tuple[int, int]:
        """line, col (1-based) of the value at `loc`, or of its key; else the nearest parent."""
        table = self.key_positions if key else self.positions
        loc = tuple(loc)
        while loc:
            if loc in table:
                return table[loc]
            if not key and loc in self.key_positions:
                return self.key_positions[loc]
            loc = loc[:-1]
        return (1, 1)


class _Budget(Exception):
    pass


_COLLECTION_TAGS = {yaml.MappingNode: "tag:yaml.org,2002:map", yaml.SequenceNode: "tag:yaml.org,2002:seq"}


class _Builder:
    """Turns a composed node tree into plain data, recording positions."""

    def __init__(self) -> None:
        self.constructor = yaml.SafeLoader("")  # resolves scalar tags (int, float, bool, date...)
        self.nodes = 0
        self.positions: dict[Loc, tuple[int, int]] = {}
        self.key_positions: dict[Loc, tuple[int, int]] = {}
        self.duplicates: list[tuple[Loc, tuple[int, int]]] = []

    def build(self, node: yaml.Node, loc: Loc = ()) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _Budget()
        mark = node.start_mark
        self.positions.setdefault(loc, (mark.line + 1, mark.column + 1))
        expected = _COLLECTION_TAGS.get(type(node))
        if expected is not None and node.tag != expected:
            raise yaml.constructor.ConstructorError(
                None, None, f"could not determine a constructor for the tag {node.tag!r}", mark
            )
        if isinstance(node, yaml.MappingNode):
            self.constructor.flatten_mapping(node)  # merge keys (<<) per YAML 1.1
            result: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self.build(key_node, loc + ("<key>",))
                if not isinstance(key, (str, int, float, bool)) or key is None:
                    key = str(key)
                here = loc + (key,)
                key_mark = key_node.start_mark
                if key in result:
                    self.duplicates.append((here, (key_mark.line + 1, key_mark.column + 1)))
                self.key_positions[here] = (key_mark.line + 1, key_mark.column + 1)
                result[key] = self.build(value_node, here)
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, loc + (i,)) for i, item in enumerate(node.value)]
        return self.constructor.construct_object(node, deep=True)


def _diag(path: str, line: int, col: int, code: str, message: str, hint: str = "") -> Diagnostic:
    return Diagnostic(path=path, line=line, col=col, code=code, message=message, hint=hint)


def read_yaml(path: Path, display: str) -> tuple[LoadedContract | None, list[Diagnostic]]:
    """Read and parse one file into plain data with positions (no schema yet)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, [_diag(display, 0, 0, "PV100", f"cannot read file: {exc.strerror}")]
    if len(raw) > MAX_BYTES:
        return None, [
            _diag(display, 0, 0, "PV104", f"file is {len(raw):,} bytes, over the {MAX_BYTES:,}-byte cap",
                  "a contract is a few kilobytes; split it or check you named the right file")
        ]
    if b"\x00" in raw[:8192]:
        return None, [_diag(display, 0, 0, "PV105", "binary file (NUL bytes), not YAML text")]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return None, [_diag(display, line, 0, "PV105", "not UTF-8 text", "save the file as UTF-8")]
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()):
        return None, [_diag(display, 0, 0, "PV106", "empty file: no YAML document",
                            "start from an existing contract in contracts/")]
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.composer.ComposerError as exc:
        return None, [_yaml_diag(display, exc, "PV101")]
    except yaml.YAMLError as exc:
        return None, [_yaml_diag(display, exc, "PV101")]
    builder = _Builder()
    try:
        data = builder.build(node)
    except _Budget:
        return None, [
            _diag(display, 1, 1, "PV103", f"YAML aliases expand to more than {MAX_NODES:,} nodes",
                  "this looks like an alias bomb ('billion laughs'); contracts need no such nesting")
        ]
    except yaml.constructor.ConstructorError as exc:
        code = "PV102" if exc.problem and "tag" in exc.problem else "PV101"
        hint = "pv loads YAML safely: python/* and other custom tags are never constructed" if code == "PV102" else ""
        return None, [_yaml_diag(display, exc, code, hint)]
    except (yaml.YAMLError, ValueError, TypeError) as exc:
        return None, [_diag(display, 1, 1, "PV101", f"cannot build YAML value: {exc}")]
    loaded = LoadedContract(
        path=path, display_path=display, text=text, sha256=hashlib.sha256(raw).hexdigest(),
        data=data, contract=None, positions=builder.positions, key_positions=builder.key_positions,
    )
    problems = [
        _diag(display, line, col, "PV205", f"duplicate key {loc[-1]!r} (YAML would keep only the last one)",
              "remove or rename one of them")
        for loc, (line, col) in builder.duplicates
    ]
    return loaded, problems


def _yaml_diag(display: str, exc: yaml.MarkedYAMLError, code: str, hint: str = "") -> Diagnostic:
    mark = exc.problem_mark or exc.context_mark
    line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
    message = " ".join(p for p in (exc.context, exc.problem) if p) or str(exc)
    return _diag(display, line, col, code, f"YAML: {message}", hint)


# --- schema --------------------------------------------------------------------------------

_TYPE_HINTS = {
    "extra_forbidden": "unknown key; check the spelling against pv/schema/contract.schema.json",
    "missing": "add this key",
}


def schema_diagnostics(loaded: LoadedContract, error: ValidationError) -> list[Diagnostic]:
    out = []
    for err in error.errors():
        loc = tuple(err["loc"])
        kind = err["type"]
        if kind == "extra_forbidden":
            line, col = loaded.position(loc, key=True)
            known = _known_keys(loc[:-1])
            near = _near(str(loc[-1]), known)
            hint = f"did you mean {near!r}?" if near else _TYPE_HINTS[kind]
            out.append(_diag(loaded.display_path, line, col, "PV201", f"unknown key {_dotted(loc)}", hint))
        elif kind == "missing":
            line, col = loaded.position(loc[:-1])
            out.append(_diag(loaded.display_path, line, col, "PV202", f"missing required key {_dotted(loc)}",
                             _TYPE_HINTS[kind]))
        else:
            line, col = loaded.position(loc)
            code = "PV203" if kind.endswith("_type") or kind in ("model_type", "dict_type", "list_type") else "PV204"
            out.append(_diag(loaded.display_path, line, col, code, f"{_dotted(loc)}: {err['msg']}"))
    return out


def _dotted(loc: Loc) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _known_keys(loc: Loc) -> list[str]:
    """Field names allowed at `loc` in the schema (for 'did you mean')."""
    from pv import schema as s

    model: Any = s.Contract
    for part in loc:
        if isinstance(part, int):
            continue
        fld = model.model_fields.get(part) if hasattr(model, "model_fields") else None
        if fld is None:
            return []
        model = _inner_model(fld.annotation)
        if model is None:
            return []
    return list(model.model_fields) if hasattr(model, "model_fields") else []


def _inner_model(annotation: Any) -> Any:
    import typing

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _near(word: str, candidates: list[str]) -> str | None:
    import difflib

    match = difflib.get_close_matches(word, candidates, n=1, cutoff=0.7)
    return match[0] if match else None


def load_contract(path: Path, display: str | None = None) -> tuple[LoadedContract | None, list[Diagnostic]]:
    """YAML + schema. Returns the loaded file (contract None if the schema failed) and problems."""
    display = display or str(path)
    loaded, problems = read_yaml(path, display)
    if loaded is None:
        return None, problems
    if not isinstance(loaded.data, dict):
        kind = type(loaded.data).__name__
        problems.append(_diag(display, 1, 1, "PV107", f"top level is a {kind}, not a mapping",
                              "a contract starts with `metadata:`"))
        return loaded, problems
    try:
        loaded.contract = Contract.model_validate(loaded.data)
    except ValidationError as exc:
        problems.extend(schema_diagnostics(loaded, exc))
    return loaded, problems
