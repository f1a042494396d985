"""Planted bugs (mutants): named context managers that break the runtime for one run.

    from pv.mutation import mutant

    @mutant("cuda_drops_qkv_bias")
    def cuda_drops_qkv_bias():
        '''The fast path forgets the Q/K/V biases (the bug the hunt found).'''
        original = runtime.attention.apply_bias
        runtime.attention.apply_bias = lambda x, b: x
        try:
            yield
        finally:
            runtime.attention.apply_bias = original

The decorator wraps the generator with `contextlib.contextmanager` and registers it, with its
docstring, under its name. `runtimes=` says which of `[tool.pv] runtimes` the bug is planted in
(a name or a tuple of names, literal so that pv reads it without importing); left out, the bug is
planted in the project's default runtime, the first of the table: a project's mutants break its
own runtime. `pv strength` runs a falsifier under a bug only on the cells of a runtime the bug
is planted in, and the lifecycle counts only those cells (`meets`): a pass on another runtime,
where the bug's code never runs, says nothing about the falsifier. `load_registry(workspace)` imports `[tool.pv] mutants_module` and
returns the registry; `scan_mutant_names(path)` finds the names statically (for `pv validate`,
which must not import the runtime).

This module is also the one place that knows which mutant is active: `planted()` names the
registered mutants planted in this process right now (every registered mutant reports its own
entry and exit), and `run_mutant()` the one a `pytest --pv-mutant NAME` run wraps every check
call in (set by pv.plugin through pv.harness). Check caches read `planted()`.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import functools
import importlib
import inspect
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from pv.codebind import in_packages as _within
from pv.schema import MUTANT_PATTERN


class MutationError(Exception):
    """A problem with a mutant or the registry (a usage error for the CLI)."""


class UnknownMutant(MutationError, KeyError):
    def __init__(self, name: str, known: list[str]):
        self.name = name
        self.known = sorted(known)
        self.suggestions = difflib.get_close_matches(name, self.known, n=3, cutoff=0.6)
        super().__init__(self.describe())

    def describe(self) -> str:
        text = f"unknown mutant {self.name!r}"
        if self.suggestions:
            text += f"; did you mean {' or '.join(repr(s) for s in self.suggestions)}?"
        elif self.known:
            text += f"; known mutants: {', '.join(self.known)}"
        else:
            text += "; no mutants are registered"
        return text

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.describe()


@dataclass(frozen=True)
class Mutant:
    name: str
    factory: Callable[[], contextlib.AbstractContextManager[Any]]
    doc: str
    module: str
    qualname: str
    runtimes: tuple[str, ...] | None = None  # planted in these runtimes; None: the default runtime

    def __call__(self) -> contextlib.AbstractContextManager[Any]:
        return self.factory()


REGISTRY: dict[str, Mutant] = {}

# Which mutant is active: the one place that knows (harness and check caches read it from here).
_PLANTED: list[str] = []  # registered mutants planted in this process now, innermost last
_RUN: tuple[str, Callable[[], contextlib.AbstractContextManager[Any]]] | None = None  # --pv-mutant


def planted() -> tuple[str, ...]:
    """Names of the registered mutants planted in this process right now, outermost first."""
    return tuple(_PLANTED)


def set_run_mutant(name: str | None, factory: Callable[[], Any] | None = None) -> None:
    """The mutant every following check call of this run is wrapped in (None to clear)."""
    global _RUN
    _RUN = None if name is None else (name, factory)  # type: ignore[assignment]


def run_mutant() -> str | None:
    """The mutant this run wraps every check call in (`--pv-mutant`), or None."""
    return None if _RUN is None else _RUN[0]


def run_mutant_factory() -> Callable[[], Any] | None:
    """The context factory of the run's mutant (its module is code a record is bound to), or None."""
    return None if _RUN is None else _RUN[1]


def around_check(packages: tuple[str, ...] = ()) -> contextlib.AbstractContextManager[Any]:
    """The context a check call runs in: the run's mutant, or nothing. With `packages` (the
    record's bound packages), also where entering the mutant changed their code: last_seams()."""
    global _SEAMS
    _SEAMS = None
    if _RUN is None:
        return contextlib.nullcontext()
    return _seamed(_RUN[1], packages) if packages else _RUN[1]()


_SEAMS: list[str] | None = None  # where the run's mutant, entered last, changed the bound packages


def last_seams() -> list[str] | None:
    """Where entering the run's mutant for the last check call changed the bound packages'
    modules (`module:attribute`, `module:Class.attribute`, `module:name[key]`); None: not told."""
    return None if _SEAMS is None else list(_SEAMS)


def _attributes(packages: tuple[str, ...], modules: frozenset[str] | None = None) -> tuple[dict[str, int], frozenset[str]]:
    """id() of every attribute of the loaded modules of `packages` (of `modules` only, if given),
    of the classes they define, and of the entries of their module-level dicts."""
    seen: dict[str, int] = {}
    names = []
    for name, module in list(sys.modules.items()):
        if module is None or not _within(name, packages) or (modules is not None and name not in modules):
            continue
        names.append(name)
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        for attr, value in items:
            if isinstance(value, types.ModuleType):   # a submodule imported: bound as itself
                continue
            seen[f"{name}:{attr}"] = id(value)
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                for inner, member in list(vars(value).items()):
                    seen[f"{name}:{attr}.{inner}"] = id(member)
            elif isinstance(value, dict) and len(value) <= 1000 and not attr.startswith("__"):
                for key, member in list(value.items()):
                    if isinstance(key, (str, int)):
                        seen[f"{name}:{attr}[{key!r}]"] = id(member)
    return seen, frozenset(names)


@contextlib.contextmanager
def _seamed(factory: Callable[[], Any], packages: tuple[str, ...]) -> Iterator[None]:
    """The mutant's context, and where it changed the bound packages: what entering it replaced
    in the modules loaded before, and, in a module it imported itself to plant there, what leaving
    it put back. Best effort: a failure leaves last_seams() None."""
    global _SEAMS
    seams: set[str] | None = None
    try:
        before, loaded = _attributes(packages)
    except Exception:  # noqa: BLE001 - never lose the run over where its bug sits
        before, loaded = None, frozenset()
    with factory():
        during, imported = {}, frozenset()
        if before is not None:
            try:
                during, now = _attributes(packages)
                imported = now - loaded
                seams = {k for k in before.keys() | during.keys()
                         if k.split(":", 1)[0] in loaded and before.get(k) != during.get(k)}
            except Exception:  # noqa: BLE001
                seams = None
        yield
    if seams is not None and imported:
        try:
            after, _ = _attributes(packages, imported)
            seams |= {k for k in during.keys() | after.keys()
                      if k.split(":", 1)[0] in imported and during.get(k) != after.get(k)}
        except Exception:  # noqa: BLE001
            seams = None
    _SEAMS = None if seams is None else sorted(seams)


def _reporting(name: str, factory: Callable[[], contextlib.AbstractContextManager[Any]]) -> Callable[[], Any]:
    """`factory`, whose context also names `name` in planted() while its body runs."""

    @contextlib.contextmanager
    def entered() -> Iterator[None]:
        with factory():
            _PLANTED.append(name)
            try:
                yield
            finally:
                _PLANTED.pop()

    return entered


def runtimes_of(value: Any, what: str) -> tuple[str, ...] | None:
    """`runtimes=` of a mutant as a tuple of names (None when left out), or MutationError."""
    if value is None:
        return None
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, (tuple, list)) or not names or not all(isinstance(n, str) and n for n in names):
        raise MutationError(f"{what}: runtimes= must be a runtime name or a tuple of names "
                            f"of [tool.pv] runtimes, got {value!r}")
    return tuple(dict.fromkeys(names))


def mutant(name: str, runtimes: str | tuple[str, ...] | list[str] | None = None
           ) -> Callable[[Callable[..., Any]], Callable[[], contextlib.AbstractContextManager[Any]]]:
    """Register a generator (contextlib.contextmanager style) as the planted bug `name`, planted
    in `runtimes` (names of [tool.pv] runtimes; None: the project's default runtime)."""
    if not isinstance(name, str) or not re.match(MUTANT_PATTERN, name):
        raise MutationError(f"mutant name {name!r} must be snake_case ({MUTANT_PATTERN})")
    declared_runtimes = runtimes_of(runtimes, f"@mutant({name!r})")

    def register(fn: Callable[..., Any]) -> Callable[[], contextlib.AbstractContextManager[Any]]:
        if inspect.isgeneratorfunction(fn):
            factory = contextlib.contextmanager(fn)
        elif callable(fn):
            factory = fn  # already returns a context manager (e.g. decorated with @contextmanager)
        else:
            raise MutationError(f"@mutant({name!r}) must decorate a generator function")
        factory = functools.wraps(fn)(_reporting(name, factory))
        entry = Mutant(
            name=name, factory=factory, doc=inspect.getdoc(fn) or "",
            module=getattr(fn, "__module__", "?"), qualname=getattr(fn, "__qualname__", "?"),
            runtimes=declared_runtimes,
        )
        previous = REGISTRY.get(name)
        if previous is not None and (previous.module, previous.qualname) != (entry.module, entry.qualname):
            raise MutationError(
                f"mutant {name!r} is declared twice: {previous.module}.{previous.qualname} "
                f"and {entry.module}.{entry.qualname}"
            )
        REGISTRY[name] = entry  # a re-import of the same module replaces its own entry
        factory.pv_mutant_name = name  # type: ignore[attr-defined]
        return factory

    return register


def load_registry(workspace: Any) -> dict[str, Mutant]:
    """Import the workspace's mutants module and return the registry (name -> Mutant)."""
    module_name = getattr(workspace, "mutants_module", None)
    if not module_name:
        raise MutationError("no mutants module: set `mutants_module` in [tool.pv] of pyproject.toml")
    root = str(getattr(workspace, "root", "") or "")
    if root and root not in sys.path:
        sys.path.insert(0, root)
    try:
        importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is reported, with its cause
        raise MutationError(
            f"cannot import mutants module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    return dict(REGISTRY)


def get(registry: dict[str, Mutant], name: str) -> Mutant:
    try:
        return registry[name]
    except KeyError:
        raise UnknownMutant(name, list(registry)) from None


@contextlib.contextmanager
def active(registry: dict[str, Mutant], name: str | None) -> Iterator[None]:
    """`with active(registry, name):` — the named mutant, or nothing when name is None."""
    if name is None:
        yield
        return
    with get(registry, name)():
        yield


# --- static scan (no import) -----------------------------------------------------------------


@dataclass(frozen=True)
class MutantDecl:
    name: str
    path: Path
    line: int
    col: int
    function: str
    doc: str
    runtimes: tuple[str, ...] | None = None  # `runtimes=` of the decorator; None: left out
    problem: str | None = None  # why `runtimes=` could not be read (not a literal)


def _module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    """`NAME = <expr>` at the top level of a module (a `runtimes=` may name one, e.g. HF)."""
    return {target.id: node.value for node in tree.body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name)}


def _decorator_runtimes(node: ast.Call, constants: dict[str, ast.expr]) -> tuple[tuple[str, ...] | None, str | None]:
    """(runtimes, problem) of `@mutant("x", runtimes=...)`: a literal name or tuple/list of names,
    or a module-level constant holding one."""
    value = next((k.value for k in node.keywords if k.arg == "runtimes"), None)
    if value is None and len(node.args) > 1:
        value = node.args[1]
    if value is None:
        return None, None
    try:
        literal = ast.literal_eval(constants.get(value.id, value) if isinstance(value, ast.Name) else value)
        return runtimes_of(literal, "@mutant"), None
    except (ValueError, TypeError, SyntaxError, MutationError):
        return None, ("runtimes= must be a literal runtime name or tuple of names (pv reads it without "
                      f"importing the module), got `{ast.unparse(value)}`")


def decorator_name(node: ast.expr) -> str | None:
    """'x' for @mutant("x"), @mutation.mutant("x"), @pv.mutation.mutant(name="x")."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if called != "mutant":
        return None
    arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "name"), None)
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    return None


def _scan_file(path: Path) -> list[MutantDecl]:
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise MutationError(f"{path}:{exc.lineno or 0}:{exc.offset or 0}: cannot parse: {exc.msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MutationError(f"{path}: cannot read: {exc}") from None
    return _scan_tree(path, tree)


def scan_parsed(path: Path, data: bytes, tree: ast.Module) -> list[MutantDecl]:
    """What `scan_mutant_names(path)` finds in a file, given its bytes `data` and the tree they
    parsed to (pv.staticcheck parsed it already): read from that tree where the file's text
    parses to the same tree — UTF-8 without a byte-order mark (the text is what the parser
    decodes from the bytes: the same strings, and columns count UTF-8 bytes either way), no
    coding declaration and no carriage return (reading text translates it) — else by scanning
    the file as ever."""
    if (b"\r" not in data and not data.startswith(b"\xef\xbb\xbf")
            and b"coding" not in b"\n".join(data.split(b"\n", 2)[:2]) and _is_utf8(data)):
        return _scan_tree(path, tree)
    return _scan_file(path)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _scan_tree(path: Path, tree: ast.Module) -> list[MutantDecl]:
    found = []
    constants = _module_constants(tree)
    from pv.codeunits import statements  # ast.walk without expressions: no def is in one

    for node in statements(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                name = decorator_name(deco)
                if name is not None:
                    planted_in, problem = _decorator_runtimes(deco, constants)  # type: ignore[arg-type]
                    found.append(MutantDecl(name, path, deco.lineno, deco.col_offset + 1, node.name,
                                            ast.get_docstring(node) or "", planted_in, problem))
    return found


def scan_mutant_names(path: Path | str) -> list[MutantDecl]:
    """Every `@mutant("name")` in a file, or in the .py files under a directory (sorted)."""
    path = Path(path)
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
    out: list[MutantDecl] = []
    for file in files:
        out.extend(_scan_file(file))
    return out


def module_path(workspace: Any) -> Path | None:
    """The file (or package directory) of the workspace's mutants module, found without importing."""
    module_name = getattr(workspace, "mutants_module", None)
    if not module_name:
        return None
    base = Path(workspace.root).joinpath(*module_name.split("."))
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base
    return None


# --- which cells a planted bug meets ---------------------------------------------------------


def planted_in(declared: tuple[str, ...] | None, table: Any) -> frozenset[str] | None:
    """The runtimes a bug is planted in: its `runtimes=`, else the project's default runtime (the
    first of [tool.pv] runtimes). None when the project names no runtime and the bug none either:
    then every cell meets it (a project without runtimes has one runtime, its own code)."""
    if declared is not None:
        return frozenset(declared)
    names = list(table or ())
    return frozenset(names[:1]) or None


def meets(planted: frozenset[str] | None, cell_runtime: str | None, table: Any) -> bool:
    """Whether a falsifier's cell of runtime `cell_runtime` runs the code a bug planted in
    `planted` breaks. A falsifier without `runtimes:` (cell runtime None) drives the project's
    own code: the default runtime's."""
    if planted is None:
        return True
    names = list(table or ())
    runtime = cell_runtime if cell_runtime is not None else (names[0] if names else None)
    return runtime in planted

