"""Merging two branches' ledgers in git: the union of what each appended, no conflict.

    git config merge.pv-ledger.driver "pv ledger merge --git-driver %O %A %B"
    .gitattributes:  evidence/ledger.jsonl merge=pv-ledger

Git calls the driver with the common ancestor's ledger (%O), ours (%A, where the result goes)
and theirs (%B). The ledger is append-only, so each side is the ancestor's lines followed by
what that side appended. The result keeps the common prefix byte for byte, then the records
only one side has and one copy of those both have (same record_id), in an order that does not
depend on which branch merges into which: the two appended runs are interleaved by
(time_utc, record_id) of their records, each side's own order kept (a merge of two lists,
never a sort across a side's records). A line that is not a record (a torn fragment) stays
after the line before it on its side.

A side that changed or removed one of the ancestor's lines rewrote history: the driver leaves
ours in place and exits 1 (git reports a conflict for a person to decide).
"""

from __future__ import annotations

import json
from pathlib import Path

from pv.atomic import write_bytes


class RewrittenHistory(Exception):
    """A side changed or removed a line of the common ancestor's ledger."""


def _lines(data: bytes) -> list[bytes]:
    return [line for line in data.split(b"\n") if line.strip()]


def _key(line: bytes, previous: tuple[str, str, int]) -> tuple[str, str, int]:
    """(time_utc, record_id, 0) of a record line; a non-record line sorts with the line before it."""
    try:
        record = json.loads(line)
        time, rid = record.get("time_utc"), record.get("record_id")
        if isinstance(time, str) and isinstance(rid, str):
            return (time, rid, 0)
    except (ValueError, AttributeError, RecursionError):
        pass
    return (previous[0], previous[1], previous[2] + 1)


def _keyed(lines: list[bytes]) -> list[tuple[tuple[str, str, int], bytes]]:
    out, previous = [], ("", "", 0)
    for line in lines:
        previous = _key(line, previous)
        out.append((previous, line))
    return out


def merge(base: bytes, ours: bytes, theirs: bytes) -> bytes:
    """The merged ledger (see the module doc); RewrittenHistory if a side rewrote the base."""
    common = _lines(base)
    mine, other = _lines(ours), _lines(theirs)
    for side, lines in (("ours", mine), ("theirs", other)):
        if lines[: len(common)] != common:
            raise RewrittenHistory(f"{side} changed or removed a line of the common ancestor's ledger")
    a, b = _keyed(mine[len(common):]), _keyed(other[len(common):])
    merged, seen = list(common), set()
    i = j = 0
    while i < len(a) or j < len(b):
        if j >= len(b) or (i < len(a) and a[i] <= b[j]):
            key, line = a[i]
            i += 1
        else:
            key, line = b[j]
            j += 1
        identity = key[1] if key[2] == 0 else line
        if identity in seen:
            continue
        seen.add(identity)
        merged.append(line)
    return b"".join(line + b"\n" for line in merged)


def merge_files(base: Path, ours: Path, theirs: Path) -> None:
    """The git merge driver: write the merge of the three files to `ours`."""
    result = merge(Path(base).read_bytes(), Path(ours).read_bytes(), Path(theirs).read_bytes())
    write_bytes(Path(ours), result)


ATTRIBUTE = "merge=pv-ledger"
DRIVER_CONFIG = 'git config merge.pv-ledger.driver "pv ledger merge --git-driver %O %A %B"'


def gitattributes_text(existing: str | None, ledger: str = "evidence/ledger.jsonl") -> str | None:
    """.gitattributes with the ledger's merge driver line (existing lines kept); None when it
    already has one for the ledger."""
    line = f"{ledger} {ATTRIBUTE}"
    lines = (existing or "").splitlines()
    if any(l.split()[:1] == [ledger] and ATTRIBUTE in l.split() for l in lines if l.strip()):
        return None
    head = existing or ""
    if head and not head.endswith("\n"):
        head += "\n"
    return head + "# pv: two branches' evidence merges as the union of their records (docs/running.md)\n" + line + "\n"
