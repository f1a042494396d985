"""Code units: the functions of a module, and its module-level code, each with its own digest.

Evidence is bound to the units a check executed (pv.execution collects which), not to whole
modules, so adding an unused function, a comment, or editing a function no check ran stales
nothing, while an edit to one executed function stales exactly the records that ran it.

A module's units, read with `ast` (never imported):

* one per function or method, named by its `__qualname__` (`rms_norm`, `Trainer.step`,
  `outer.<locals>.inner`); its digest is the syntax tree of the whole `def` (decorators,
  defaults, body and nested functions) without docstrings and positions, so moving it or
  editing its docstring changes nothing. Two defs of one qualname (in `if`/`else` branches)
  are one unit;
* `<module>`: everything else — imports, constants, class bodies, the statements that run at
  import — with every function definition removed, so adding or removing a function elsewhere
  in the module leaves it unchanged.

An executed line belongs to the innermost function whose body holds it, else to `<module>`.
Source that does not parse is one `<module>` unit digested as bytes.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from pv.codebind import DIGEST_CHARS

MODULE_UNIT = "<module>"
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class ModuleUnits:
    """The units of one module's source: qualname -> digest, and where each function's body is."""

    digests: dict[str, str]
    # (first body line, last line, qualname) of every function, in source order
    spans: tuple[tuple[int, int, str], ...] = field(default=())
    # the module's import statements, anywhere in it: (level, module or "", names); a plain
    # `import a.b` is (-1, "", ("a.b",))
    imports: tuple[tuple[int, str, tuple[str, ...]], ...] = field(default=(), compare=False)

    @functools.cached_property
    def _unit_by_line(self) -> list[str]:
        # spans are sorted by first line: a later (inner) span overwrites the one around it
        by_line = [MODULE_UNIT] * (max((end for _, end, _ in self.spans), default=0) + 1)
        for start, end, qualname in self.spans:
            by_line[start:end + 1] = [qualname] * (end + 1 - start)
        return by_line

    def unit_of_line(self, line: int) -> str:
        """The innermost function whose body holds `line`, else the module-level unit."""
        by_line = self._unit_by_line
        return by_line[line] if 0 <= line < len(by_line) else MODULE_UNIT

    def units_of_lines(self, lines: Iterable[int]) -> set[str]:
        return {self.unit_of_line(line) for line in lines}

    def digest(self, qualname: str) -> str | None:
        """The digest of unit `qualname`; None when the module has no such unit."""
        return self.digests.get(qualname)

    def known(self) -> Mapping[str, str]:
        """The digests `digest` answers from (UnitDigests computes its own as asked)."""
        return self.digests


def _digest_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


# The fields that hold statements (directly, or through except handlers and match cases): no
# other field of any node holds one, so a walk for function definitions reads only these.
_STATEMENT_LISTS = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})
_LISTS_OF: dict[type, tuple[str, ...]] = {}  # node class -> its fields among those, in field order


def named_functions(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """(qualname, def node) of every function, iteratively (no recursion limit). Only the
    statement lists are walked (walking every child node was a fifth of digesting a module);
    the nodes left out hold no statement, so the definitions and their order are the same."""
    found: list[tuple[str, ast.AST]] = []
    todo: list[tuple[str, ast.AST]] = [("", tree)]
    while todo:
        prefix, node = todo.pop()
        for name in _lists_of(node.__class__):
            children = getattr(node, name, None)
            if children.__class__ is not list:  # (IfExp and Lambda have an expression `body`; never walked)
                continue
            for child in children:
                if isinstance(child, _DEFS):
                    qualname = prefix + child.name
                    found.append((qualname, child))
                    todo.append((qualname + ".<locals>.", child))
                elif isinstance(child, ast.ClassDef):
                    todo.append((prefix + child.name + ".", child))
                elif isinstance(child, ast.AST) and not isinstance(child, ast.expr) and _lists_of(child.__class__):
                    todo.append((prefix, child))  # if/try/with blocks keep the enclosing prefix
    return found


def _lists_of(cls: type) -> tuple[str, ...]:
    """The statement lists among the fields of a node class, in field order (none: a simple
    statement such as an assignment, which no walk for definitions needs to enter)."""
    names = _LISTS_OF.get(cls)
    if names is None:
        names = _LISTS_OF[cls] = tuple(n for n in cls._fields if n in _STATEMENT_LISTS)  # type: ignore[attr-defined]
    return names


_HAS_DOCSTRING = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_PASS = ast.Pass()


def _is_docstring(node: ast.AST) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str))


def _canonical_unit(tree: ast.AST, *, drop_functions: bool) -> str:
    """pv.codebind's canonical text of the tree with docstrings stripped and, with
    `drop_functions`, every function definition outside a function removed (an emptied body
    becomes `pass`, so the text is that of a valid tree). Written out rather than computed on
    a deep copy (`_strip_docstrings` and a pruned copy give the same text): a copy of every
    function was most of what binding a record cost. pv.astcanon writes it (recursion, twice
    as fast: a cold `pv validate` digests every unit its evidence executed); the walk below is
    the definition, and the fallback for a tree too deep to recurse."""
    from pv.astcanon import canonical_text

    return canonical_text(tree, lambda: _canonical_unit_walk(tree, drop_functions=drop_functions),
                          drop_functions=drop_functions, strip_docstrings=True)


def _canonical_unit_walk(tree: ast.AST, *, drop_functions: bool) -> str:
    """_canonical_unit with an explicit stack: no nesting depth can exhaust it."""
    out: list[str] = []
    stack: list[tuple[bool, object]] = [(False, tree)]
    while stack:
        mark, item = stack.pop()
        if mark:
            out.append(item)  # type: ignore[arg-type]
        elif isinstance(item, ast.AST):
            todo: list[tuple[bool, object]] = [(True, type(item).__name__ + "(")]
            for name, value in ast.iter_fields(item):
                if isinstance(value, list):
                    if drop_functions and any(isinstance(v, _DEFS) for v in value):
                        value = [v for v in value if not isinstance(v, _DEFS)]
                        if not value and name == "body":
                            value = [_PASS]
                    if name == "body" and value and isinstance(item, _HAS_DOCSTRING) and _is_docstring(value[0]):
                        value = value[1:] or [_PASS]
                if value is None or value == []:
                    continue  # as pv.codebind._canonical: absent or empty fields are left out
                todo.append((True, name + "="))
                if isinstance(value, list):
                    todo += [(True, "["), *((False, v) for v in value), (True, "]")]
                else:
                    todo.append((False, value))
            todo.append((True, ")"))
            stack.extend(reversed(todo))
        else:
            out.append(repr(item) + ",")
    return "".join(out)


def parse_units(data: bytes) -> ModuleUnits:
    """The units of a module's source bytes."""
    from pv import sourcetrees

    try:  # the tree pv.staticcheck parsed from these bytes, if it did (only read here)
        tree = sourcetrees.shared(data) or ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ModuleUnits({MODULE_UNIT: "raw-" + hashlib.sha256(data).hexdigest()[: DIGEST_CHARS - 4]})
    return _units_of_tree(tree)


def _def_digest(texts: list[str]) -> str:
    """A function unit's digest: the canonical texts of every definition of its qualname."""
    return _digest_text("def:" + "|".join(texts))


def _module_digest(tree: ast.Module) -> str:
    """The module-level unit's digest: the module without the functions outside functions."""
    return _digest_text("mod:" + _canonical_unit(tree, drop_functions=True))


def _units_of_tree(tree: ast.Module) -> ModuleUnits:
    spans = []
    texts: dict[str, list[str]] = {}
    for qualname, node in named_functions(tree):
        body = node.body  # type: ignore[attr-defined]
        spans.append((body[0].lineno, node.end_lineno or body[-1].lineno, qualname))
        texts.setdefault(qualname, []).append(_canonical_unit(node, drop_functions=False))
    digests = {q: _def_digest(parts) for q, parts in texts.items()}
    digests[MODULE_UNIT] = _module_digest(tree)
    spans.sort()
    return ModuleUnits(digests, tuple(spans), _import_statements(tree))


def statements(tree: ast.Module) -> Iterator[ast.AST]:
    """ast.walk without the expressions: the same nodes in the same order, but for those that
    cannot hold a statement (walking every expression was most of reading a module's imports,
    and of scanning a mutants package for its declarations: pv.mutation)."""
    todo = deque([tree])
    while todo:
        node = todo.popleft()
        todo.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.expr))
        yield node


def _import_statements(tree: ast.Module) -> tuple[tuple[int, str, tuple[str, ...]], ...]:
    found = []
    for node in statements(tree):
        if isinstance(node, ast.Import):
            found += [(-1, "", (alias.name,)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or "", tuple(alias.name for alias in node.names)))
    return tuple(found)


@functools.lru_cache(maxsize=2048)
def units_of_source(data: bytes) -> ModuleUnits:
    """parse_units, once per distinct source (a session binds many records to the same files)."""
    return parse_units(data)


def stored_units(data: bytes, store: "object | None") -> ModuleUnits:
    """units_of_source, also remembered across sessions in `store` (a pv.cache.Cache keyed by
    the source's sha256): parsing and digesting every bound module again was most of what
    binding cost a fresh pytest process. An entry that does not read back whole is a miss."""
    if store is None:
        return units_of_source(data)
    from pv.cache import key_of

    key = key_of(data)
    if key in _DECODED:
        return _DECODED[key]
    found = store.get(key)  # type: ignore[attr-defined]
    if isinstance(found, dict):
        try:
            return _decoded(key, _from_json(found))
        except (KeyError, TypeError, ValueError):
            pass
    units = units_of_source(data)
    store.put(key, _to_json(units))  # type: ignore[attr-defined]
    return units


# Units read back from a store, by the sha256 of their source, for the process: a first `pv
# validate` judges each contract's evidence with its own tree, and decoding the same entries
# for each tree (800 decodes of 86 entries) cost more than the digests they spare.
_DECODED: dict[str, ModuleUnits] = {}


def _decoded(key: str, units: ModuleUnits) -> ModuleUnits:
    if len(_DECODED) >= 4096:
        _DECODED.clear()
    _DECODED[key] = units
    return units


def _to_json(units: ModuleUnits) -> dict:
    return {"digests": units.digests, "spans": [list(s) for s in units.spans],
            "imports": [[level, module, list(names)] for level, module, names in units.imports]}


def _from_json(data: dict) -> ModuleUnits:
    digests = data["digests"]
    if not isinstance(digests, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in digests.items()):
        raise ValueError("digests")
    spans = tuple((int(a), int(b), str(q)) for a, b, q in data["spans"])
    imports = tuple((int(level), str(module), tuple(str(n) for n in names)) for level, module, names in data["imports"])
    return ModuleUnits(dict(digests), spans, imports)


class UnitDigests:
    """The digests of one module's units, each computed when first asked: all that judging a
    record needs (UnitTree), without the spans and import statements ModuleUnits holds for
    binding. Where nothing is remembered across runs, a cold `pv validate` digested every unit
    of every module its evidence executed, those no deciding record names too. The digests are
    parse_units' (the same texts of the same nodes), so `digest(q)` is `parse_units(data)
    .digests.get(q)`."""

    def __init__(self, data: bytes):
        from pv import sourcetrees

        self._digests: dict[str, str | None] = {}
        try:  # the tree pv.staticcheck parsed from these bytes, if it did (only read here)
            self._tree: ast.Module | None = sourcetrees.shared(data) or ast.parse(data)
            sourcetrees.share(data, self._tree)  # while this holds it: pv.codebind digests whole modules too
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            self._tree = None
            self._digests[MODULE_UNIT] = raw_units(data).digests[MODULE_UNIT]
            return
        self._defs: dict[str, list[ast.AST]] = {}
        for qualname, node in named_functions(self._tree):
            self._defs.setdefault(qualname, []).append(node)

    def known(self) -> Mapping[str, str | None]:
        """The digests computed so far: `digest(q)` for every q it holds."""
        return self._digests

    def digest(self, qualname: str) -> str | None:
        if qualname not in self._digests:
            if self._tree is None:
                self._digests[qualname] = None
            elif qualname == MODULE_UNIT:
                self._digests[qualname] = _module_digest(self._tree)
            elif qualname in self._defs:
                self._digests[qualname] = _def_digest([_canonical_unit(node, drop_functions=False)
                                                       for node in self._defs[qualname]])
            else:
                self._digests[qualname] = None
        return self._digests[qualname]


def raw_units(data: bytes) -> ModuleUnits:
    """A file that is not Python source (an extension module, bytecode): one unit, its bytes."""
    return ModuleUnits({MODULE_UNIT: "raw-" + hashlib.sha256(data).hexdigest()[: DIGEST_CHARS - 4]})


# Answers remembered for the rest of a recorded run with the path kinds they asked
# (pv.readlog.asked), replayed into every recording that uses them: a first `pv validate` judges
# each contract's evidence with its own tree, so that what it reads is that contract's input, and
# resolved the same modules once per contract (800 resolutions, a tenth of the run, where one
# tree does 87) and found the same real paths as often. Forgotten when a run begins
# (pv.readlog._forget_unseen_probes). With nothing recorded each tree asks (a tree remembers its own).
_RESOLVED: dict[tuple[Path, tuple[Path, ...], str, str | None], tuple[Path | None, list]] = {}
_REAL_PATHS: dict[Path, tuple[str, list]] = {}


def _remembered_in_run(memory: dict, key: Any, answer: Callable[[], Any]) -> Any:
    """answer(), remembered in `memory` under `key` while a run is recorded, with what it asked."""
    from pv import readlog

    if not readlog.active():
        return answer()
    if key in memory:
        found, noted = memory[key]
        readlog.note_asked(noted)
        return found
    found, noted = readlog.asked(answer)
    memory[key] = (found, noted)
    return found


def _resolved(root: Path, search: tuple[Path, ...], module: str, origin: str | None) -> Path | None:
    from pv.importbind import entry_of, resolve

    def find() -> Path | None:
        if origin:
            then = Path(origin) if Path(origin).is_absolute() else root / origin
            return resolve(module, [entry_of(module, then)])
        return resolve(module, search)

    return _remembered_in_run(_RESOLVED, (root, search, module, origin), find)


def _real_path(path: Path) -> str:
    return _remembered_in_run(_REAL_PATHS, path, lambda: os.path.realpath(path))


class UnitTree:
    """The working tree's units, for `pv status` (read, never imported; cached per file).

    One tree answers for every record of a run, and hundreds of records name the same few
    dozen modules: each file's kind, real path and units are found once per tree. `store`
    (a pv.cache.Cache) also remembers the units across runs by the file's bytes."""

    def __init__(self, workspace_root: Path, search: Iterable[Path] = (), store: object | None = None):
        self.root = Path(os.path.realpath(workspace_root))
        self.search = [self.root, *search]
        self.store = store
        self._files: dict[tuple[str, str | None], Path | None] = {}
        self._is_file: dict[Path, bool] = {}
        self._shown_as: dict[Path, str] = {}
        self._units_now: dict[Path, ModuleUnits | UnitDigests] = {}
        self._now_of: dict[tuple[str, str | None], ModuleUnits | UnitDigests | str] = {}

    def file_of(self, module: str, origin: str | None) -> Path | None:
        """What `module` loads now from the path entry it loaded from then (a module that is
        gone from there is gone, even if a copy elsewhere would import)."""
        key = (module, origin)
        if key not in self._files:
            self._files[key] = _resolved(self.root, tuple(self.search), module, origin)
        return self._files[key]

    def _shown(self, path: Path) -> str:
        if path not in self._shown_as:
            real = Path(_real_path(path))
            try:
                self._shown_as[path] = real.relative_to(self.root).as_posix()
            except ValueError:
                self._shown_as[path] = str(real)
        return self._shown_as[path]

    def _exists(self, path: Path) -> bool:
        if path not in self._is_file:
            self._is_file[path] = path.is_file()
        return self._is_file[path]

    def _units(self, path: Path) -> ModuleUnits | UnitDigests:
        if path not in self._units_now:
            from pv.importbind import is_source

            data = path.read_bytes()
            if not is_source(path):
                self._units_now[path] = raw_units(data)
            elif self.store is not None and getattr(self.store, "active", True):
                self._units_now[path] = stored_units(data, self.store)  # whole, to be remembered
            else:  # nothing is remembered (PV_NO_CACHE=1): only the units a record names are digested
                self._units_now[path] = UnitDigests(data)
        return self._units_now[path]

    def _now(self, module: str, origin: str | None) -> ModuleUnits | UnitDigests | str:
        """The units `module` has now where it loads from, or why it has none there (removed,
        or loaded from elsewhere). Hundreds of records name each (module, origin): decided once."""
        key = (module, origin)
        if key not in self._now_of:
            path = self.file_of(module, origin)
            if path is None or not self._exists(path):
                self._now_of[key] = f"{module} (removed)"
            elif origin is not None and self._shown(path) != origin:
                self._now_of[key] = f"{module} (now loads from {self._shown(path)})"
            else:
                self._now_of[key] = self._units(path)
        return self._now_of[key]

    def changes(self, executed: Mapping[str, Mapping[str, str]], origins: Mapping[str, str],
                problems: Iterable[str]) -> list[str]:
        """Why a record's executed units are not the tree's: [] when every one is unchanged."""
        reasons = [f"binding: {p}" for p in problems]
        if not executed:
            reasons.append("records no executed code")
        for module, units in sorted(executed.items()):
            now = self._now(module, origins.get(module))
            if isinstance(now, str):
                reasons.append(now)
                continue
            if units.items() <= now.known().items():
                continue  # the common case, at C speed: every unit's digest computed already and equal
            if all(now.digest(qualname) == digest for qualname, digest in units.items()):
                continue  # told without naming each unit
            for qualname, digest in sorted(units.items()):
                current = now.digest(qualname)
                label = f"{module} (module-level code)" if qualname == MODULE_UNIT else f"{module}:{qualname}"
                if current is None:
                    reasons.append(f"{label} (removed)")
                elif current != digest:
                    reasons.append(label)
        return reasons
