"""The ledger's records of a few contracts, without decoding the whole ledger again.

PV501 judges a contract by its own records (pv.lifecycle groups them by contract and falsifier),
but which lines are records at all is decided over the whole ledger: a line that repeats an
earlier record is left out whatever contract it names, a malformed line is no record. After one
contract is edited, `pv validate` judges that contract again, and decoding and validating the
whole ledger (19 MB, thousands of records) for it was most of the run.

So what reading the whole ledger decided is remembered under the sha256 of its bytes: for each
contract, where each of its kept records lies (its position among the kept records, and the
line's byte span). A later run on the same bytes decodes and validates only the lines of the
contracts it judges, with the function the full read uses (pv.ledger.parse_record): the same
records at the same positions, so pv.lifecycle sees the groups a full read gives. Any doubt
(another byte of the ledger, another pv or pydantic, an entry that does not read back whole, a
line that is not the record the entry says) is a miss: the whole ledger is read, and the index
written again.

Where: `<root>/.pv-cache/pv/ledger-index.json`, one entry (the ledger changes by appends, and
an index of an older ledger is never asked again), signed and written like every pv cache
(pv.cache); `PV_NO_CACHE=1` reads and writes nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

from pv import cache

INDEX_VERSION = "ledger-index-1"
INDEX_FILE = cache.CACHE_DIR / "ledger-index.json"

Groups = dict  # (contract id, falsifier id) -> [(position among the kept records, LedgerRecord)]


def _version() -> str:
    """What decides which lines are records: pv's code and the validator it uses."""
    import pydantic

    return "|".join((INDEX_VERSION, cache.pv_source_digest(), f"pydantic={pydantic.VERSION}",
                     f"py{sys.version_info[0]}.{sys.version_info[1]}"))


def index_of(data: bytes, contents: Any) -> dict[str, list[list[int]]]:
    """contract id -> [[position, start, end]] of its kept records, from pv.ledger.parse(data)."""
    starts = [0]
    for line in data.split(b"\n"):
        starts.append(starts[-1] + len(line) + 1)
    out: dict[str, list[list[int]]] = {}
    for position, (record, number) in enumerate(zip(contents.records, contents.lines)):
        start, end = starts[number - 1], starts[number] - 1  # the line, without its newline
        out.setdefault(record.contract, []).append([position, start, end])
    return out


def _read_index(root: Path, key: str) -> dict[str, Any] | None:
    try:
        body = cache.verified((Path(root) / INDEX_FILE).read_bytes())
        found = json.loads(body) if body is not None else None
    except (OSError, ValueError, RecursionError):
        return None
    if not (isinstance(found, dict) and found.get("key") == key and found.get("version") == _version()):
        return None
    contracts = found.get("contracts")
    return contracts if isinstance(contracts, dict) else None


def _write_index(root: Path, key: str, index: dict[str, list[list[int]]]) -> None:
    signed = cache.sign(json.dumps({"version": _version(), "key": key, "contracts": index},
                                   separators=(",", ":")).encode())
    if signed is None:
        return
    try:
        from pv.atomic import write_bytes, write_text

        path = Path(root) / INDEX_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        ignore = path.parent / ".gitignore"
        if not ignore.exists():
            write_text(ignore, "# pv's cache of decided facts (pv/cache.py); safe to delete\n*\n", durable=False)
        write_bytes(path, signed, durable=False)
    except OSError:
        pass


def _from_index(read: Callable[[int, int], bytes], size: int, index: dict[str, Any],
                contracts: Iterable[str]) -> Groups:
    """The groups of `contracts`, each of their lines read (`read(start, end)`: those bytes of the
    ledger), decoded and validated; ValueError (a miss) when the index does not fit the ledger."""
    from pv.ledger import parse_record

    groups: Groups = {}
    for contract in dict.fromkeys(contracts):
        spans = index.get(contract, [])
        if not isinstance(spans, list):
            raise ValueError("index")
        for span in spans:
            position, start, end = span  # a malformed entry raises ValueError or TypeError
            if not (type(position) is int and type(start) is int and type(end) is int and 0 <= start <= end <= size):
                raise ValueError("span")
            first = max(start - 1, 0)
            raw = read(first, min(end + 1, size))  # with the newlines around it: a whole line, or a miss
            line, after = raw[start - first:end - first], raw[end - first:]
            if (start and raw[:1] != b"\n") or after not in (b"\n", b""):
                raise ValueError("not a line")
            record = parse_record(line)
            if record.contract != contract:
                raise ValueError("another contract's record")
            groups.setdefault((record.contract, record.falsifier), []).append((position, record))
    return groups


def groups(root: Path | str, ledger_path: Path | str, contracts: Iterable[str]) -> Groups:
    """The ledger's records grouped as pv.lifecycle.group_records groups them, holding (at least)
    every group of `contracts`. Where the run has hashed the ledger already (pv.replay checks it
    as an input of every contract's stored share), a remembered index needs only the lines of
    `contracts` read."""
    from pv import ledger
    from pv.lifecycle import group_records

    path = Path(ledger_path)
    if not cache.enabled():
        return group_records(ledger.read(path).records)
    if not path.exists():
        return {}
    from pv import readlog

    with open(path, "rb") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_SH)
        try:
            st = os.fstat(handle.fileno())
            key = readlog.digest_of_read(str(path), st)
            index = None if key is None else _read_index(Path(root), key)
            if index is not None:
                fd = handle.fileno()
                try:
                    return _from_index(lambda a, b: os.pread(fd, b - a, a), st.st_size, index, contracts)
                except Exception:  # noqa: BLE001 - an entry that does not fit is a miss, never an answer
                    pass
            data = handle.read()
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    key = readlog.digest_of_read(str(path), st, data)
    index = _read_index(Path(root), key)
    if index is not None:
        try:
            return _from_index(lambda a, b: data[a:b], len(data), index, contracts)
        except Exception:  # noqa: BLE001
            pass
    contents = ledger.parse(data)
    _write_index(Path(root), key, index_of(data, contents))
    return group_records(contents.records)
