"""The evidence ledger: append-only JSON Lines, one record per falsifier x device x run.

Writers take an exclusive `flock` on the ledger file and append whole lines with a single
`write`, so concurrent writers (pytest-xdist workers, parallel `pv run`s) never interleave.
A crash can still leave a torn last line; the next writer starts on a fresh line so the torn
fragment stays isolated, and every reader reports it (with its line number) instead of
dropping it silently or letting it corrupt the records around it. A line nested deeper than
any record (MAX_DEPTH) is reported as garbage before the recursive JSON decoder sees it.

The ledger's append order is the order of the evidence: the last record appended is the
latest. `time_utc` is shown, validated (strict ISO 8601 UTC), and never used to order.
"""

from __future__ import annotations

import datetime
import fcntl
import itertools
import json
import os
import re
import uuid
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Iterable

from pydantic import BaseModel, ConfigDict, Field, field_validator

# 2: records may carry code_digests, git_commit_source and merged_from; 3: subject and
# subject_digest; 4: executed_code, code_origins and binding_problems; 5: test_node, test_sha256,
# judged_params, judged_tolerance; 6: runtime and runtime_version; 7: binding; 8: test_templates;
# 9: tolerance_table and session_code; 10: planted_at, runtime_binding (all optional, so older
# lines still read).
LEDGER_SCHEMA_VERSION = 10
# A record is a flat object with a few small mappings; anything nested deeper is not ours.
MAX_DEPTH = 16
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")


def parse_time(text: str) -> datetime.datetime:
    """A record's `time_utc` (ISO 8601 UTC with a Z, e.g. 2026-11-22T03:01:02.123456Z).

    Strict: "yesterday", "0", a date without a time or a zone is a ValueError, never 1970."""
    return _naive_time(text).replace(tzinfo=datetime.timezone.utc)


def _naive_time(text: str) -> datetime.datetime:
    """parse_time without its zone: what validating a record needs (every record of a ledger
    is validated, and attaching the zone was a third of the check)."""
    if not isinstance(text, str) or not _TIME.match(text):
        raise ValueError(f"time_utc {text!r} is not ISO 8601 UTC like 2026-11-22T03:01:02.123456Z")
    return datetime.datetime.fromisoformat(text[:-1])


class Verdict(str, Enum):
    PASS = "PASS"  # the prediction held
    FAIL = "FAIL"  # the prediction was falsified (under a mutant: the mutant was killed)
    ERROR = "ERROR"  # the check could not execute; counts as a failure, never a discharge
    SKIP = "SKIP"  # the device was absent; never a discharge


class LedgerRecord(BaseModel):
    """One piece of evidence. Field names are the ledger's on-disk format."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = LEDGER_SCHEMA_VERSION
    record_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    run_id: str | None = None  # groups the records of one `pv run` / pytest session
    contract: str
    contract_version: str
    falsifier: str
    falsifier_sha256: str
    device: str  # cpu | cuda
    device_name: str | None = None  # e.g. "NVIDIA H100 80GB HBM3", or the CPU model
    mutant: str | None = None  # a planted bug active during the run (pv strength)
    # The subject (model and data) the check drove: a contract's subject name, `path:<dir>` for a
    # user's checkpoint (pv.subjects), None for a falsifier without subjects.
    subject: str | None = None
    subject_digest: str | None = None  # sha256 of a path subject's config.json + weight headers
    # The training runtime the check drove ([tool.pv] runtimes name) and what its adapter said it
    # was (e.g. "transformers 4.57.1"); None on records of falsifiers without `runtimes:` and on
    # records older than schema 4 (those count as the project's default runtime: pv.lifecycle).
    runtime: str | None = None
    runtime_version: str | None = None
    # The adapter the runtime's name was bound to when it ran (`[tool.pv] runtimes`, "module:factory").
    # None: no runtime, or a record made before schema 10.
    runtime_binding: str | None = None
    verdict: Verdict
    observations: dict[str, Any] = Field(default_factory=dict)
    prediction: str
    margin: float | None = None
    message: str = ""  # why it failed, errored or skipped
    duration_s: float
    seed: int | None = None
    git_commit: str | None = None
    # Where git_commit came from: "PV_GIT_COMMIT" (said by whoever ran it), "git" (asked the
    # repository holding the workspace); None when unknown.
    git_commit_source: str | None = None
    git_dirty: bool | None = None
    versions: dict[str, str | None] = Field(default_factory=dict)  # python, torch, cuda, pv
    host: str | None = None
    time_utc: str  # ISO 8601, e.g. 2026-11-22T03:01:02Z; shown, never used to order records
    # The code the check exercised: module name -> syntax-tree digest (pv.codebind). None on
    # records made before pv bound evidence to code: those are stale.
    code_digests: dict[str, str] | None = None
    # The code the check executed (pv.execution): module -> {function qualname or "<module>" ->
    # digest (pv.codeunits)}; the file each module loaded from (workspace-relative, else
    # absolute); and what loaded or ran instead of the workspace's source (never fresh).
    # None on records made before: those keep the module rule of `code_digests`.
    executed_code: dict[str, dict[str, str]] | None = None
    code_origins: dict[str, str] | None = None
    binding_problems: list[str] | None = None
    # How the record is bound to code: None, to the units in executed_code (or, on records made
    # before, to code_digests' modules); "modules": the check observes timings and ran without the
    # line tracer (pv.timing), so executed_code holds every unit of the modules it can run, not
    # those that ran (pv.untracedbind; records made before that hold code_digests: whole modules).
    binding: str | None = None
    # Set by `pv ledger merge`: which file the record came from and when it was merged.
    merged_from: dict[str, str] | None = None
    # What ran (pv.identity): the test (`<path from the workspace root>::<pytest name>`), the
    # digest of that test as collected, and the params and tolerance numbers the harness judged
    # (`prediction` above is the prediction it judged). None on older records: they never count.
    # test_templates: the sorted digests of the distinct templates of the module's tests as it
    # ran; with it, test_sha256 is the "test4" digest (None on records made before: "test3" or older).
    test_node: str | None = None
    test_sha256: str | None = None
    test_templates: list[str] | None = None
    judged_params: dict[str, Any] | None = None
    judged_tolerance: dict[str, Any] | None = None
    # The whole tolerance table the check received (pv's per-dtype defaults merged with the
    # override; pv.tolerance): None when the check takes no `tolerance`, and on records made before.
    tolerance_table: dict[str, dict[str, float]] | None = None
    # Where the planted bug of a record under one changed the bound packages' modules on entry
    # (`module:attribute`; pv.mutation.last_seams). None: not told (records before schema 10).
    planted_at: list[str] | None = None
    # The workspace's other code the session loaded (pv.sessionbind): path from the workspace root
    # -> digest (a conftest.py, a parent package's __init__.py). None on records made before.
    session_code: dict[str, str] | None = None

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        # A record of a version this pv does not know (a newer pv wrote it, or a hand edit) has
        # fields this pv cannot read the meaning of: it is a bad line, never silent evidence.
        if not 1 <= value <= LEDGER_SCHEMA_VERSION:
            raise ValueError(f"ledger schema version {value} is not one this pv reads (1 to {LEDGER_SCHEMA_VERSION}); "
                             "a newer pv wrote it? upgrade pv")
        return value

    @field_validator("time_utc")
    @classmethod
    def _strict_time(cls, value: str) -> str:
        _naive_time(value)  # parse_time's check (a ValueError with its message), without the zone
        return value

    def to_line(self) -> bytes:
        return (json.dumps(self.model_dump(mode="json"), sort_keys=True, allow_nan=False) + "\n").encode()


@dataclass(frozen=True)
class LedgerProblem:
    line: int
    message: str


@dataclass
class LedgerContents:
    records: list[LedgerRecord] = field(default_factory=list)  # in ledger (append) order
    problems: list[LedgerProblem] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # the line number of each record


# How deep a value inside a record may nest: the record's own object and the field's mapping
# take two levels, so whatever pv writes reads back under MAX_DEPTH (never dropped as garbage).
VALUE_DEPTH = MAX_DEPTH - 2


def _sanitize(value: Any, depth: int = 1) -> Any:
    """JSON has no NaN/Inf: keep them as strings so the evidence is not lost. A container
    nested deeper than VALUE_DEPTH is kept as its text."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return repr(value)
    if isinstance(value, (dict, list, tuple)) and depth > VALUE_DEPTH:
        text = repr(value)
        return text if len(text) <= 1_000 else text[:1_000] + "…"
    if isinstance(value, dict):
        return {str(k): _sanitize(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sanitize(v, depth + 1) for v in value]
    return value


def make_record(**fields: Any) -> LedgerRecord:
    """Build a record, turning non-finite observations and margins into JSON-safe values."""
    for name in ("observations", "judged_params", "judged_tolerance"):
        if fields.get(name) is not None:
            fields[name] = _sanitize(fields[name])
    margin = fields.get("margin")
    if isinstance(margin, float) and (margin != margin or abs(margin) == float("inf")):
        fields["margin"] = None
    return LedgerRecord(**fields)


def append(path: Path | str, records: Iterable[LedgerRecord]) -> int:
    """Append records atomically with respect to other writers. Returns how many."""
    payload = b"".join(r.to_line() for r in records)
    if not payload:
        return 0
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            # A writer crashed mid-line. Start on a fresh line: the fragment stays a single
            # reported problem instead of swallowing our first record.
            payload = b"\n" + payload
        written = 0
        while written < len(payload):
            written += os.write(fd, payload[written:])
        os.fsync(fd)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    return payload.count(b"\n") - (1 if payload.startswith(b"\n") else 0)


class TooDeep(ValueError):
    """A line nested deeper than any record is: garbage, reported instead of parsed."""


# A JSON string (escapes included), or an unterminated one running to the end of the line.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\[\s\S][^"\\]*)*(?:"|\\?\Z)')
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_BRACKET_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 / -1 as signed bytes


def _depth(raw: bytes) -> int:
    """The deepest bracket nesting of a JSON text, counted without recursion (strings skipped).
    At C speed: strings blanked by one regex, then a running sum over the brackets alone (a
    ledger of a few thousand records has hundreds of lines long enough to be counted)."""
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKET).translate(_BRACKET_STEP)
    return max(0, max(itertools.accumulate(memoryview(brackets).cast("b")), default=0))


# A line with at most this many brackets (in strings or not) is decoded before its depth is
# measured: the decoder recurses at most this deep, far inside any stack, and measuring the
# decoded containers costs a tenth of blanking the line's strings to count its brackets (which
# was a third of reading this repository's ledger). A line with more is measured first.
DECODE_FIRST_BRACKETS = 512


def _nests_deeper(value: Any, limit: int) -> bool:
    """Whether decoded JSON nests containers deeper than `limit`: its text's bracket depth."""
    stack = [(value, 1)] if type(value) in (dict, list) else []
    while stack:
        container, depth = stack.pop()
        if depth > limit:
            return True
        for item in (container.values() if type(container) is dict else container):
            if type(item) is dict or type(item) is list:  # the only containers json.loads makes
                stack.append((item, depth + 1))
    return False


def parse_line(raw: bytes) -> Any:
    """One ledger line as JSON, refusing nesting deeper than MAX_DEPTH before anything after the
    decoder sees it; a line with more brackets than DECODE_FIRST_BRACKETS is refused before the
    recursive decoder (and everything after it) can exhaust the stack. A line that is too deep
    is TooDeep whether or not it is also broken JSON."""
    brackets = raw.count(b"[") + raw.count(b"{")
    if brackets <= MAX_DEPTH:
        return json.loads(raw)
    # (UTF-8 only: json.loads also reads UTF-16 and UTF-32, whose bytes _depth does not read alike)
    if brackets <= DECODE_FIRST_BRACKETS and raw[:2] not in (b"\xff\xfe", b"\xfe\xff") and b"\x00" not in raw[:4]:
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON (or not UTF-8): too deep says more, if it is
            if _depth(raw) > MAX_DEPTH:
                raise TooDeep(f"nested more than {MAX_DEPTH} levels deep; no record is") from None
            raise
        if _nests_deeper(value, MAX_DEPTH):
            raise TooDeep(f"nested more than {MAX_DEPTH} levels deep; no record is")
        return value
    if _depth(raw) > MAX_DEPTH:
        raise TooDeep(f"nested more than {MAX_DEPTH} levels deep; no record is")
    return json.loads(raw)


def _content(record: LedgerRecord) -> str:
    """Everything in a record but its id (one run's record of one cell at one time, with its
    content): what no two records of one ledger share, beside the record id."""
    content = record.model_dump(mode="json", exclude={"record_id", "merged_from"})
    return json.dumps(content, sort_keys=True)


def _outline(record: LedgerRecord) -> tuple:
    """A few text fields of the content: records of equal content have equal outlines, so only
    records whose outlines match need their whole content compared (dumping every record to
    JSON was most of reading a ledger of thousands)."""
    return (record.contract, record.falsifier, record.device, record.time_utc, record.run_id, record.falsifier_sha256)


def read(path: Path | str) -> LedgerContents:
    """Every well-formed record, and a problem for every torn, malformed or replayed line (a copy
    of an earlier record appended again is reported and left out: it never decides a cell)."""
    path = Path(path)
    if not path.exists():
        return LedgerContents()
    with open(path, "rb") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_SH)  # never half of an append
        try:
            data = handle.read()
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    return parse(data)


def parse_record(raw: bytes) -> LedgerRecord:
    """One line as a record: what `parse` makes of a line, before it asks whether it is a copy."""
    record = _read_at_once(raw)
    return record if record is not None else LedgerRecord.model_validate(parse_line(raw))


# The fields whose values may nest without bound (dict[str, Any]); every other field's type fixes
# how deep a value it accepts can nest (two levels at most), far inside MAX_DEPTH.
_FREE_FIELDS = ("observations", "judged_params", "judged_tolerance")


def _read_at_once(raw: bytes) -> LedgerRecord | None:
    """The record pydantic reads straight from the line's bytes (its JSON parser, jiter, in Rust:
    decoding with json and validating the objects it made was most of reading a ledger), or None
    where parse_line and model_validate must decide, and say why in their words. Where it reads a
    record, it is theirs: jiter refuses every text json.loads refuses (control characters, bad
    numbers, trailing commas, invalid UTF-8, NUL; it also refuses some that json.loads reads, a
    BOM, a lone surrogate: those go the careful way) and reads the same values from the rest,
    types and key order included (tests/test_ledger_reading.py compares both on every line of
    this repository's ledger, on edge cases and on damaged lines); and a record that validates
    can nest deeper than MAX_DEPTH only inside its free fields, which are measured here."""
    try:  # no bracket count first: jiter refuses nesting past its limit (200) without exhausting a stack
        record = LedgerRecord.model_validate_json(raw)
    except (ValueError, RecursionError):  # pydantic.ValidationError is a ValueError
        return None
    for name in _FREE_FIELDS:  # the record's own object is one level, the field's value the next
        value = getattr(record, name)
        if value is not None and _nests_deeper(value, MAX_DEPTH - 1):
            return None  # too deep: parse_line says so
    return record


def parse(data: bytes) -> LedgerContents:
    """`read` of a ledger whose bytes are `data`."""
    contents = LedgerContents()
    lines = data.split(b"\n")
    torn_tail = bool(data) and not data.endswith(b"\n")
    seen_ids: dict[str, int] = {}  # record id -> the line of the kept record that has it
    # the kept records by outline: (line, record, its content once computed); kept records never
    # share an id or a content, so at most one of them can match a later line
    seen_outlines: dict[tuple, list[list[Any]]] = {}
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        is_last = number == len(lines)
        try:
            record = parse_record(raw)
            first = seen_ids.get(record.record_id)
            outline = _outline(record)
            if first is None and outline in seen_outlines:
                content = _content(record)
                for kept in seen_outlines[outline]:
                    if kept[2] is None:
                        kept[2] = _content(kept[1])
                    if kept[2] == content:
                        first = kept[0]
                        break
            if first is not None:  # a copy of an earlier line appended again: it decides nothing
                contents.problems.append(LedgerProblem(number, f"replayed record: repeats the record of line {first} "
                                                               "(same record id, or same run, time and content); ignored"))
                continue
            seen_ids[record.record_id] = number
            seen_outlines.setdefault(outline, []).append([number, record, None])
            contents.records.append(record)
            contents.lines.append(number)
        except (json.JSONDecodeError, UnicodeDecodeError):
            what = "torn last line (a writer crashed mid-record)" if is_last and torn_tail else "corrupt line (not JSON)"
            contents.problems.append(LedgerProblem(number, what))
        except (TooDeep, RecursionError) as exc:
            contents.problems.append(LedgerProblem(number, f"garbage line ({exc})"))
        except ValueError as exc:  # pydantic.ValidationError
            first = exc.errors()[0] if hasattr(exc, "errors") else {"loc": (), "msg": str(exc)}
            where = ".".join(str(p) for p in first["loc"])
            contents.problems.append(LedgerProblem(number, f"malformed record: {where + ': ' if where else ''}{first['msg']}"))
    return contents
