"""Reading a contract file as YAML: safe, bounded, with the position of every key and value.

Only YAML's safe subset is accepted (no python/* tags, nothing constructed from a tag).
The document is composed into nodes (libyaml's C composer when available) and built here by
hand, which lets pv
  - remember the line:col of every key and value, so schema errors point at the source;
  - bound alias expansion: the expanded size of the node graph is computed first (linear in
    the number of distinct nodes), so a "billion laughs" file is rejected before anything is
    expanded, and a recursive alias (`&a [*a]`) is rejected instead of looping;
  - bound nesting depth before the C composer sees the text (it recurses on the C stack);
  - report duplicate keys, which PyYAML would silently resolve to the last one.
Files are also capped in size, and binary, non-UTF-8 or empty files are rejected before parsing.
"""

from __future__ import annotations

import hashlib
import operator
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pv.diagnostics import Diagnostic, Severity
from pv.yamlbounds import (BOMB_HINT, C_COMPOSER_SAFE_DEPTH, MAX_DEPTH, MAX_NODES, TOO_DEEP_HINT, Budget, depth_bound,
                           expanded_size, nesting_depth, parser_nesting_limit)

MAX_BYTES = 1_000_000
SCHEMA_LINE_PREFIX = "# yaml-language-server: $schema="

Loc = tuple  # a path into the document: ("falsification_tests", 0, "prediction")

# libyaml's composer is ~15x faster than the pure-Python one; both give the same nodes.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_MERGE = "tag:yaml.org,2002:merge"
_BOOL = "tag:yaml.org,2002:bool"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_ISO_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
# YAML 1.2 spells booleans true/false only; PyYAML (YAML 1.1) also reads yes/no/on/off.
_PLAIN_BOOLEANS = frozenset({"true", "false", "True", "False", "TRUE", "FALSE"})


class _FastSafeLoader(_Loader):  # type: ignore[misc, valid-type]
    """The safe loader with tag resolution short-cut: a quoted scalar is text, a collection is
    a map or a seq, and a plain scalar's implicit tag (int, float, bool, null, timestamp...)
    depends only on its text, so it is memoised. The composer asks for every node; this is
    a quarter of the load time."""

    _memo: dict[str, str] = {}

    # The composer tells the resolver each node it enters and leaves, for path resolvers; the
    # safe loader has none (checked below), so those calls do nothing: here they are C builtins
    # that ignore their arguments instead of two Python calls per node.
    descend_resolver = staticmethod(operator.is_)  # (node, index) -> ignored
    ascend_resolver = staticmethod(tuple)  # () -> ignored

    def resolve(self, kind: Any, value: Any, implicit: Any, _scalar: Any = yaml.ScalarNode) -> str:
        if kind is _scalar:
            if not implicit[0]:
                return _STR
            memo = _FastSafeLoader._memo
            tag = memo.get(value)
            if tag is None:
                tag = super().resolve(kind, value, implicit)
                if len(value) < 64:
                    if len(memo) > 50_000:
                        memo.clear()
                    memo[value] = tag
            return tag
        return _MAP if kind is yaml.MappingNode else _SEQ


if _Loader.yaml_path_resolvers:  # pragma: no cover - PyYAML's safe loader declares none
    del _FastSafeLoader.descend_resolver, _FastSafeLoader.ascend_resolver


@dataclass
class LoadedContract:
    path: Path
    display_path: str
    text: str
    sha256: str  # of the file's bytes: generated tests record it to detect drift
    data: Any  # the plain YAML data
    contract: Contract | None  # None when the schema rejected it
    # The composed YAML nodes: positions are looked up in them only when a diagnostic needs one.
    node: Any = field(default=None, repr=False)
    # pv.loadcache.data_digest of `data`, where pv.loadcache had its encoding at hand (else None)
    data_sha256: str | None = field(default=None, repr=False)

    def __getattr__(self, name: str) -> Any:
        """`contract` of a file a worker process checked (pv.validation): it travels without its
        model (pickling and unpickling every model cost more than the few the parent asks for),
        and the schema accepted its data, so the model is that data validated again, built
        where it is first asked for. Only a missing attribute comes here."""
        summary = self.__dict__.get("_accepted")
        if name == "contract" and summary is not None:
            from pv.schema import Contract

            self.contract = Contract.model_validate(self.data)
            return self.contract
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def without_model(self) -> None:
        """Drop the validated model, keeping what a run counts of it (accepted(): its number of
        falsifiers and declared status); `contract` is built again from the data when asked."""
        contract = self.__dict__.get("contract")
        if contract is not None:
            self._accepted = (len(contract.falsification_tests), contract.metadata.status)
            del self.contract

    def accepted(self) -> tuple[int, Any] | None:
        """(number of falsifiers, declared status) where the schema accepted the file, else None;
        without building a model that without_model() dropped."""
        summary = self.__dict__.get("_accepted")
        if summary is not None and "contract" not in self.__dict__:
            return summary
        contract = self.contract
        return None if contract is None else (len(contract.falsification_tests), contract.metadata.status)

    # --- positions -------------------------------------------------------------------------

    def root(self) -> Any:
        """The composed YAML nodes, composed again from the text when they were dropped (a
        LoadedContract sent from a worker process travels without them)."""
        if self.node is None and self.text:
            try:
                node = yaml.compose(self.text, Loader=_FastSafeLoader)
                if node is not None:
                    _Builder(merges="<<" in self.text).build(node)  # flattens merge keys as before
                self.node = node
            except (yaml.YAMLError, Budget, ValueError, TypeError, RecursionError):
                pass
        return self.node

    def _locate(self, loc: Loc) -> list[tuple[Any, Any]]:
        """(value node, key node or None) for each prefix of `loc` that exists in the file."""
        found: list[tuple[Any, Any]] = []
        node = self.root()
        for part in loc:
            cls = node.__class__
            if cls is yaml.MappingNode:
                for key_node, value_node in reversed(node.value):  # the last duplicate wins
                    value = _key_value(key_node)
                    if value == part and isinstance(value, bool) == isinstance(part, bool):
                        found.append((value_node, key_node))
                        node = value_node
                        break
                else:
                    break
            elif cls is yaml.SequenceNode and isinstance(part, int) and 0 <= part < len(node.value):
                node = node.value[part]
                found.append((node, None))
            else:
                break
        return found

    def position(self, loc: Loc, key: bool = False) -> tuple[int, int]:
        """line, col (1-based) of the value at `loc`, or of its key; else the nearest parent
        (for a key: the nearest enclosing mapping key); (1, 1) when nothing matches."""
        if self.root() is None:
            return (1, 1)
        found = self._locate(tuple(loc))
        if key:
            for _, key_node in reversed(found):
                if key_node is not None:
                    return _pos(key_node)
            return (1, 1)
        return _pos(found[-1][0]) if found else (1, 1)

    @property
    def positions(self) -> dict[Loc, tuple[int, int]]:
        """Every value's position (computed on demand; prefer position())."""
        table: dict[Loc, tuple[int, int]] = {}
        self._walk(self.root(), (), table, None)
        return table

    @property
    def key_positions(self) -> dict[Loc, tuple[int, int]]:
        """Every mapping key's position (computed on demand; prefer position(key=True))."""
        table: dict[Loc, tuple[int, int]] = {}
        self._walk(self.root(), (), None, table)
        return table

    def _walk(self, node: Any, loc: Loc, values: dict | None, keys: dict | None, depth: int = 0) -> None:
        if node is None or depth > MAX_DEPTH:
            return
        if values is not None:
            values.setdefault(loc, _pos(node))
        if node.__class__ is yaml.MappingNode:
            for key_node, value_node in node.value:
                here = loc + (_key_value(key_node),)
                if keys is not None:
                    keys[here] = _pos(key_node)
                self._walk(value_node, here, values, keys, depth + 1)
        elif node.__class__ is yaml.SequenceNode:
            for i, item in enumerate(node.value):
                self._walk(item, loc + (i,), values, keys, depth + 1)

    def value_at(self, loc: Loc) -> Any:
        """The plain data at `loc`, or None when there is nothing there."""
        node = self.data
        for part in loc:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]
            else:
                return None
        return node

    def value_position(self, loc: Loc, index: int) -> tuple[int, int]:
        """line, col (1-based) in the file of character `index` (0-based) of the text value at
        `loc`. Exact for single-line plain scalars; found by search for quoted, folded and
        block scalars; the value's own position when it cannot be placed."""
        loc = tuple(loc)
        start_pos = self.position(loc)
        value = self.value_at(loc)
        found = self._locate(loc) if self.root() is not None else []
        if len(found) != len(loc) or not isinstance(value, str) or not 0 <= index < len(value):
            return start_pos
        scalar = found[-1][0] if found else self.node
        if scalar.__class__ is not yaml.ScalarNode:
            return start_pos
        start, end, style = scalar.start_mark.index, scalar.end_mark.index, scalar.style
        source = self.text[start:end]
        if style is None and "\n" not in source and source == value:
            return start_pos[0], start_pos[1] + index
        # Find the same fragment in the source: the word at `index`, as often as it occurs before.
        rest = value[index:]
        fragment = rest.split(None, 1)[0][:16] if rest.strip() and not rest[0].isspace() else rest[:1]
        nth = value.count(fragment, 0, index) if fragment else 0
        at = -1
        for _ in range(nth + 1):
            at = source.find(fragment, at + 1)
            if at < 0:
                return start_pos
        absolute = start + at
        line = self.text.count("\n", 0, absolute) + 1
        col = absolute - (self.text.rfind("\n", 0, absolute) + 1) + 1
        return line, col


def _pos(node: Any) -> tuple[int, int]:
    mark = node.start_mark
    return (mark.line + 1, mark.column + 1)


_SAFE = yaml.SafeLoader  # the pure-Python class: its constructor table serves both loaders
_KEY_CONSTRUCTOR = yaml.SafeLoader("")


def _key_value(node: Any) -> Any:
    """A mapping key as the builder stores it (text, number, boolean, else its str())."""
    if node.__class__ is yaml.ScalarNode:
        if node.tag == _STR:
            return node.value
        constructor = _SAFE.yaml_constructors.get(node.tag)
        if constructor is not None:
            try:
                key = constructor(_KEY_CONSTRUCTOR, node)
            except Exception:  # noqa: BLE001 - only used to find positions
                return node.value
            return key if isinstance(key, (str, int, float, bool)) and key is not None else str(key)
    return None


class _Builder:
    """Turns a composed node tree into plain data; notes duplicate keys."""

    def __init__(self, merges: bool = True) -> None:
        self.constructor = yaml.SafeLoader("")  # resolves scalar tags (int, float, bool, date...)
        self.constructors = _SAFE.yaml_constructors
        self.merges = merges  # False when the text has no "<<": no mapping needs flattening
        self.nodes = 0
        self.duplicates: list[tuple[Any, tuple[int, int]]] = []
        self.yaml11_booleans: list[tuple[str, tuple[int, int]]] = []  # yes/no/on/off read as booleans

    def build(self, node: yaml.Node, depth: int = 1) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:  # a backstop; expanded_size() rejects bombs before this
            raise Budget(f"YAML aliases expand to more than {MAX_NODES:,} nodes", BOMB_HINT)
        cls = node.__class__
        if cls is yaml.ScalarNode:
            tag = node.tag
            if tag == _STR:
                return node.value
            constructor = self.constructors.get(tag)
            if constructor is None:
                raise _tag_error(node)
            if tag == _BOOL and node.value not in _PLAIN_BOOLEANS:
                self.yaml11_booleans.append((node.value, _pos(node)))
            elif tag == _TIMESTAMP and not _ISO_DAY.fullmatch(node.value):
                # YAML 1.1 also reads 2026-1-5 and 2026-11-22 10:00 as dates/times; pv's only
                # dates are YYYY-MM-DD days, so anything else stays the text that was written
                # (and the schema says it is not a date).
                return node.value
            try:
                return constructor(self.constructor, node)
            except (ValueError, TypeError, KeyError, ArithmeticError) as exc:  # date: 2026-13-45, !!bool foo
                raise yaml.constructor.ConstructorError(
                    None, None, f"cannot read {node.value!r} as {tag.rsplit(':', 1)[-1]}: {exc}", node.start_mark
                ) from None
        if depth > MAX_DEPTH:
            raise Budget(f"YAML nests more than {MAX_DEPTH} levels deep",
                          TOO_DEEP_HINT, node.start_mark, "PV108")
        depth += 1
        if cls is yaml.MappingNode:
            if node.tag != _MAP:
                raise _tag_error(node)
            explicit = None
            if self.merges:
                # keys written in this mapping; merged-in keys (<<) may be overridden, not these
                explicit = {id(k) for k, _ in node.value if k.tag != _MERGE}
                self.constructor.flatten_mapping(node)  # merge keys (<<) per YAML 1.1
            written: set[Any] = set()
            result: dict[Any, Any] = {}
            build = self.build
            scalar = yaml.ScalarNode
            for key_node, value_node in node.value:
                # text keys and values (most of a contract) without a call each
                if key_node.__class__ is scalar and key_node.tag == _STR:
                    key = key_node.value
                    self.nodes += 1
                else:
                    key = build(key_node, depth)
                    if not isinstance(key, (str, int, float, bool)) or key is None:
                        key = str(key)
                if explicit is None or id(key_node) in explicit:
                    if key in written:
                        self.duplicates.append((key, _pos(key_node)))
                    written.add(key)
                if value_node.__class__ is scalar and value_node.tag == _STR:
                    result[key] = value_node.value
                    self.nodes += 1
                else:
                    result[key] = build(value_node, depth)
            return result
        if cls is yaml.SequenceNode:
            if node.tag != _SEQ:
                raise _tag_error(node)
            build = self.build
            scalar = yaml.ScalarNode
            self.nodes += len(node.value)
            return [item.value if item.__class__ is scalar and item.tag == _STR else build(item, depth)
                    for item in node.value]
        raise yaml.constructor.ConstructorError(None, None, f"unexpected node {cls.__name__}", node.start_mark)


def _tag_error(node: yaml.Node) -> yaml.constructor.ConstructorError:
    return yaml.constructor.ConstructorError(
        None, None, f"could not determine a constructor for the tag {node.tag!r}", node.start_mark
    )


def diag(path: str, line: int, col: int, code: str, message: str, hint: str = "") -> Diagnostic:
    return Diagnostic(path=path, line=line, col=col, code=code, message=message, hint=hint)


def _read_regular(path: Path) -> bytes | None:
    """The file's bytes, at most MAX_BYTES + 1 of them (enough to tell it is over the cap), or
    None when it is not a regular file. A FIFO would block the read forever and /dev/zero never
    end, so the kind is checked on the opened descriptor (no race with a rename) before reading;
    O_NONBLOCK keeps the open itself from waiting for a FIFO's writer. Read until the end or the
    cap, the first read sized by the file's size (a read of the cap's size allocated a megabyte
    for every few-kilobyte contract)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        left = MAX_BYTES + 1
        parts = []
        size = st.st_size + 1  # the whole file and its end in one read, unless it grows meanwhile
        while left > 0:
            chunk = os.read(fd, min(size, left))
            if not chunk:
                break
            parts.append(chunk)
            left -= len(chunk)
            size = 1 << 16
        return parts[0] if len(parts) == 1 else b"".join(parts)
    finally:
        os.close(fd)


def _size(path: Path, read: int) -> int:
    try:
        return max(path.stat().st_size, read)
    except OSError:
        return read


def read_yaml(path: Path, display: str) -> tuple[LoadedContract | None, list[Diagnostic]]:
    """Read and parse one file into plain data with positions (no schema yet)."""
    try:
        raw = _read_regular(path)
    except OSError as exc:
        return None, [diag(display, 0, 0, "PV100", f"cannot read file: {exc.strerror or exc}")]
    if raw is None:
        return None, [diag(display, 0, 0, "PV100", "not a regular file (a FIFO, socket or device): reading it "
                           "could block forever or never end", "name the contract file itself")]
    if len(raw) > MAX_BYTES:
        return None, [
            diag(display, 0, 0, "PV104", f"file is {_size(path, len(raw)):,} bytes, over the {MAX_BYTES:,}-byte cap",
                  "a contract is a few kilobytes; split it or check you named the right file")
        ]
    nul = raw.find(b"\x00", 0, 8192)
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        return None, [diag(display, line, 0, "PV105", "binary file (NUL bytes), not YAML text",
                            "contracts are UTF-8 YAML text")]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        return None, [diag(display, line, 0, "PV105", "not UTF-8 text", "save the file as UTF-8")]
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()):
        return None, [diag(display, 0, 0, "PV106", "empty file: no YAML document",
                            "start from an existing contract in contracts/")]
    try:
        if depth_bound(text) > C_COMPOSER_SAFE_DEPTH:
            depth, mark = nesting_depth(text)
            if mark is not None:
                return None, [diag(display, mark.line + 1, mark.column + 1, "PV108",
                                    f"YAML nests more than {MAX_DEPTH} levels deep",
                                    TOO_DEEP_HINT)]
        node = yaml.compose(text, Loader=_FastSafeLoader)
    except yaml.YAMLError as exc:
        if parser_nesting_limit(exc):
            return None, [_yaml_diag(display, exc, "PV108", TOO_DEEP_HINT)]
        return None, [_yaml_diag(display, exc, "PV101")]
    except RecursionError:  # the pure-Python composer, when libyaml is missing
        return None, [diag(display, 1, 1, "PV108", "YAML nests too deeply")]
    if node is None:
        return None, [diag(display, 0, 0, "PV106", "empty file: no YAML document",
                            "start from an existing contract in contracts/")]
    builder = _Builder(merges="<<" in text)
    try:
        if "&" in text and "*" in text:  # no alias without an anchor: nothing can expand
            expanded_size(node)
        data = builder.build(node)
    except Budget as exc:
        line, col = (exc.mark.line + 1, exc.mark.column + 1) if exc.mark is not None else (1, 1)
        return None, [diag(display, line, col, exc.code, exc.message, exc.hint)]
    except yaml.constructor.ConstructorError as exc:
        code = "PV102" if exc.problem and "constructor for the tag" in exc.problem else "PV101"
        hint = ("pv loads YAML safely: python/* and other custom tags are never constructed" if code == "PV102"
                else "quote the value if it is meant as text" if exc.problem and exc.problem.startswith("cannot read")
                else "")
        return None, [_yaml_diag(display, exc, code, hint)]
    except yaml.YAMLError as exc:
        return None, [_yaml_diag(display, exc, "PV101")]
    except (ValueError, TypeError, OverflowError) as exc:
        return None, [diag(display, 1, 1, "PV101", f"cannot build YAML value: {exc}")]
    except RecursionError:
        return None, [diag(display, 1, 1, "PV108", "YAML nests too deeply")]
    loaded = LoadedContract(
        path=path, display_path=display, text=text, sha256=hashlib.sha256(raw).hexdigest(),
        data=data, contract=None, node=node,
    )
    problems = [
        diag(display, line, col, "PV205", f"duplicate key {key!r} (YAML would keep only the last one)",
              "remove or rename one of them")
        for key, (line, col) in builder.duplicates
    ]
    problems += [_yaml11_boolean(display, word, line, col) for word, (line, col) in builder.yaml11_booleans]
    return loaded, problems


def _yaml11_boolean(display: str, word: str, line: int, col: int) -> Diagnostic:
    """PV209: `yes`/`no`/`on`/`off` silently became a boolean (YAML 1.1); say which, and how to
    write what was meant."""
    meant = "true" if word.lower() in ("yes", "on") else "false"
    return Diagnostic(path=display, line=line, col=col, code="PV209", severity=Severity.WARNING,
                      message=f"{word!r} is read as the boolean {meant} (a YAML 1.1 spelling); "
                              "YAML 1.2 and most other tools read it as text",
                      hint=f"write {meant} for a boolean, or quote it (\"{word}\") for text")


def _yaml_diag(display: str, exc: yaml.YAMLError, code: str, hint: str = "") -> Diagnostic:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
    parts = (getattr(exc, "context", None), getattr(exc, "problem", None))
    message = " ".join(p for p in parts if p) or str(exc)
    if not hint and ("\\t" in message or "\t" in message or "tab character" in message):
        hint = "YAML indents with spaces, never tabs"
    return diag(display, line, col, code, f"YAML: {message}", hint)
