"""Binding a record whose check ran untraced (pv.timing) to the code units it can run.

A timing check runs with no line tracer, so nothing tells which functions it executed. Its
record is bound to every module it can run — the static import closure (pv.codebind.closure)
of the check's module, the runtime adapter's module and the active planted bug's module,
inside the bound packages, plus every bound module first imported while it ran — and to
every unit (pv.codeunits) of each: all its functions and its `<module>` code. The record
carries them as a traced record carries what it executed (`executed_code`, `code_origins`),
so it is judged the same way, by unit digests that ignore docstrings and positions.

One refinement: a **sibling planted-bug module**. The mutants package (`[tool.pv]
mutants_module`) imports every submodule from its `__init__` so that each registers its bugs,
which puts every bug module in the closure of any check that runs under a bug. A module
strictly inside that package that

* statically declares at least one planted bug (a function decorated with `mutant("name")`,
  found as `pv validate` finds them: pv.mutation's scan, without importing),
* does not declare the active bug (nor is the module its function comes from), and
* is not imported by any module bound whole — the closure followed from the check's, the
  adapter's and the active bug's modules (and every other module bound whole), leaving out
  only the package `__init__`'s imports of its own submodules (the registration imports)

is bound by every unit except its planted bugs' functions (and what is nested in them): its
`<module>` code (imports, constants, registration lines) and any helper it defines stay bound.
The assumption: a planted bug's function runs only when that bug is entered, and pv enters
only the active one (pv.mutation.around_check; pvlab's child processes enter the bugs they are
named). Adding a planted bug to a sibling therefore changes no bound unit (`<module>` leaves
out every function definition, decorators included), while editing its module-level code or a
helper stales the record. The package `__init__` and its machinery modules (those declaring no
bug) are bound whole.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
from pathlib import Path
from typing import Iterable, Mapping

from pv import codebind, importbind
from pv.codeunits import named_functions
from pv.execution import Bound, module_units, relative_path, unit_store
from pv.mutation import decorator_name


@functools.lru_cache(maxsize=1024)
def planted_units(data: bytes) -> tuple[frozenset[str], frozenset[str]]:
    """(bug names, qualnames of their functions) a module's source declares with
    `@mutant("name")`. A qualname counts only when every def of it is so decorated (two defs of
    one qualname are one unit). Unparsable source declares nothing pv can see."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset(), frozenset()
    names: set[str] = set()
    planted: dict[str, bool] = {}
    for qualname, node in named_functions(tree):
        declared = [n for d in node.decorator_list if (n := decorator_name(d)) is not None]  # type: ignore[attr-defined]
        names.update(declared)
        planted[qualname] = planted.get(qualname, True) and bool(declared)
    return frozenset(names), frozenset(q for q, is_bug in planted.items() if is_bug)


def _is_planted(qualname: str, bugs: frozenset[str]) -> bool:
    """A bug's function, or anything defined inside one."""
    return any(qualname == b or qualname.startswith(b + ".<locals>.") for b in bugs)


def _read(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError:
        return None


def siblings(names: Iterable[str], mutants: str | None, roots: list[Path], *, active: str | None = None,
             active_module: str | None = None, whole: Iterable[str] = ()) -> dict[str, frozenset[str]]:
    """The sibling planted-bug modules among `names` (see the module doc): module -> the
    qualnames of its bugs' functions, which its record leaves out. `whole`: modules bound
    whole whatever they declare (the check's, the adapter's, the active bug's)."""
    if not mutants:
        return {}
    names = set(names)
    forced = set(whole) | ({active_module} if active_module else set())
    candidates: dict[str, frozenset[str]] = {}
    for name in sorted(names):
        if not name.startswith(mutants + ".") or name in forced:
            continue
        declared, bugs = planted_units(_read(codebind.module_file(name, roots)) or b"")
        if bugs and (active is None or active not in declared):
            candidates[name] = bugs
    todo = [n for n in names if n not in candidates]
    while todo and candidates:  # whatever a module bound whole imports is bound whole too
        name = todo.pop()
        path = codebind.module_file(name, roots)
        if path is None:
            continue
        for imported in codebind.module_imports(name, path, roots):
            if name == mutants and imported.startswith(mutants + "."):
                continue  # the registration imports: they run every bug module's <module> code only
            if candidates.pop(imported, None) is not None:
                todo.append(imported)
    return candidates


def _file_of(name: str, modules: Mapping[str, object], roots: list[Path]) -> Path | None:
    """The file the module loaded from (the code that ran), else the one it would load from."""
    loaded = getattr(modules.get(name), "__file__", None)
    if loaded:
        return Path(os.path.realpath(loaded))
    found = codebind.module_file(name, roots)
    return None if found is None else Path(os.path.realpath(found))


def bind(start: list[str], packages: Iterable[str], roots: list[Path], workspace_root: Path, *,
         also: Iterable[str] = (), mutants: str | None = None, active: str | None = None,
         active_module: str | None = None, modules: Mapping[str, object] | None = None) -> Bound:
    """The units an untraced check can run, with digests, origins and binding problems: every
    unit of each module of the closure of `start` plus `also`, but a sibling planted-bug
    module's bugs. `mutants`: the mutants package; `active`, `active_module`: the bug the check
    ran under and the module of its function."""
    packages = tuple(packages)
    modules = sys.modules if modules is None else modules
    root = Path(os.path.realpath(workspace_root))
    names = codebind.closure(start, packages, roots) | set(also)
    left_out = siblings(names, mutants, roots, active=active, active_module=active_module, whole=start)
    executed: dict[str, dict[str, str]] = {}
    origins: dict[str, str] = {}
    problems: list[str] = []
    for name in sorted(names):
        path = _file_of(name, modules, roots)
        units = None if path is None else module_units(str(path), root)
        if path is None or units is None:  # a namespace package, a module gone: nothing to bind, as before
            continue
        bugs = left_out.get(name, frozenset())
        executed[name] = {q: d for q, d in sorted(units.digests.items()) if not _is_planted(q, bugs)}
        origins[name] = relative_path(str(path), root)
    store = unit_store(root)
    if store is not None:
        store.save()  # type: ignore[attr-defined]  # writes only when this bind parsed something new
    bound_files = {str(Path(root, o)) if not os.path.isabs(o) else o for o in origins.values()}
    problems += importbind.loaded_problems(executed, modules, root, bound_files)  # type: ignore[arg-type]
    return Bound(executed, origins, sorted(dict.fromkeys(problems)))
