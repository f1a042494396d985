"""PV501 (a declared status above the evidence), remembered while nothing it read has changed.

What decides the diagnostics: pv's own source (the lifecycle rules), the workspace's
`subject_param`, the text and shown path of every contract claiming more than DRAFT, the
ledger's bytes, and the syntax-tree digest of every module a record it looked at names. The
first four make the key (pv.cache); the modules and their digests are stored with the answer
and compared with the tree's on every hit (a read and a hash per module, from pv.codebind's own
cache), so an edit to any bound module recomputes. On a repository with megabytes of evidence
this skips reading hundreds of records and the lifecycle computation on every `pv validate`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pv.diagnostics import Diagnostic, Severity

ALGORITHM = "declared-status-1"


class _Recording:
    """A pv.codebind.TreeDigests that notes every module it was asked about."""

    def __init__(self, tree: Any):
        self.tree = tree
        self.asked: dict[str, str | None] = {}

    def digest(self, module: str) -> str | None:
        self.asked[module] = self.tree.digest(module)
        return self.asked[module]

    def changes(self, recorded: Any) -> tuple[str, ...]:
        for module in sorted(recorded or {}):
            self.digest(module)
        return self.tree.changes(recorded)


def _ledger_digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return "absent"


def declared_status_diagnostics(workspace: Any, claiming: list) -> list[Diagnostic]:
    """pv.lifecycle.declared_status_diagnostics for the `claiming` loaded contracts, from the
    latest ledger records (pv.ledger_latest), remembered in pv.cache (see the module doc)."""
    from pv import lifecycle
    from pv.cache import Cache, key_of, pv_source_digest
    from pv.codebind import TreeDigests

    tree = TreeDigests(workspace.root, persist=True)
    store = Cache(workspace.root, "declared-status", ALGORITHM)
    parts = [pv_source_digest(), workspace.subject_param, _ledger_digest(Path(workspace.ledger))]
    for loaded in claiming:
        parts += [loaded.display_path, loaded.text]
    key = key_of(*parts)
    found = store.get(key)
    if isinstance(found, dict) and isinstance(found.get("modules"), dict) and isinstance(found.get("diagnostics"), list):
        if all(tree.digest(m) == d for m, d in found["modules"].items()):
            try:
                out = [Diagnostic(path=d["path"], line=d["line"], col=d["col"], code=d["code"], message=d["message"],
                                  hint=d["hint"], severity=Severity(d["severity"])) for d in found["diagnostics"]]
                tree.save()
                return out
            except (KeyError, TypeError, ValueError):
                pass

    from pv.ledger_latest import latest_records

    wanted = {(c.contract.metadata.id, f.id): (set(lifecycle.cell_hashes(f, workspace.subject_param).values()),
                                               set(f.mutants))
              for c in claiming for f in c.contract.falsification_tests}
    records = latest_records(workspace.ledger, workspace.root, wanted)
    recording = _Recording(tree)
    out = lifecycle.declared_status_diagnostics(claiming, records, recording, workspace.subject_param)
    tree.save()
    if _ledger_digest(Path(workspace.ledger)) == parts[2]:  # not appended to meanwhile
        store.put(key, {"modules": recording.asked, "diagnostics": [d.to_json() for d in out]})
        store.save()
    return out
