"""Syntax trees that readers of one process share, by the exact source bytes they were parsed from.

`pv validate` reads many modules twice: pv.staticcheck parses the check and mutants modules to
verify bindings, then PV501 (pv.codeunits) parses every module the evidence executed to digest
its units, most of the same files among them. A parse was a tenth of a cold run; the second one
of the same bytes gives the same tree (the file name and the recursion budget a reader parses
with change only how a parse fails), so a reader that only reads a tree may take the one another
reader made.

Only trees that nobody changes are shared: a reader that transforms a tree (pv.testdigest,
pv.codebind.digest_source) parses its own. Trees are held weakly: one is shared while the
reader that made it keeps it (pv.staticcheck's index lives for the whole validation), never
kept alive for the process.
"""

from __future__ import annotations

import ast
import weakref

_TREES: "weakref.WeakValueDictionary[bytes, ast.Module]" = weakref.WeakValueDictionary()


def share(source: bytes, tree: ast.Module) -> None:
    """Offer `tree`, parsed from `source`, to the readers that follow; nobody may change it."""
    _TREES[source] = tree


def shared(source: bytes) -> ast.Module | None:
    """A tree some reader parsed from exactly `source` and still holds; None when none does."""
    return _TREES.get(source)
