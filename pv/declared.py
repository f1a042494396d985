"""PV501 (a declared status above the evidence), remembered while nothing it read has changed.

What decides the diagnostics: pv's own source (the lifecycle rules), the workspace's
`subject_param`, the text and shown path of every contract claiming more than DRAFT, the
ledger's bytes, and the code each record it looked at was judged by — the syntax-tree digest
of every module an older record names, and for a record of executed units (pv.execution) the
file each of its modules loads now and that file's bytes. The first four make the key
(pv.cache); the code is stored with the answer and compared with the tree on every hit (a read
and a hash per file), so an edit to any bound file, or a module now loading from elsewhere,
recomputes. On a repository with megabytes of evidence
this skips reading hundreds of records and the lifecycle computation on every `pv validate`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pv.diagnostics import Diagnostic, Severity

ALGORITHM = "declared-status-1"


class _Recording:
    """A pv.codebind.TreeDigests that notes everything a record's code was judged by: the digest
    of each module an older record names (`modules`), and for a record of executed units the file
    each module loads now and its bytes' sha256 (`files`), which decide pv.codeunits' answer."""

    def __init__(self, tree: Any):
        self.tree = tree
        self.modules: dict[str, str | None] = {}
        self.files: dict[tuple[str, str | None], list] = {}
        self._units: Any = None

    def file_state(self, module: str, origin: str | None) -> list:
        """[the file `module` loads now (from `origin`'s path entry), sha256 of its bytes]."""
        if self._units is None:
            from pv.codeunits import UnitTree

            self._units = UnitTree(self.tree.roots[0], self.tree.roots[1:])
        path = self._units.file_of(module, origin)
        if path is None:
            return [None, None]
        try:
            return [str(path), hashlib.sha256(Path(path).read_bytes()).hexdigest()]
        except OSError:
            return [str(path), None]

    def digest(self, module: str) -> str | None:
        self.modules[module] = self.tree.digest(module)
        return self.modules[module]

    def changes(self, recorded: Any) -> tuple[str, ...]:
        for module in sorted(recorded or {}):
            self.digest(module)
        return self.tree.changes(recorded)

    def record_changes(self, record: Any) -> tuple[str, ...]:
        executed = getattr(record, "executed_code", None)
        if executed is None:
            self.changes(getattr(record, "code_digests", None))
        else:
            origins = getattr(record, "code_origins", None) or {}
            for module in executed:
                self.files[(module, origins.get(module))] = self.file_state(module, origins.get(module))
        return self.tree.record_changes(record)


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
    recording = _Recording(tree)
    if (isinstance(found, dict) and isinstance(found.get("modules"), dict) and isinstance(found.get("files"), list)
            and isinstance(found.get("diagnostics"), list)):
        if (all(tree.digest(m) == d for m, d in found["modules"].items())
                and all(isinstance(row, list) and len(row) == 4 and recording.file_state(row[0], row[1]) == row[2:]
                        for row in found["files"])):
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
    out = lifecycle.declared_status_diagnostics(claiming, records, recording, workspace.subject_param)
    tree.save()
    if _ledger_digest(Path(workspace.ledger)) == parts[2]:  # not appended to meanwhile
        store.put(key, {"modules": recording.modules,
                        "files": [[module, origin, *state] for (module, origin), state in recording.files.items()],
                        "diagnostics": [d.to_json() for d in out]})
        store.save()
    return out
