"""The import hook that serves one mutated module to a run: the user's files are never edited.

`pv mutate` starts each mutant's pytest process with `PV_AUTOMUTANT=<spec.json>` in its
environment and pv/automutate/site on PYTHONPATH; that directory's sitecustomize.py calls
`install()` at interpreter start-up, before anything imports the code under test. Child
Python processes a check starts (a CLI run, torchrun's ranks) inherit the environment and so
the same mutant.

The spec names the module (`pvlab.runtime.kernels`), its file on disk and a file holding the
mutated source. A finder first on `sys.meta_path` answers for that one module with a loader
that reads the mutated source in place of the file's, reads no cached bytecode and writes
none. The module keeps its real `__file__`, so code that finds files next to itself (or
digests its own source from disk, like a checkpoint cache key) sees the real tree.

Standard library only: it runs in every child process, before anything else is importable.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from typing import Any

ENV = "PV_AUTOMUTANT"


class _MutatedLoader(importlib.machinery.SourceFileLoader):
    def __init__(self, fullname: str, path: str, source: bytes):
        super().__init__(fullname, path)
        self._source = source

    def get_data(self, path: str) -> bytes:
        if os.path.abspath(path) == os.path.abspath(self.path):
            return self._source
        if path.endswith((".pyc", ".pyo")):
            raise OSError("no cached bytecode for a mutated module")  # compile the mutated source
        return super().get_data(path)

    def set_data(self, path: str, data: bytes, *, _mode: int = 0o666) -> None:
        return None  # never write bytecode of a mutant (least of all into the user's tree)


class _MutatedFinder(importlib.abc.MetaPathFinder):
    def __init__(self, module: str, path: str, source: bytes):
        self.module, self.path, self.source = module, path, source

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.module:
            return None
        is_package = os.path.basename(self.path) == "__init__.py"
        loader = _MutatedLoader(fullname, self.path, self.source)
        return importlib.util.spec_from_file_location(
            fullname, self.path, loader=loader,
            submodule_search_locations=[os.path.dirname(self.path)] if is_package else None)


def install(spec_path: str) -> None:
    """Put the finder of the spec's mutant first on sys.meta_path (once per process)."""
    if any(isinstance(f, _MutatedFinder) for f in sys.meta_path):
        return
    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    with open(spec["mutated_source"], "rb") as handle:
        source = handle.read()
    sys.meta_path.insert(0, _MutatedFinder(spec["module"], spec["path"], source))


def site_dir() -> str:
    """The directory to put first on PYTHONPATH: it holds the sitecustomize.py that installs the hook."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")
