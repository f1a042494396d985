"""Binding follows the import system: which file a module name loads, and what ran instead.

Without importing anything, `resolve(name, entries)` finds the file Python's path finder would
load for a dotted module name from these path entries, in its order: the parent packages first
(a package's submodules are looked up in its directory), and in each directory a package
directory (`name/__init__.*`) before an extension module (`name.cpython-311-....so`, `name.so`)
before source (`name.py`) before bytecode (`name.pyc`). A directory without `__init__` is a
namespace portion, used only when no entry has anything better.

While a check runs, `loaded_problems` compares what did load with what should have (the run
records them; a record with a problem is never fresh):

* a package directory, an extension module or a sourceless `.pyc` that shadows a `.py`;
* bytecode in `__pycache__` that Python accepted (its header matches the source's mtime and
  size) but that is not that source compiled;
* a module loaded from outside the workspace while the workspace has it (a path entry put in
  front, e.g. by a `sitecustomize.py`, `usercustomize.py` or `conftest.py`);
* a function of a bound module replaced by code from elsewhere (`kernels.rms_norm = other`),
  named with the file the replacement comes from: monkeypatching by a `conftest.py`, a
  `sitecustomize.py` or a plugin. Replacements from the bound packages themselves (a planted
  bug of `pv strength`) and decorators that keep `__wrapped__` are not problems.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import inspect
import marshal
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterable, Mapping

SOURCE_SUFFIXES = tuple(importlib.machinery.SOURCE_SUFFIXES)
BYTECODE_SUFFIXES = tuple(importlib.machinery.BYTECODE_SUFFIXES)
EXTENSION_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)
# the path finder's order within one directory
_LOADER_SUFFIXES = EXTENSION_SUFFIXES + SOURCE_SUFFIXES + BYTECODE_SUFFIXES
HOOK_FILES = ("sitecustomize.py", "usercustomize.py", "conftest.py")


def _find_in(directories: Iterable[Path], tail: str) -> tuple[Path | None, list[Path]]:
    """(file, namespace portions) for one name component across directories."""
    portions = []
    for directory in directories:
        package = directory / tail
        if package.is_dir():
            for suffix in _LOADER_SUFFIXES:
                init = package / ("__init__" + suffix)
                if init.is_file():
                    return init, []
            portions.append(package)
        for suffix in _LOADER_SUFFIXES:
            candidate = directory / (tail + suffix)
            if candidate.is_file():
                return candidate, []
    return None, portions


def resolve(name: str, entries: Iterable[Path]) -> Path | None:
    """The file `import name` would load from these path entries (a namespace package: its
    first directory); None when nothing would load."""
    directories = [Path(e) for e in entries]
    found: Path | None = None
    for tail in name.split("."):
        found, portions = _find_in(directories, tail)
        if found is None:
            if not portions:
                return None
            found, directories = portions[0], portions
        elif found.stem == "__init__" or found.name.startswith("__init__."):
            directories = [found.parent]
        else:
            directories = []  # a plain module has no submodules
    return found


def entry_of(name: str, path: Path) -> Path:
    """The path entry a module was found under (its file minus the name's parts)."""
    levels = len(name.split(".")) + (1 if path.name.startswith("__init__.") else 0)
    return path.parents[levels - 1]


def is_source(path: Path) -> bool:
    return path.suffix in SOURCE_SUFFIXES


def _is_package_init(path: Path) -> bool:
    return path.name.startswith("__init__.")


def shadowing(name: str, path: Path) -> str | None:
    """What shadows the module's source at the place it loaded from, or None."""
    tail = name.rpartition(".")[2]
    directory = path.parent.parent if _is_package_init(path) else path.parent
    source = directory / (tail + ".py")
    if _is_package_init(path) and source.is_file():
        return f"the package directory {path.parent.name}/ shadows {source.name}"
    if not is_source(path) and not _is_package_init(path) and source.is_file():
        return f"{path.name} shadows {source.name}"
    if _is_package_init(path) and not is_source(path) and (path.parent / "__init__.py").is_file():
        return f"{path.name} shadows __init__.py"
    return None


@functools.lru_cache(maxsize=1024)
def _same_code(pyc: bytes, source: bytes, filename: str) -> bool:
    """Whether the bytecode is the source compiled (once per distinct pair: every check asks)."""
    try:
        return marshal.loads(pyc[16:]) == compile(source, filename, "exec", dont_inherit=True)
    except (ValueError, EOFError, TypeError, SyntaxError, RecursionError, MemoryError):
        return False


def bytecode_mismatch(module: ModuleType) -> str | None:
    """Whether Python ran cached bytecode that is not the module's source compiled."""
    spec = getattr(module, "__spec__", None)
    origin, cached = getattr(spec, "origin", None), getattr(spec, "cached", None)
    if not origin or not cached or not str(origin).endswith(".py"):
        return None
    try:
        data = Path(cached).read_bytes()
        stat = os.stat(origin)
    except OSError:
        return None
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return None
    flags = int.from_bytes(data[4:8], "little")
    if flags == 0:  # timestamp-based: Python trusts it when mtime and size match
        mtime, size = int.from_bytes(data[8:12], "little"), int.from_bytes(data[12:16], "little")
        if mtime != (int(stat.st_mtime) & 0xFFFFFFFF) or size != (stat.st_size & 0xFFFFFFFF):
            return None  # Python recompiled from source instead
    elif flags & 0b10:  # hash-based and checked: Python compared the source's hash itself
        return None
    try:
        if _same_code(data, Path(origin).read_bytes(), str(origin)):
            return None
    except OSError:
        pass
    return f"{module.__name__} ran from bytecode {Path(cached).name} that is not {Path(origin).name} compiled"


def _code_file(obj: object) -> str | None:
    target = inspect.unwrap(obj) if callable(obj) else obj
    code = getattr(target, "__code__", None)
    return getattr(code, "co_filename", None)


def _defined_names(module: ModuleType) -> list[tuple[str, str]]:
    """(attribute path, qualname) of the functions and methods the module's own source defines
    at top level and in its top-level classes (what a patch would replace)."""
    try:
        return list(_names_in_source(Path(module.__file__ or "").read_bytes()))
    except (OSError, TypeError):
        return []


@functools.lru_cache(maxsize=1024)
def _names_in_source(data: bytes) -> tuple[tuple[str, str], ...]:
    import ast

    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append((node.name, node.name))
        elif isinstance(node, ast.ClassDef):
            names += [(f"{node.name}.{m.name}", f"{node.name}.{m.name}") for m in node.body
                      if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return tuple(names)


def patched(module: ModuleType, bound_files: set[str]) -> list[str]:
    """The module's functions now replaced by code from outside the bound packages."""
    own = getattr(module, "__file__", None)
    if not own or not own.endswith(".py"):
        return []
    found = []
    for attribute, _ in _defined_names(module):
        obj: object = module
        for part in attribute.split("."):
            obj = inspect.getattr_static(obj, part, None) if isinstance(obj, type) else getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        where = _code_file(obj) if obj is not None else None
        if where is None or os.path.realpath(where) in bound_files or where == own:
            continue
        if Path(where).name in HOOK_FILES or not _is_installed(where):
            found.append(f"{module.__name__}.{attribute} is replaced by code from {where}")
    return found


def _is_installed(path: str) -> bool:
    """A file of an installed distribution or the standard library (a decorator's wrapper),
    not a project's own file."""
    import sysconfig

    roots = {sysconfig.get_paths().get(k) for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    real = os.path.realpath(path)
    return any(r and real.startswith(os.path.realpath(r) + os.sep) for r in roots)


def loaded_problems(names: Iterable[str], modules: Mapping[str, ModuleType], workspace_root: Path,
                    bound_files: set[str]) -> list[str]:
    """What loaded instead of the workspace's source, for the bound modules `names`."""
    root = Path(workspace_root).resolve()
    # where the workspace's own modules are found: its root and the path entries inside it (src/)
    home_entries = [root, *(Path(e).resolve() for e in sys.path if e and root in Path(e).resolve().parents)]
    problems: list[str] = []
    for name in sorted(names):
        module = modules.get(name)
        path = getattr(module, "__file__", None)
        if module is None or not path:
            continue
        file = Path(path).resolve()
        shadow = shadowing(name, file)
        if shadow:
            problems.append(f"{name}: {shadow}")
        mismatch = bytecode_mismatch(module)
        if mismatch:
            problems.append(mismatch)
        if root not in file.parents:
            home = resolve(name, home_entries)
            if home is not None:
                problems.append(f"{name} loaded from {file}, not the workspace's {home.relative_to(root)}")
        problems += patched(module, bound_files)
    return problems


def sys_modules() -> Mapping[str, ModuleType]:
    return sys.modules
