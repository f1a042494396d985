"""Mutation results: an append-only JSON Lines file, the marked-equivalent mutants, the scores.

The results file (default `evidence/mutation.jsonl`, beside the ledger; `pv mutate --results`)
is separate from the ledger on purpose: a mutant's run is evidence about the *falsifiers'*
power, never about the runtime, so it must not reach the lifecycle, whose input is the ledger.
One line per finished mutant (`kind: "mutant"`) or per baseline falsifier (`kind: "baseline"`),
appended under an exclusive lock with one `write`, so parallel workers and a killed run never
tear each other's lines (a torn last line is skipped and counted).

The latest line for a mutant id decides, and only while it is *fresh*: its module's source
digest is today's (pv.codebind's syntax-tree digest: comments and formatting do not count) and
the falsifiers that judged it are still defined as they were (`suite`, a digest of their ids and
definition hashes). A KILLED line stays fresh while the module and its killer are unchanged.
A rerun skips the fresh ones (resume), so an edit to the code or a new falsifier re-opens
exactly the mutants it concerns.

Equivalent mutants (a change no test can observe: `x * 1.0` -> `x / 1.0`) are marked by hand in
a TOML file (default `evidence/equivalent-mutants.toml`, `--equivalents`):

    [mutants.3fa2b1c9d0e1]
    reason = "rows are normalised again two lines later: the scale cannot show"
    where = "pvlab/runtime/kernels.py:128"   # optional, for the reader

and are left out of every score (shown apart, with their reasons).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

KILLED, SURVIVED, TIMEOUT, NOT_APPLIED, ERROR = "KILLED", "SURVIVED", "TIMEOUT", "NOT_APPLIED", "ERROR"
RESULTS = (KILLED, SURVIVED, TIMEOUT, NOT_APPLIED, ERROR)
RESULTS_FORMAT = 1


class ResultsError(Exception):
    """The results or equivalents file cannot be read or written (the message says which, and why)."""


def suite_digest(falsifiers: Iterable[tuple[str, str]]) -> str:
    """A digest of the falsifiers that judge a mutant: (id, definition hash) pairs."""
    text = "\n".join(f"{fid}\0{sha}" for fid, sha in sorted(set(falsifiers)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_writable(path: Path) -> None:
    """Refuse, before anything runs, a results path that cannot be appended to."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        os.close(fd)
    except OSError as exc:
        raise ResultsError(f"cannot write the mutation results to {path}: {exc.strerror or exc}; "
                           "free space or fix permissions, or pass --results PATH") from None


def append(path: Path, records: Iterable[dict[str, Any]]) -> None:
    payload = b"".join(json.dumps(r, sort_keys=True, ensure_ascii=False).encode() + b"\n" for r in records)
    if not payload:
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        raise ResultsError(f"cannot write the mutation results to {path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            payload = b"\n" + payload  # a killed writer left half a line: keep it apart
        written = 0
        while written < len(payload):
            written += os.write(fd, payload[written:])
        os.fsync(fd)
    except OSError as exc:
        raise ResultsError(f"cannot write the mutation results to {path}: {exc.strerror or exc}; "
                           "the results written before are kept and a rerun resumes after them") from None
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@dataclass
class Results:
    mutants: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> latest mutant line
    baseline: dict[str, dict[str, Any]] = field(default_factory=dict)  # falsifier -> latest baseline line
    torn: int = 0  # lines that are not JSON (a write cut short)


def read(path: Path) -> Results:
    out = Results()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return out
    except OSError as exc:
        raise ResultsError(f"cannot read the mutation results {path}: {exc.strerror or exc}") from None
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            out.torn += 1
            continue
        if not isinstance(line, dict):
            out.torn += 1
        elif line.get("kind") == "mutant" and isinstance(line.get("id"), str) and line.get("result") in RESULTS:
            out.mutants[line["id"]] = line
        elif line.get("kind") == "baseline" and isinstance(line.get("falsifier"), str):
            out.baseline[line["falsifier"]] = line
        else:
            out.torn += 1
    return out


def definition_of(falsifier: Any, subject_param: str) -> str:
    """A falsifier's definition as a mutant's line records it (`definitions`): its definition hash,
    one per subject."""
    return "+".join(falsifier.definition_sha256(s, subject_param) for s in (falsifier.subjects or [None]))


def killer_unchanged(line: dict[str, Any], definitions: dict[str, str]) -> bool:
    """Whether the falsifier that killed a KILLED line is still defined as it was when it killed."""
    killer = line.get("killed_by")
    return bool(killer) and definitions.get(killer) is not None and \
        definitions.get(killer) == (line.get("definitions") or {}).get(killer)


def is_fresh(line: dict[str, Any], module_digest: str | None, suite: str, definitions: dict[str, str]) -> bool:
    """Whether a recorded result still holds for today's code and falsifiers."""
    if module_digest is None or line.get("module_digest") != module_digest:
        return False
    if line.get("result") == KILLED:
        return killer_unchanged(line, definitions)
    return line.get("suite") == suite


# --- equivalent mutants ------------------------------------------------------------------------


def read_equivalents(path: Path) -> dict[str, str]:
    """mutant id -> reason. A missing file is no marks; a malformed one is an error naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"cannot read the equivalent mutants {path}: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ResultsError(f"{path}: not valid TOML: {exc}") from None
    table = data.get("mutants", {})
    unknown = sorted(set(data) - {"mutants"})
    if unknown or not isinstance(table, dict):
        raise ResultsError(f"{path}: expected only [mutants.<id>] tables (each with a `reason`), "
                           f"found {', '.join(unknown) or type(table).__name__}")
    out = {}
    for mutant_id, entry in table.items():
        reason = entry.get("reason") if isinstance(entry, dict) else None
        if not isinstance(reason, str) or not reason.strip():
            raise ResultsError(f"{path}: [mutants.{mutant_id}] needs a non-empty `reason` saying why no test "
                               "can tell the mutant from the original")
        out[mutant_id] = reason.strip()
    return out


# --- scores ------------------------------------------------------------------------------------


@dataclass
class Tally:
    counts: dict[str, int] = field(default_factory=lambda: {r: 0 for r in RESULTS})
    equivalent: int = 0

    def add(self, result: str, equivalent: bool) -> None:
        if equivalent:
            self.equivalent += 1
        else:
            self.counts[result] += 1

    @property
    def judged(self) -> int:
        """Killed + survived: a timeout, an error or a mutant not applied is not judged."""
        return self.counts[KILLED] + self.counts[SURVIVED]

    @property
    def score(self) -> float | None:
        return self.counts[KILLED] / self.judged if self.judged else None

    def line(self) -> str:
        c = self.counts
        score = f"{100 * self.score:.1f}%" if self.score is not None else "—"
        return (f"{c[KILLED]}/{self.judged} killed ({score}); timeout {c[TIMEOUT]}, error {c[ERROR]}, "
                f"not applied {c[NOT_APPLIED]}, equivalent {self.equivalent}")


def tallies(lines: Iterable[dict[str, Any]], equivalents: dict[str, str], key: str) -> dict[str, Tally]:
    """A Tally per value of `key` ("module", or "contracts": one line counts for each contract)."""
    out: dict[str, Tally] = {}
    for line in lines:
        values = line.get(key) or []
        for value in values if isinstance(values, list) else [values]:
            out.setdefault(value, Tally()).add(line["result"], line["id"] in equivalents)
    return dict(sorted(out.items()))
