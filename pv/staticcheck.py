"""Static verification of `check:` bindings and mutant names, by parsing modules with `ast`.

`pv validate` runs as a pre-commit hook: it must never import the checks (that would import
torch and run module-level code). Instead it resolves `module:function` to a file under the
workspace root, parses it, finds the top-level `def` (following simple re-exports such as
`from .loss import eval_loss` and `eval_loss = _impl`), and compares the signature with how
the harness calls a check: `check(device=..., **params)`, plus `tolerance=` when the
signature names it.

Mutant names are found the same way: every call `mutant("name")` (the decorator of
`pv.mutation`) in the mutants module, or in every module of the mutants package.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pv import mutation, sourcetrees
from pv.diagnostics import did_you_mean

MAX_REEXPORT_HOPS = 8
MAX_MODULE_BYTES = 2_000_000  # a check module is a few kilobytes; more is not worth parsing
# Python builds the AST under the interpreter's recursion limit, counted from the caller's stack
# depth: a module that parses in one process (torch.compile raises the limit to 2,000) would not
# in another, or deeper in the stack. pv parses with this many frames of headroom, whatever the
# limit and depth are, so the same file always gives the same answer.
PARSE_HEADROOM = 500
MUTANT_SCAN_VERSION = f"mutant-names-4|{MAX_MODULE_BYTES}"  # pv.cache: change with the scan
FACTS_VERSION = f"module-facts-1|{MAX_MODULE_BYTES}"  # pv.cache: change with _signature/_top_level_binding
MAX_NAME_BYTES = 255  # one path component, the longest most file systems allow


@dataclass(frozen=True)
class Param:
    name: str
    has_default: bool


@dataclass(frozen=True)
class Signature:
    """What matters about a function's parameters for a keyword-only call."""

    name: str
    path: Path
    line: int
    positional_only: tuple[Param, ...] = ()
    keywordable: tuple[Param, ...] = ()  # ordinary and keyword-only parameters
    var_keyword: bool = False
    is_async: bool = False

    def names(self, keyword: str) -> bool:
        """Whether a parameter of that name can be passed by keyword (**kwargs does not count:
        the harness passes `tolerance` only to a check that names it)."""
        return any(p.name == keyword for p in self.keywordable)

    def accepts(self, keyword: str) -> bool:
        return self.var_keyword or any(p.name == keyword for p in self.keywordable)

    def problems(self, params: list[str], optional: tuple[str, ...] = ("tolerance",)) -> list[tuple[str, str, str | None]]:
        """(code, message, params key or None) for each way `f(device=..., **params)` would
        fail to bind."""
        out: list[tuple[str, str, str | None]] = []
        if self.is_async:
            out.append(("PV313", f"{self.name}() is `async def`; the harness calls checks synchronously", None))
        positional = {p.name for p in self.positional_only}
        if not self.accepts("device"):
            how = " by keyword (it is positional-only)" if "device" in positional else ""
            out.append(("PV313", f"{self.name}() does not accept `device`{how}; the harness passes device=...", None))
        for key in params:
            if not self.accepts(key):
                how = " by keyword (it is positional-only)" if key in positional else ""
                out.append(("PV313", f"{self.name}() does not accept {key!r}{how}, which params names", key))
        for p in self.positional_only:
            if not p.has_default and p.name != "device" and p.name not in params:
                out.append(("PV314", f"{self.name}() parameter {p.name!r} is positional-only and required; "
                                     "checks are called with keywords only", None))
        supplied = set(params) | {"device", *optional}
        for p in self.keywordable:
            if not p.has_default and p.name not in supplied:
                out.append(("PV314", f"{self.name}() requires {p.name!r}, which params does not supply", None))
        return out


class Unresolved(Exception):
    """The binding cannot be verified: code + message (+ hint)."""

    def __init__(self, code: str, message: str, hint: str = ""):
        super().__init__(message)
        self.code, self.message, self.hint = code, message, hint


@dataclass
class _Module:
    dotted: str
    path: Path
    tree: ast.Module | None
    error: SyntaxError | None = None
    is_package: bool = False
    source: bytes | None = None  # the bytes `tree` was parsed from


_SCANNED: dict[str, list[list[Any]]] = {}
"""Mutant names per file bytes (key_of), for this process: PV501 judges each contract's evidence
with a fresh index, and with PV_NO_CACHE=1 nothing else would keep a scan from one to the next."""


@dataclass
class ModuleIndex:
    """Resolves and parses modules under a workspace root; every file is parsed once."""

    root: Path
    # Write each fact to pv.cache as it is found; False: the owner calls save() once (a validation
    # run binds a hundred checks, and writing the whole cache file for each was most of a first run).
    autosave: bool = True
    _modules: dict[str, _Module | None] = field(default_factory=dict)
    _mutants: dict[str, dict[str, tuple[tuple[str, ...] | None, str | None]] | None] = field(default_factory=dict)
    _mutant_defs: dict[str, dict[str, tuple[str, str | None]]] = field(default_factory=dict)
    _functions: dict[tuple[str, str], "Signature | Unresolved"] = field(default_factory=dict)
    _store: Any = None  # pv.cache.Cache of mutant names per file, opened on first use
    _facts: Any = None  # pv.cache.Cache of check signatures per file, opened on first use
    # trees of the mutants files it parsed, held (only) so that pv.sourcetrees can share them
    _scanned_trees: list[ast.Module] = field(default_factory=list)

    def save(self) -> None:
        """Write the facts found since the last save (signatures, mutant names) to pv.cache."""
        for store in (self._facts, self._store):
            if store is not None:
                store.save()

    def take_added(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The facts found since the last call, unsaved (a forked worker hands them to its parent)."""
        return tuple({} if store is None else store.take_added() for store in (self._facts, self._store))  # type: ignore[return-value]

    def merge(self, added: tuple[dict[str, Any], dict[str, Any]]) -> None:
        facts, names = added
        if facts:
            self._open_store().merge(facts)
        if names:
            self._names_store().merge(names)

    # --- modules ---------------------------------------------------------------------------

    def module_file(self, dotted: str) -> tuple[Path, bool] | None:
        """(file, is_package) for a dotted module name under the root (or root/src); None when
        there is none. Raises Unresolved (PV311) for a name no file can have, or a lookup the
        operating system refuses."""
        parts = dotted.split(".")
        too_long = next((p for p in parts if len(p.encode("utf-8")) > MAX_NAME_BYTES), None)
        if too_long is not None:
            raise Unresolved("PV311", f"module name part {too_long[:24]!r}... is {len(too_long)} characters; "
                                      f"no file name can be that long (at most {MAX_NAME_BYTES})",
                             "name the module of an existing check file")
        try:
            for base in (self.root, self.root / "src"):
                stem = base.joinpath(*parts)
                package_init = stem / "__init__.py"
                if package_init.is_file():
                    return package_init, True
                single = stem.with_name(stem.name + ".py")
                if single.is_file():
                    return single, False
        except OSError as exc:  # a path too long in all, a permission refused
            raise Unresolved("PV311", f"cannot look up module {dotted[:60]!r}: {exc.strerror or exc}",
                             "name the module of an existing check file") from None
        return installed_module_file(parts)

    def module(self, dotted: str) -> _Module | None:
        if dotted in self._modules:
            return self._modules[dotted]
        found = self.module_file(dotted)
        mod: _Module | None = None
        if found is not None:
            path, is_package = found
            try:
                source = path.read_bytes() if path.stat().st_size <= MAX_MODULE_BYTES else None
            except OSError:
                source = None
            tree, error = parse_module(path, source)
            if tree is not None and source is not None:  # read, never changed: PV501 digests it again
                sourcetrees.share(source, tree)
            mod = _Module(dotted, path, tree, error=error, is_package=is_package, source=source)
        self._modules[dotted] = mod
        return mod

    # --- functions -------------------------------------------------------------------------

    def find_function(self, dotted: str, name: str) -> Signature:
        """The signature of top-level function `name` of module `dotted`; raises Unresolved.
        Answers (and failures) are remembered: a check is usually bound many times."""
        key = (dotted, name)
        answer = self._functions.get(key)
        if answer is None:
            try:
                answer = self._remembered_def(dotted, name) or self._find_function(dotted, name)
            except Unresolved as exc:
                answer = exc
            self._functions[key] = answer
        if isinstance(answer, Unresolved):
            raise answer
        return answer

    def _names_store(self) -> Any:
        """pv.cache of the mutant names found per file, opened on first use."""
        if self._store is None:
            from pv.cache import Cache

            self._store = Cache(self.root, "mutant-names", MUTANT_SCAN_VERSION)
        return self._store

    def _open_store(self) -> Any:
        """pv.cache of the check signatures found per file, opened on first use."""
        if self._facts is None:
            from pv.cache import Cache

            self._facts = Cache(self.root, "module-facts", FACTS_VERSION)
        return self._facts

    def _remembered_def(self, dotted: str, name: str) -> Signature | None:
        """The signature of a function its own module defines, remembered in pv.cache under the
        module's bytes (parsing a check module is most of a binding check). None: not remembered,
        so the full resolution below runs (and remembers a plain `def` it finds)."""
        try:
            found = self.module_file(dotted)
            data = found[0].read_bytes() if found is not None else None
        except (Unresolved, OSError):
            return None
        if data is None:
            return None
        from pv.cache import key_of

        row = self._open_store().get(key_of("def", name, data))
        if not (isinstance(row, list) and len(row) == 5):
            return None
        try:
            line, posonly, keywordable, var_keyword, is_async = row
            return Signature(name=name, path=found[0], line=int(line),
                             positional_only=tuple(Param(str(n), bool(d)) for n, d in posonly),
                             keywordable=tuple(Param(str(n), bool(d)) for n, d in keywordable),
                             var_keyword=bool(var_keyword), is_async=bool(is_async))
        except (TypeError, ValueError):
            return None

    def _remember_def(self, mod: "_Module", name: str, signature: Signature) -> None:
        try:
            data = mod.path.read_bytes()
        except OSError:
            return
        if mod.source is None or data != mod.source:  # changed since parsed: never remember under other bytes
            return
        from pv.cache import key_of

        self._open_store().put(key_of("def", name, data), [
            signature.line, [[p.name, p.has_default] for p in signature.positional_only],
            [[p.name, p.has_default] for p in signature.keywordable], signature.var_keyword, signature.is_async])
        if self.autosave:
            self._facts.save()

    def _find_function(self, dotted: str, name: str) -> Signature:
        seen: set[tuple[str, str]] = set()
        origin = f"{dotted}:{name}"
        for _ in range(MAX_REEXPORT_HOPS):
            if (dotted, name) in seen:
                raise Unresolved("PV312", f"{origin}: re-exports of {name!r} go round in a circle")
            seen.add((dotted, name))
            mod = self.module(dotted)
            if mod is None:
                raise Unresolved("PV311", f"module {dotted!r} not found under the workspace root nor in an installed package",
                                 f"expected {dotted.replace('.', '/')}.py or "
                                 f"{dotted.replace('.', '/')}/__init__.py under {self.root}")
            if mod.tree is None:
                err = mod.error
                where = f" (line {err.lineno})" if err is not None and err.lineno else ""
                raise Unresolved("PV315", f"module {dotted!r} cannot be parsed{where}: "
                                          f"{err.msg if err is not None else 'unreadable'}",
                                 f"fix {mod.path}")
            binding = _top_level_binding(mod.tree, name)
            if binding is None:
                star = [self._absolute(mod, node) for node in _star_imports(mod.tree)]
                for target in star:
                    if target and self.module(target) is not None:
                        tree = self.module(target).tree  # type: ignore[union-attr]
                        if tree is not None and _top_level_binding(tree, name) is not None:
                            binding = ("import", target, name)
                            break
            if binding is None:
                defs = _top_level_defs(mod.tree)
                hint = did_you_mean(name, defs, f"functions in {dotted}: {', '.join(defs[:8])}" if defs else
                                    f"{dotted} defines no functions")
                raise Unresolved("PV312", f"{dotted!r} has no top-level function {name!r}", hint)
            kind = binding[0]
            if kind == "def":
                signature = _signature(binding[1], mod.path)
                if len(seen) == 1:  # defined in the module named: decided by its bytes alone
                    self._remember_def(mod, name, signature)
                return signature
            if kind == "alias":
                name = binding[1]
                continue
            if kind in ("import", "import-from-node"):
                if kind == "import":
                    target_module, target_name = binding[1], binding[2]
                else:
                    target_module, target_name = self._absolute(mod, binding[1]), binding[2].name
                if target_module is None or self.module_file(target_module) is None:
                    raise Unresolved("PV312", f"{dotted}:{name} is imported from "
                                              f"{target_module or 'outside the workspace'!s}, which pv cannot find",
                                     "a check must be defined in a module of an allowed package")
                dotted, name = target_module, target_name
                continue
            raise Unresolved("PV312", f"{dotted}:{name} is bound by {kind}, not a `def`",
                             "pv verifies check signatures statically, so a check must be a plain function")
        raise Unresolved("PV312", f"{origin}: more than {MAX_REEXPORT_HOPS} re-exports to follow")

    def _absolute(self, mod: _Module, node: ast.ImportFrom) -> str | None:
        if not node.level:
            return node.module
        package = mod.dotted.split(".") if mod.is_package else mod.dotted.split(".")[:-1]
        if node.level - 1 > len(package):
            return None
        base = package[: len(package) - (node.level - 1)]
        if node.module:
            base = base + node.module.split(".")
        return ".".join(base) or None

    # --- mutants ---------------------------------------------------------------------------

    def mutant_names(self, dotted: str) -> frozenset[str] | None:
        """Names declared with `mutant("name")` in the module (every module of the package);
        None when the module does not exist."""
        found = self.mutant_runtimes(dotted)
        return None if found is None else frozenset(found)

    def mutant_runtimes(self, dotted: str) -> dict[str, tuple[tuple[str, ...] | None, str | None]] | None:
        """Name -> (its `runtimes=`, None when left out; why that could not be read, or None) of
        every mutant the module (package) declares; None when the module does not exist."""
        if dotted in self._mutants:
            return self._mutants[dotted]
        try:
            found = self.module_file(dotted)
        except Unresolved:
            found = None
        names: dict[str, tuple[tuple[str, ...] | None, str | None]] | None = None
        defs: dict[str, tuple[str, str | None]] = {}
        if found is not None:
            path, is_package = found
            files = sorted(path.parent.rglob("*.py")) if is_package else [path]
            names = {}
            for file in files:
                parts = list(file.relative_to(path.parent).with_suffix("").parts) if is_package else []
                module = ".".join([dotted, *(parts[:-1] if parts[-1:] == ["__init__"] else parts)])
                for name, runtimes, problem, qualname in self._file_mutant_names(file):
                    names[name] = (None if runtimes is None else tuple(runtimes), problem)
                    defs[name] = (module, qualname)
            if self._store is not None and self.autosave:
                self._store.save()
        self._mutants[dotted] = names
        self._mutant_defs[dotted] = defs
        return names

    def mutant_defs(self, dotted: str) -> dict[str, tuple[str, str | None]]:
        """Name -> (the module that defines it, the `__qualname__` of its decorated function, as
        pv.codeunits names a unit; None where it could not be read) of every mutant the module
        (package) declares, read by the same scan as mutant_runtimes; {} when there is none."""
        self.mutant_runtimes(dotted)
        return self._mutant_defs.get(dotted, {})

    def _file_mutant_names(self, file: Path) -> list[list[Any]]:
        """[name, runtimes or None, problem or None, qualname of its function or None] of each mutant one file declares; remembered in pv.cache under the file's bytes
        (scanning parses the file, and a mutants package is scanned whole for every contract)."""
        try:
            data = file.read_bytes()
        except OSError:
            data = None
        if data is not None:
            self._names_store()
        key = None
        if data is not None:
            from pv.cache import key_of

            key = key_of(data)
            if key in _SCANNED:  # this process read these bytes before (a contract's evidence each time)
                return _SCANNED[key]
            found = self._store.get(key)
            if isinstance(found, list) and all(isinstance(n, list) and len(n) == 4 for n in found):
                return found
        names: list[list[Any]] = []
        tree = parse_module(file, data)[0]
        if tree is not None and data is not None:  # PV501 digests the mutants modules the evidence ran
            sourcetrees.share(data, tree)
            self._scanned_trees.append(tree)
        if tree is not None:  # an unparsable module declares nothing pv can see
            try:
                declared = mutation.scan_mutant_names(file) if data is None else mutation.scan_parsed(file, data, tree)
                qualnames = _decorator_qualnames(tree)
                names = [[decl.name, None if decl.runtimes is None else list(decl.runtimes), decl.problem,
                          qualnames.get((decl.line, decl.col))] for decl in declared]
            except mutation.MutationError:
                names = []
        try:
            unchanged = data is not None and file.read_bytes() == data
        except OSError:
            unchanged = False
        if key is not None and unchanged:  # never remember names under bytes they were not read from
            self._store.put(key, names)
            _SCANNED[key] = names
        return names


def _decorator_qualnames(tree: ast.Module) -> dict[tuple[int, int], str]:
    """(line, column counted from 1) of each decorator of a function -> the function's
    `__qualname__` (pv.codeunits names units so): where pv.mutation found a `@mutant(...)`."""
    from pv.codeunits import named_functions

    return {(deco.lineno, deco.col_offset + 1): qualname for qualname, node in named_functions(tree)
            for deco in node.decorator_list}  # type: ignore[attr-defined]


def installed_module_file(parts: list[str]) -> tuple[Path, bool] | None:
    """(file, is_package) of a module of an installed package (e.g. the falsifier pack,
    `pvpack.checks.forward`), found without importing anything: importlib.util.find_spec of the
    top-level name only (for a top-level name it consults the finders and runs no code), then
    the rest of the dotted name followed on disk. The same packages `pv run` imports, so one rule
    holds in validate, generate and run."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if not locations:
        origin = Path(spec.origin) if spec.origin else None
        return (origin, False) if len(parts) == 1 and origin and origin.suffix == ".py" else None
    for location in locations:
        stem = Path(location).joinpath(*parts[1:])
        package_init = stem / "__init__.py"
        if package_init.is_file():
            return package_init, True
        single = stem.with_name(stem.name + ".py")
        if len(parts) > 1 and single.is_file():
            return single, False
    return None


def parse_module(path: Path, source: bytes | None = None) -> tuple[ast.Module | None, SyntaxError | None]:
    """(tree, None) or (None, why not). Never raises: Python's parser recurses on the C stack,
    so a 3,000-deep expression raises RecursionError (or MemoryError) rather than
    SyntaxError; those, an unreadable file and one too large to be a check module become a
    SyntaxError that names the problem (PV315 for the binding that needs the module)."""
    try:
        if (len(source) if source is not None else path.stat().st_size) > MAX_MODULE_BYTES:
            return None, SyntaxError(f"over {MAX_MODULE_BYTES:,} bytes, too large to be a check module")
        return parse_with_fixed_headroom(path.read_bytes() if source is None else source, str(path)), None
    except SyntaxError as exc:
        return None, exc
    except (RecursionError, MemoryError):
        return None, SyntaxError("nests too deeply for Python's parser")
    except (OSError, ValueError) as exc:  # unreadable, or NUL bytes
        return None, SyntaxError(str(exc))


def parse_with_fixed_headroom(source: bytes | str, filename: str = "<unknown>") -> ast.Module:
    """ast.parse with PARSE_HEADROOM frames of recursion budget above the current stack depth."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + PARSE_HEADROOM)
    try:
        return ast.parse(source, filename=filename)
    finally:
        sys.setrecursionlimit(previous)


def _top_level_statements(tree: ast.Module):
    """Module-level statements, including those under top-level if/try blocks."""
    stack = list(reversed(tree.body))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If):
            stack.extend(reversed(node.body + node.orelse))
            continue
        if isinstance(node, ast.Try):
            stack.extend(reversed(node.body + node.orelse + node.finalbody))
            continue
        yield node


def _top_level_binding(tree: ast.Module, name: str):
    """How `name` is bound at module level (the last binding wins, as at import time):
    ("def", node) | ("alias", other_name) | ("import-from-node", node, alias) | (description,) | None."""
    found = None
    for node in _top_level_statements(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            found = ("def", node)
        elif isinstance(node, ast.ClassDef) and node.name == name:
            found = ("a class",)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name and alias.name != "*":
                    found = ("import-from-node", node, alias)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if (alias.asname or alias.name.split(".")[0]) == name:
                    found = ("an import of a module",)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                value = node.value
                if isinstance(value, ast.Name) and value.id != name:
                    found = ("alias", value.id)
                else:
                    found = ("an assignment",)
    return found


def _star_imports(tree: ast.Module) -> list[ast.ImportFrom]:
    return [n for n in _top_level_statements(tree)
            if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)]


def _top_level_defs(tree: ast.Module) -> list[str]:
    return [n.name for n in _top_level_statements(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_")]


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef, path: Path) -> Signature:
    args = node.args
    positional = args.posonlyargs + args.args
    first_default = len(positional) - len(args.defaults)
    params = [Param(a.arg, i >= first_default) for i, a in enumerate(positional)]
    posonly = tuple(params[: len(args.posonlyargs)])
    ordinary = params[len(args.posonlyargs):]
    kwonly = [Param(a.arg, d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    return Signature(
        name=node.name, path=path, line=node.lineno, positional_only=posonly,
        keywordable=tuple(ordinary + kwonly), var_keyword=args.kwarg is not None,
        is_async=isinstance(node, ast.AsyncFunctionDef),
    )



def in_allowed_package(module: str, packages: tuple[str, ...] | list[str]) -> bool:
    """Whether dotted `module` is one of `packages` or inside one of them."""
    return any(module == p or module.startswith(p + ".") for p in packages)
