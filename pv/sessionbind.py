"""The workspace's other code a falsifier's session loaded: bound by digest, like the code it ran.

pv.execution binds a record to the units of the bound packages (`[tool.pv] check_packages` +
`code_packages`) that its check executed. Code of the workspace outside them runs in the same
pytest session and can change a verdict without being a unit of the runtime: a `conftest.py`
(in the generated tests' folder or above it) or a plugin module given with `-p` that patches
torch or the harness, the `__init__.py` of a parent package of the bound ones (`pvlab` of
`pvlab.runtime`: it runs first), a `sitecustomize.py` put on the path from the tree, a helper of
the tree that a check imports from outside the bound packages. Until this was bound, a conftest
that patched `torch.Tensor.roll` turned a broken kernel's FAIL into a PASS, and deleting the
conftest afterwards left that PASS fresh (found by the attack round of 2026-12-02).

So every record also carries `session_code`: for each module loaded in the session from a file
of the workspace, outside the bound packages (bound by their units), outside pv's own package
(the tool: editing pv stales no evidence) and other than the generated test modules (bound by
their test identity, pv.identity), its path from the workspace root and the digest of its
source (pv.codebind.digest_source: docstrings, comments and formatting change nothing). A record
whose session code differs from the tree's now (edited or removed) is stale, named by path
(pv.codebind.session_changes, which TreeDigests reads).
Binding more than ran stales more often, never less. What it cannot see: code outside the
workspace (an installed package, a sitecustomize in the virtual environment), which, like
torch's version, is recorded by no digest.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterable, Mapping

from pv import codebind
from pv.codebind import session_file_digest as _digest

TOOL_PACKAGE = "pv"  # the tool itself: never bound (docs/status.md)


def _outside(real: str, prefixes: Iterable[str]) -> bool:
    return not any(real == p or real.startswith(p + os.sep) for p in prefixes)


def _environment_dirs() -> list[str]:
    """Where the interpreter's own and installed packages live (a virtual environment inside the
    workspace included): not the workspace's code."""
    dirs = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    return sorted(dirs)


def loaded(root: Path, bound_packages: Iterable[str], generated_dir: Path,
           modules: Mapping[str, object] | None = None) -> dict[str, str]:
    """Path from the workspace root -> digest of each module loaded from a file of the workspace
    that nothing else binds (see the module doc)."""
    modules = sys.modules if modules is None else modules
    root_real = os.path.realpath(root)
    generated = os.path.realpath(generated_dir)
    environment = _environment_dirs()
    bound = tuple(bound_packages) + (TOOL_PACKAGE,)
    found: dict[str, str] = {}
    for name, module in list(modules.items()):
        path = getattr(module, "__file__", None)
        if not isinstance(path, str) or not isinstance(name, str) or codebind.in_packages(name, bound):
            continue
        real = os.path.realpath(path)
        # where the tree has it: a conftest.py that is a link to a file outside the tree is the tree's
        here = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), os.path.basename(path))
        place = here if not _outside(here, [root_real]) else real
        if _outside(place, [root_real]) or not _outside(place, environment):
            continue
        if os.path.dirname(real) == generated and os.path.basename(real).startswith("test_"):
            continue  # a generated test module: pv.identity judges what ran of it
        rel = Path(place).relative_to(root_real).as_posix()
        if rel in found:
            continue
        digest = _digest(Path(place))
        if digest is not None:
            found[rel] = digest
    return dict(sorted(found.items()))
