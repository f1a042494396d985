"""The ledger's latest evidence, without re-reading every line on every run.

`pv validate` (PV501) judges a declared status from the records `pv.lifecycle` picks: in each
cell, the record appended last among those matching the cell's contract, falsifier, subject,
device, mutant and definition hash. Every such pick is "the last record among records selected
by a predicate over (contract, falsifier, subject, device, mutant, falsifier_sha256)", so it
picks the same record from the subset that keeps, for each value of that tuple, only the
line appended last (the last of a union is the last of the per-key lasts). Ledger order is kept.

The ledger is append-only and grows with every run (thousands of lines, megabytes), and parsing
and validating all of it was most of what `pv validate` spent as the evidence grew. So the map
key -> line number of the complete lines is kept in pv.cache under the sha256 of those bytes;
a ledger that starts with the cached bytes only has its new lines read. Any other change (a
merge rewrote it, a line was edited) misses the cache and reads everything again.

Records returned are validated exactly as `pv.ledger.read` validates them; lines it would report
as problems are skipped here too (validation reads only the records).
"""

from __future__ import annotations

import fcntl
import hashlib
from pathlib import Path
from typing import Mapping

from pv.ledger import LedgerRecord, TooDeep, parse_line

ALGORITHM = "ledger-latest-1"


Key = tuple  # (contract, falsifier, subject, device, mutant, falsifier_sha256)


def _key(record: LedgerRecord) -> Key:
    return (record.contract, record.falsifier, record.subject, record.device, record.mutant,
            record.falsifier_sha256)


def _record(raw: bytes) -> LedgerRecord | None:
    """The line's record as pv.ledger.read takes it, or None where read reports a problem."""
    if not raw.strip():
        return None
    try:
        return LedgerRecord.model_validate(parse_line(raw))
    except (ValueError, TooDeep, RecursionError):  # JSON, unicode and pydantic errors are ValueErrors
        return None


def _scan(lines: list[bytes], first_number: int, latest: dict[Key, int]) -> None:
    for offset, raw in enumerate(lines):
        record = _record(raw)
        if record is not None:
            latest[_key(record)] = first_number + offset


Wanted = Mapping[tuple[str, str], tuple[set[str], set[str]]]


def _select(latest: dict[Key, int], wanted: Wanted) -> set[int]:
    """The lines a status of the `wanted` falsifiers can pick. `wanted[(contract, falsifier)]` is
    (its current cell hashes, its declared mutants). Per (contract, falsifier, subject, device,
    mutant) with the mutant None or declared: the last line of all, and the last whose hash is a
    current one. pv.lifecycle takes a cell's fresh record among the current hashes, otherwise
    (stale) the last of all; a subject-less record is placed by its hash, so it too is found
    among the current ones; records under a mutant the falsifier does not declare are unread."""
    last: dict[tuple, int] = {}
    fresh: dict[tuple, int] = {}
    for key, line in latest.items():
        contract, falsifier, subject, device, mutant, sha = key
        if (contract, falsifier) not in wanted:
            continue
        current, mutants = wanted[(contract, falsifier)]
        if mutant is not None and mutant not in mutants:
            continue
        group = (contract, falsifier, subject, device, mutant)
        last[group] = max(line, last.get(group, 0))
        if sha in current:
            fresh[(group, sha)] = max(line, fresh.get((group, sha), 0))
    return set(last.values()) | set(fresh.values())


def latest_records(path: Path | str, root: Path | str | None = None,
                   wanted: Wanted | None = None) -> list[LedgerRecord]:
    """The last record of every (contract, falsifier, subject, device, mutant, definition hash),
    in ledger order. `root`: the workspace whose pv.cache may remember the scan (None: none).
    `wanted`: (contract id, falsifier id) -> (current cell hashes (pv.lifecycle.cell_hashes),
    declared mutants): only the records a status of those falsifiers can pick (see _select)."""
    path = Path(path)
    if not path.exists():
        return []
    with open(path, "rb") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_SH)
        try:
            data = handle.read()
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    end = data.rfind(b"\n") + 1  # the complete lines; a torn tail is read (not cached) below
    complete, tail = data[:end], data[end:]

    store = None
    latest: dict[Key, int] = {}
    start, start_line = 0, 1
    if root is not None:
        from pv.cache import Cache

        store = Cache(root, "ledger-latest", ALGORITHM)
        found = store.get(str(path.resolve()))
        if (isinstance(found, dict) and isinstance(found.get("size"), int) and 0 < found["size"] <= end
                and isinstance(found.get("latest"), list) and isinstance(found.get("lines"), int)
                and found.get("sha256") == hashlib.sha256(complete[: found["size"]]).hexdigest()):
            # stored as [contract, falsifier, subject, device, mutant, sha, line] rows
            latest = {tuple(row[:6]): row[6] for row in found["latest"]
                      if isinstance(row, list) and len(row) == 7 and isinstance(row[6], int)}
            start, start_line = found["size"], found["lines"] + 1

    new_lines = complete[start:].split(b"\n")[:-1] if end > start else []
    _scan(new_lines, start_line, latest)
    line_count = start_line - 1 + len(new_lines)
    if store is not None and end > start:
        store.put(str(path.resolve()), {"size": end, "lines": line_count,
                                        "sha256": hashlib.sha256(complete).hexdigest(),
                                        "latest": [[*key, line] for key, line in latest.items()]})
        store.save()
    if tail:  # a last line without its newline: pv.ledger.read still reads it if it parses
        _scan([tail], line_count + 1, latest)

    all_lines = data.split(b"\n")
    records = []
    numbers = set(latest.values()) if wanted is None else _select(latest, wanted)
    for number in sorted(numbers):
        record = _record(all_lines[number - 1])
        if record is not None:
            records.append(record)
    return records
