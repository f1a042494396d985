"""Binding evidence to the code it exercised: syntax-tree digests of Python modules.

A record made before pv bound evidence to units (pv.execution; a timing check's, pv.untracedbind)
carries `code_digests`, as does one whose check never ran (the plugin binds it to what its test
module imports): for every module of the bound packages that the check imported, plus the
check's own module, a digest of the module's syntax tree. `pv status`
recomputes the digests from the working tree and treats a record whose digests differ as
STALE. Nothing here imports the modules it digests (only `ast`), so `pv status` and
`pv validate` stay free of torch.

Granularity (docs/status.md, "What the dashboard can and cannot claim"):

* per module. The digest is of the syntax tree with docstrings removed, so comments,
  docstrings, blank lines and formatting change nothing; any other edit changes the digest.
* which modules: the static import closure of the check's module inside the bound packages
  (`[tool.pv] check_packages` + `code_packages`): every module it imports, at any depth,
  including the `__init__` of each package on the way (Python runs those too). Under a planted
  bug, the module defining that mutant and its closure are added. Modules of those packages
  first imported while the check ran (imports by name at run time) are added as well. A module
  outside that set can change freely without staling the record.

The digest is a canonical walk of the tree (iterative: no recursion limit) that omits empty
fields, so Python versions that add new, empty AST fields (3.12's `type_params`) agree.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

DIGEST_CHARS = 24  # 96 bits of sha256: a second preimage is out of reach
# Names the digest computation for pv.cache: change it whenever _strip_docstrings/_canonical change.
DIGEST_ALGORITHM = "ast-canonical-1"
BEFORE_BINDING = "recorded before code binding"


def _strip_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]


_MARK = object()  # tags punctuation on the work stack, so no source string can pose as one


def _canonical(tree: ast.AST) -> str:
    """A deterministic text of the tree: node types and non-empty fields, no positions. Written
    out by pv.astcanon (recursion, twice as fast); this walk is the definition, and the fallback
    for a tree too deep to recurse."""
    from pv.astcanon import canonical_text

    return canonical_text(tree, lambda: _canonical_walk(tree))


def _canonical_walk(tree: ast.AST) -> str:
    """_canonical with an explicit stack: no nesting depth can exhaust it."""
    out: list[str] = []
    stack: list[tuple[object, object]] = [(None, tree)]
    while stack:
        tag, item = stack.pop()
        if tag is _MARK:
            out.append(str(item))
        elif isinstance(item, ast.AST):
            todo: list[tuple[object, object]] = [(_MARK, type(item).__name__ + "(")]
            for name, value in ast.iter_fields(item):
                if value is None or value == []:
                    continue  # absent or empty: the same tree whatever fields this Python has
                todo.append((_MARK, name + "="))
                if isinstance(value, list):
                    todo += [(_MARK, "["), *((None, v) for v in value), (_MARK, "]")]
                else:
                    todo.append((None, value))
            todo.append((_MARK, ")"))
            stack.extend(reversed(todo))
        else:
            out.append(repr(item) + ",")
    return "".join(out)


def digest_source(data: bytes) -> str:
    """The digest of one module's source. Unparseable source (a syntax error, nesting too deep
    for the parser) is digested as bytes, so it still binds — any edit makes it differ.

    The text is _canonical of the tree after _strip_docstrings, written by pv.astcanon with the
    docstrings left out as it goes (the same text: tests/test_codebind.py compares them), so the
    tree is only read: it may be one another reader parsed from these bytes (pv.sourcetrees),
    and is offered to the readers that follow (pv.codeunits digests the same modules' units)."""
    from pv import sourcetrees
    from pv.astcanon import canonical_text

    try:
        tree = sourcetrees.shared(data) or ast.parse(data)
        sourcetrees.share(data, tree)
        text = "ast:" + canonical_text(tree, lambda: _stripped_walk(data), strip_docstrings=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "raw-" + hashlib.sha256(data).hexdigest()[: DIGEST_CHARS - 4]
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


def _stripped_walk(data: bytes) -> str:
    """The definition of digest_source's text, for a tree too deep to recurse: its own parse,
    docstrings removed in place, written by the stack walk."""
    tree = ast.parse(data)
    _strip_docstrings(tree)
    return _canonical_walk(tree)


def _read(path: Path) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


def digest_file(path: Path) -> str | None:
    data = _read(path)
    return None if data is None else _digest_cached(data)


# A pytest session binds every falsifier test to mostly the same modules: parse each distinct
# source once (keyed by its bytes, so an edit is never missed), not once per test.
@functools.lru_cache(maxsize=4096)
def _digest_cached(data: bytes) -> str:
    return digest_source(data)


def module_file(name: str, roots: Iterable[Path]) -> Path | None:
    """The source file of a dotted module under the first root that has it, without importing:
    `a/b/c.py` or `a/b/c/__init__.py`."""
    parts = name.split(".")
    for root in roots:
        base = Path(root).joinpath(*parts)
        for candidate in (base / "__init__.py", base.with_suffix(".py")):  # the path finder's order
            if candidate.is_file():
                return candidate
    return _installed_file(parts)


def _installed_file(parts: list[str]) -> Path | None:
    """A module of a package that no search root holds as a folder: an editable install
    (`pip install -e`) is found by its import hook, not on sys.path. Asking for the top-level
    package's spec runs that hook without importing the package."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        base = Path(location).joinpath(*parts[1:])
        for candidate in ((base / "__init__.py", base.with_suffix(".py")) if parts[1:] else (base / "__init__.py",)):
            if candidate.is_file():
                return candidate
    return None


def search_roots(workspace_root: Path) -> list[Path]:
    """Where modules are looked for: the workspace root first (what `pv run` puts on the path),
    then this interpreter's path."""
    roots = [Path(workspace_root)]
    roots += [Path(p) for p in sys.path if p and Path(p).is_dir() and Path(p) != Path(workspace_root)]
    return roots


def in_packages(name: str, packages: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def module_imports(name: str, path: Path, roots: list[Path]) -> set[str]:
    """Every module a module's import statements can load (anywhere in it, functions too)."""
    data = _read(path)
    return set() if data is None else set(_imports_cached(name, path.name == "__init__.py", data, tuple(roots)))


@functools.lru_cache(maxsize=4096)
def _imports_cached(name: str, is_package: bool, data: bytes, roots: tuple[Path, ...]) -> frozenset[str]:
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".") if package else []
                if node.level - 1 > len(base_parts):
                    continue
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if not base:
                continue
            found.add(base)
            for alias in node.names:  # `from pkg import submodule`
                if alias.name != "*" and module_file(f"{base}.{alias.name}", roots) is not None:
                    found.add(f"{base}.{alias.name}")
    with_parents = set()
    for module in found:
        parts = module.split(".")
        with_parents.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(with_parents)


def closure(start: Iterable[str], packages: Iterable[str], roots: list[Path]) -> set[str]:
    """The modules of `packages` reachable from `start` through import statements (and the
    `start` modules themselves, wherever they live)."""
    packages = tuple(packages)
    seen: set[str] = set()
    todo = list(start)
    first = set(todo)
    while todo:
        name = todo.pop()
        if name in seen or not (name in first or in_packages(name, packages)):
            continue
        seen.add(name)
        path = module_file(name, roots)
        if path is None:
            continue
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parent packages run first
        todo += sorted(module_imports(name, path, roots))
    return {n for n in seen if n in first or in_packages(n, packages)}


def bind(start: Iterable[str], packages: Iterable[str], roots: list[Path],
         loaded: Mapping[str, object] | None = None, also: Iterable[str] = ()) -> dict[str, str]:
    """module -> digest for the closure of `start` plus `also`. A loaded module is digested
    from the file it was loaded from (the code that ran); others from `roots`."""
    loaded = sys.modules if loaded is None else loaded
    names = closure(start, packages, roots) | set(also)
    out = {}
    for name in sorted(names):
        module_path = getattr(loaded.get(name), "__file__", None)
        path = Path(module_path) if module_path and str(module_path).endswith(".py") else module_file(name, roots)
        digest = None if path is None else digest_file(path)
        if digest is not None:
            out[name] = digest
    return out


_STORES: dict[tuple[str, str], Any] = {}


def _shared_store(root: Path, name: str) -> Any:
    """The pv.cache `name` ("code-digests", "code-units") under `root`, one per process: PV501
    makes a tree per contract, and loading and saving each whole file for each tree was a tenth
    of a first run. (A cache is no input of a recorded run, pv.replay skips its directory, and a
    tree still reads every module it digests: sharing the store hides nothing.)"""
    key = (os.path.abspath(root), name)
    if key not in _STORES:
        from pv.cache import Cache, pv_source_digest

        _STORES[key] = Cache(root, name, DIGEST_ALGORITHM if name == "code-digests" else pv_source_digest)
    return _STORES[key]


class TreeDigests:
    """The working tree's digests, computed on demand and cached (one `pv status` run).

    With `persist=True` a digest is also kept in pv.cache under the sha256 of the module's
    bytes, so the next run reads a file and hashes it instead of parsing and walking its tree
    (the bulk of `pv validate`'s time on a repository of bound evidence); `save()` writes it."""

    def __init__(self, workspace_root: Path, persist: bool = False):
        self.roots = search_roots(workspace_root)
        self._cache: dict[str, str | None] = {}
        self._units: object = None
        self._store = None
        self._unit_store = None
        self._root = workspace_root
        self._session: dict[str, str | None] = {}  # path -> digest now (pv.sessionbind)
        if persist:
            self._store = _shared_store(workspace_root, "code-digests")

    def _digest_path(self, path: Path) -> str | None:
        data = _read(path)
        if data is None:
            return None
        if self._store is None:
            return _digest_cached(data)
        from pv.cache import key_of

        key = key_of(data)
        found = self._store.get(key)
        if isinstance(found, str):
            return found
        digest = _digest_cached(data)
        self._store.put(key, digest)
        return digest

    def digest(self, module: str) -> str | None:
        if module not in self._cache:
            path = module_file(module, self.roots)
            self._cache[module] = None if path is None else self._digest_path(path)
        return self._cache[module]

    def save(self) -> None:
        if self._store is not None:
            self._store.save()
        if self._unit_store is not None:
            self._unit_store.save()

    def record_changes(self, record: object) -> tuple[str, ...]:
        """Why a record's code is not the tree's. A record that carries the units it executed
        (pv.execution) is judged by those; an older one by its module digests. The workspace's
        other code its session loaded (a conftest.py, a parent package's __init__: pv.sessionbind)
        is judged by its digests too."""
        session = getattr(record, "session_code", None)
        loaded = () if not session else self._session_changes(session)
        return self._code_changes(record) + loaded

    def _session_changes(self, recorded: Mapping[str, str]) -> tuple[str, ...]:
        return session_changes(self._root, recorded, self._session)

    def _code_changes(self, record: object) -> tuple[str, ...]:
        executed = getattr(record, "executed_code", None)
        if executed is None:  # module binding: older records (timing checks' too), checks that never ran
            problems = tuple(f"binding: {p}" for p in getattr(record, "binding_problems", None) or ())
            return problems + self.changes(getattr(record, "code_digests", None))
        if self._units is None:
            from pv.codeunits import UnitTree

            if self._store is not None:  # units are remembered beside the digests (the same key: the bytes)
                self._unit_store = _shared_store(self._root, "code-units")
            self._units = UnitTree(self.roots[0], self.roots[1:], store=self._unit_store)
        return tuple(self._units.changes(executed, getattr(record, "code_origins", None) or {},
                                         getattr(record, "binding_problems", None) or ()))

    def changes(self, recorded: Mapping[str, str] | None) -> tuple[str, ...]:
        """Why a record's code is not the tree's: () when every digest matches."""
        if recorded is None:
            return (BEFORE_BINDING,)
        if not recorded:  # every real record names at least its check's module
            return ("records no code digest",)
        changed = []
        for module, digest in sorted(recorded.items()):
            now = self.digest(module)
            if now is None:
                changed.append(f"{module} (removed)")
            elif now != digest:
                changed.append(module)
        return tuple(changed)


# The judging half of pv.sessionbind (which records session_code): here, so that TreeDigests
# reads it without importing the module that imports this one.
def session_file_digest(path: Path) -> str | None:
    """The digest pv.sessionbind records for a file the session loaded: its source's digest for
    Python, else its bytes'."""
    if path.suffix == ".py":
        return digest_file(path)
    try:
        return "raw-" + hashlib.sha256(path.read_bytes()).hexdigest()[: DIGEST_CHARS - 4]
    except OSError:
        return None


def session_changes(root: Path, recorded: Mapping[str, str] | None, cache: dict[str, str | None] | None = None) -> tuple[str, ...]:
    """Why a record's session code is not the tree's: () when every file is as it was."""
    if not recorded:
        return ()
    cache = {} if cache is None else cache
    out = []
    for rel, digest in sorted(recorded.items()):
        if rel not in cache:
            path = Path(root) / rel
            cache[rel] = session_file_digest(path) if path.is_file() else None
        now = cache[rel]
        if now is None:
            out.append(f"{rel} (loaded in the session: removed)")
        elif now != digest:
            out.append(f"{rel} (loaded in the session)")
    return tuple(out)
