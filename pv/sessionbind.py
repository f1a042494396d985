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
whose session code differs from the tree's now (edited or removed) is stale, named by path.
Binding more than ran stales more often, never less. What it cannot see: code outside the
workspace (an installed package, a sitecustomize in the virtual environment), which, like
torch's version, is recorded by no digest.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Iterable, Mapping

from pv import codebind

TOOL_PACKAGE = "pv"  # the tool itself: never bound (docs/status.md)


def _outside(real: str, prefixes: Iterable[str]) -> bool:
    return not any(real == p or real.startswith(p + os.sep) for p in prefixes)


def _environment_dirs() -> list[str]:
    """Where the interpreter's own and installed packages live (a virtual environment inside the
    workspace included): not the workspace's code."""
    dirs = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    return sorted(dirs)


def _digest(path: Path) -> str | None:
    if path.suffix == ".py":
        return codebind.digest_file(path)
    try:
        return "raw-" + hashlib.sha256(path.read_bytes()).hexdigest()[: codebind.DIGEST_CHARS - 4]
    except OSError:
        return None


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


def changes(root: Path, recorded: Mapping[str, str] | None, cache: dict[str, str | None] | None = None) -> tuple[str, ...]:
    """Why a record's session code is not the tree's: () when every file is as it was."""
    if not recorded:
        return ()
    cache = {} if cache is None else cache
    out = []
    for rel, digest in sorted(recorded.items()):
        if rel not in cache:
            path = Path(root) / rel
            cache[rel] = _digest(path) if path.is_file() else None
        now = cache[rel]
        if now is None:
            out.append(f"{rel} (loaded in the session: removed)")
        elif now != digest:
            out.append(f"{rel} (loaded in the session)")
    return tuple(out)


def unrendered(workspace: object, sources: Mapping[str, str]) -> list[str]:
    """Binding problems for the generated test modules of this session (`sources`: path -> text as
    collected) that are not what `pv generate` renders from their contract now. Every module
    collected is imported, so a hand edit to another contract's module (a patch at its top) runs
    beside this falsifier's test; pv.identity judges only the falsifier's own module, and
    `session_code` leaves the generated modules out (a sibling contract's honest edit must not
    stale this record), so such a module is judged here, as it ran: a record made beside one is
    never fresh. `pv run` regenerates first, so only a plain pytest run can meet one."""
    from pv.codegen import HEADER_PREFIX, module_name, render
    from pv.loader import load_contract

    generated = os.path.realpath(workspace.generated_dir)  # type: ignore[attr-defined]
    problems = []
    for path, text in sorted(sources.items()):
        real = os.path.realpath(path)
        if os.path.dirname(real) != generated:
            continue  # elsewhere: a workspace module like any other (session_code), recording nothing
        name = os.path.basename(real)
        first = text.split("\n", 1)[0]
        contract = first[len(HEADER_PREFIX):].split(" — ", 1)[0] if first.startswith(HEADER_PREFIX) else ""
        rendered = None
        try:
            loaded, _ = load_contract(workspace.root / contract, contract)  # type: ignore[attr-defined]
            if contract and loaded is not None and loaded.contract is not None \
                    and module_name(loaded.contract.metadata.id) == name:
                rendered = render(loaded, workspace)
        except Exception:  # noqa: BLE001 - a module pv cannot render from its contract is not pv's
            rendered = None
        if rendered != text:
            problems.append(f"{workspace.rel(Path(real))} ran in the session but is not what `pv generate` renders "  # type: ignore[attr-defined]
                            "from its contract (edited by hand?)")
    return problems
