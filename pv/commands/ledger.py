"""`pv ledger check|show|merge`: inspect, verify and merge evidence ledgers.

    pv ledger check [LEDGER]                     torn / malformed / duplicate lines: exit 1
    pv ledger show [--falsifier ID] [--last N]   the latest records as a table
    pv ledger merge FILE... [--allow-stale]      add another machine's records (append only)

`merge` is idempotent (records are deduplicated by record_id) and never rewrites an existing
line. It refuses, listing them, records whose falsifier_sha256 is not the current definition
of their falsifier (evidence about a definition that no longer exists), unless --allow-stale,
and any input with a torn or malformed line, a time that is not ISO 8601 UTC, or a date in the
future (more than CLOCK_SKEW ahead). Merged records carry `merged_from` (source file name, its
sha256, the merge time) and go after every record already there: the ledger's append order,
not `time_utc`, decides which record is the latest.

`check` exits 1 for torn, malformed, garbage (too deeply nested) or duplicate lines, records
dated in the future, and orphans: records for a falsifier or contract that does not exist.
"""

from __future__ import annotations

import datetime
import difflib
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import click

from pv.commands import open_workspace
from pv.config import Workspace


def _workspace() -> Workspace:
    return open_workspace()


def _ledger_path(workspace: Workspace, given: str | None, *, must_exist: bool = False) -> Path:
    """The ledger named on the command line (else the project's). A named file that is missing
    (to read: a typo, not "no evidence yet") or is not a regular file (a FIFO would block the
    read forever) is a usage error."""
    if not given:
        return workspace.ledger
    path = Path(given).resolve()
    if must_exist and not path.exists():
        raise click.UsageError(f"{given}: no such ledger file")
    if path.exists() and not path.is_file():
        raise click.UsageError(f"{given} is not a regular file; name a JSON Lines ledger file")
    return path


def duplicate_ids(path: Path) -> list[tuple[int, str, int]]:
    """(line, record_id, first line) for every record_id seen before in the file."""
    first: dict[str, int] = {}
    dups = []
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    from pv.ledger import parse_line

    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            rid = parse_line(raw).get("record_id")
        except (ValueError, AttributeError, RecursionError):
            continue
        if not isinstance(rid, str):
            continue
        if rid in first:
            dups.append((number, rid, first[rid]))
        else:
            first[rid] = number
    return dups


def _contracts(workspace: Workspace) -> tuple[list[Any], list[str]]:
    """The contracts that load, and the files that do not."""
    from pv.loader import load_contract

    contracts, broken = [], []
    for path in workspace.contract_files():
        loaded, _ = load_contract(path, workspace.rel(path))
        if loaded is None or loaded.contract is None:
            broken.append(workspace.rel(path))
        else:
            contracts.append(loaded.contract)
    return contracts, broken


def current_definitions(workspace: Workspace) -> tuple[dict[str, set[str]], list[str]]:
    """falsifier id -> its current definition hashes (the falsifier's own, and one per subject
    cell: a record of a cell carries that cell's hash), and the contract files that failed to load."""
    contracts, broken = _contracts(workspace)
    current = {f.id: {f.definition_sha256(), *(f.definition_sha256(s, workspace.subject_param) for s in f.subjects or ())}
               for c in contracts for f in c.falsification_tests}
    return current, broken


# A clock may run a little ahead of another; more than this is a record from the future.
CLOCK_SKEW = datetime.timedelta(minutes=5)


def from_the_future(record: Any, now: datetime.datetime) -> bool:
    from pv.ledger import parse_time

    return parse_time(record.time_utc) > now + CLOCK_SKEW


@click.group(name="ledger")
def command() -> None:
    """Inspect, check and merge evidence ledgers (append-only JSON Lines)."""


@command.command(name="check")
@click.argument("ledger", required=False, type=click.Path(dir_okay=False))
def check_cmd(ledger: str | None) -> None:
    """Report bad lines (exit 1 if any).

    Torn, malformed or too deeply nested lines, duplicate record ids, records dated in the
    future, and orphans (records of a falsifier or contract that no contract has)."""
    from pv import ledger as ledger_mod

    workspace = _workspace()
    path = _ledger_path(workspace, ledger, must_exist=True)
    label = workspace.rel(path)
    if not path.exists():
        click.echo(f"{label}: no ledger yet (no evidence recorded)")
        return
    from pv.lifecycle import orphans

    contents = ledger_mod.read(path)
    problems = [(p.line, p.message) for p in contents.problems]
    problems += [(line, f"duplicate record_id {rid} (first at line {first})")
                 for line, rid, first in duplicate_ids(path) if line not in {p.line for p in contents.problems}]
    now = datetime.datetime.now(datetime.timezone.utc)
    problems += [(line, f"record {r.record_id[:12]} is dated {r.time_utc}, in the future (the ledger's order "
                        "decides which record is latest, but a future date is still false)")
                 for line, r in zip(contents.lines, contents.records) if from_the_future(r, now)]
    contracts, broken = _contracts(workspace)
    for name in broken:
        click.echo(f"warning: {name} does not load (see `pv validate`); records for its falsifiers are not "
                   "checked against it", err=True)
    unknown = orphans(contracts, contents.records, incomplete=bool(broken))
    problems += [(line, f"orphan record: {why} ({r.verdict.value} on {r.device}"
                        f"{', mutant ' + r.mutant if r.mutant else ''}); no dashboard row shows it")
                 for line, r, why in ((contents.lines[i], r, why) for i, r, why in unknown)]
    for line, message in sorted(problems):
        click.echo(f"{label}:{line}: {message}")
    if problems:
        click.echo(f"{label}: {len(problems)} problem(s) in {len(contents.records) + len(contents.problems)} "
                   "line(s). Bad lines are never rewritten by pv; new records go on fresh lines after them. "
                   "Inspect them and, if a line is a torn fragment of a crashed write, remove it by hand "
                   "in a reviewed commit.", err=True)
        sys.exit(1)
    click.echo(f"{label}: ok, {len(contents.records)} record(s)")


@command.command(name="show")
@click.argument("ledger", required=False, type=click.Path(dir_okay=False))
@click.option("--falsifier", "falsifiers", multiple=True, metavar="ID", help="Only this falsifier (repeatable).")
@click.option("--contract", "contracts", multiple=True, metavar="ID", help="Only this contract (repeatable).")
@click.option("--last", type=click.IntRange(0), default=20, show_default=True,
              help="Show the last N matching records (0: all).")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON Lines.")
def show_cmd(ledger: str | None, falsifiers: tuple[str, ...], contracts: tuple[str, ...], last: int,
             as_json: bool) -> None:
    """Show the latest records, oldest first."""
    from pv import ledger as ledger_mod

    workspace = _workspace()
    path = _ledger_path(workspace, ledger, must_exist=True)
    contents = ledger_mod.read(path)
    records = contents.records
    for fid in falsifiers:
        if not any(r.falsifier == fid for r in records):
            near = difflib.get_close_matches(fid, sorted({r.falsifier for r in records}), n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            click.echo(f"no records for falsifier {fid!r}{hint}", err=True)
    if falsifiers:
        records = [r for r in records if r.falsifier in falsifiers]
    if contracts:
        records = [r for r in records if r.contract in contracts]
    matching = len(records)
    if last:
        records = records[-last:]
    if as_json:
        for r in records:
            click.echo(r.to_line().decode().rstrip("\n"))
    else:
        _table(records)
        shown = f"{len(records)} of {matching} matching record(s)" if matching != len(records) else \
            f"{matching} record(s)"
        more = "; --last 0 shows all" if matching > len(records) else ""
        click.echo(f"{workspace.rel(path)}: {shown}{more}")
    if contents.problems:
        click.echo(f"warning: {len(contents.problems)} bad line(s) in the ledger; run `pv ledger check`", err=True)


def _table(records: list[Any]) -> None:
    if not records:
        return
    header = ["TIME (UTC)", "FALSIFIER", "DEVICE", "MUTANT", "VERDICT", "MARGIN", "COMMIT", "RUN"]
    rows = []
    for r in records:
        margin = "-" if r.margin is None else ("0" if r.margin == 0 else f"{r.margin:+.4g}")
        commit = (r.git_commit or "-")[:9] + ("*" if r.git_dirty else "")
        rows.append([r.time_utc[:19].replace("T", " "), r.falsifier, r.device, r.mutant or "-",
                     r.verdict.value, margin, commit, (r.run_id or "-")[:8]])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    click.echo("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def _git_driver(files: tuple[str, ...]) -> None:
    from pv import ledgermerge

    if len(files) != 3:
        raise click.UsageError("--git-driver takes three files: %O %A %B (ancestor, ours, theirs)")
    try:
        ledgermerge.merge_files(*(Path(f) for f in files))
    except ledgermerge.RewrittenHistory as exc:
        click.echo(f"pv ledger merge: {exc}; the ledger is append-only, so a person must decide (left ours "
                   "in place)", err=True)
        sys.exit(1)


def _warn_reordering(existing: list[Any], new: list[Any]) -> None:
    """Merged records go after everything here, so they decide: say so when one is dated
    before the latest local record of the same falsifier x device x mutant."""
    from pv.ledger import parse_time

    latest: dict[tuple[str, str, str | None], datetime.datetime] = {}
    for r in existing:
        latest[(r.falsifier, r.device, r.mutant)] = parse_time(r.time_utc)
    older = [r for r in new if (r.falsifier, r.device, r.mutant) in latest
             and parse_time(r.time_utc) < latest[(r.falsifier, r.device, r.mutant)]]
    if older:
        click.echo(f"note: {len(older)} merged record(s) are dated before the latest record here of the same "
                   "falsifier x device; they are appended after it, and the ledger's order (not the date) "
                   "decides, so they are now the latest evidence", err=True)


@command.command(name="merge")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--into", "into", type=click.Path(dir_okay=False), default=None,
              help="Ledger to append to (default: [tool.pv] ledger).")
@click.option("--allow-stale", is_flag=True,
              help="Also merge records whose falsifier definition has changed since they were made.")
@click.option("--git-driver", is_flag=True,
              help="Act as git's merge driver: FILES are %O %A %B (ancestor, ours, theirs); the union of "
                   "both sides' appended records is written to %A (pv.ledgermerge).")
def merge_cmd(files: tuple[str, ...], into: str | None, allow_stale: bool, git_driver: bool) -> None:
    """Append the records of other ledgers (e.g. the GPU machine's) that are not here yet."""
    from pv import ledger as ledger_mod

    if git_driver:
        _git_driver(files)
        return

    workspace = _workspace()
    target = _ledger_path(workspace, into)
    label = workspace.rel(target)
    existing = ledger_mod.read(target)
    have = {r.record_id for r in existing.records}
    if existing.problems:
        click.echo(f"warning: {label} has {len(existing.problems)} bad line(s) (run `pv ledger check`); "
                   "they are left as they are", err=True)

    incoming = []
    unreadable = []
    now = datetime.datetime.now(datetime.timezone.utc)
    merged_utc = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    for name in files:
        source = Path(name).resolve()
        if source == target.resolve():
            raise click.UsageError(f"{name} is the ledger being merged into")
        if not source.is_file():  # a FIFO would block the read forever
            raise click.UsageError(f"{name} is not a regular file; name a JSON Lines ledger file")
        contents = ledger_mod.read(source)
        unreadable += [f"{name}:{p.line}: {p.message}" for p in contents.problems]
        unreadable += [f"{name}:{line}: record {r.record_id[:12]} is dated {r.time_utc}, in the future "
                       f"(now {merged_utc})" for line, r in zip(contents.lines, contents.records)
                       if from_the_future(r, now)]
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        # A merged record stays identifiable: which file, which bytes, when. One merged before
        # (it travelled through another ledger) keeps its first origin.
        origin = {"file": source.name, "file_sha256": digest, "merged_utc": merged_utc}
        incoming += [(name, r if r.merged_from else r.model_copy(update={"merged_from": origin}))
                     for r in contents.records]
    if unreadable:
        for line in unreadable:
            click.echo(line, err=True)
        click.echo(f"refusing to merge: {len(unreadable)} bad line(s) in the input (torn, malformed, a time "
                   "that is not ISO 8601 UTC, or a date in the future); nothing was written. Fix or remove "
                   "them first (`pv ledger check FILE`).", err=True)
        sys.exit(1)

    new, seen, already = [], set(have), 0
    for name, record in incoming:
        if record.record_id in seen:
            already += 1
            continue
        seen.add(record.record_id)
        new.append((name, record))

    current, broken = current_definitions(workspace)
    for path in broken:
        click.echo(f"warning: {path} does not load; its falsifiers count as unknown (see `pv validate`)", err=True)
    stale = [(n, r) for n, r in new if r.falsifier_sha256 not in current.get(r.falsifier, set())]
    if stale and not allow_stale:
        for name, r in stale:
            why = "no such falsifier now" if r.falsifier not in current else "definition changed since"
            click.echo(f"{name}: {r.falsifier} {r.device} {r.verdict.value} {r.time_utc} "
                       f"sha256 {r.falsifier_sha256[:12]}: {why}", err=True)
        click.echo(f"refusing to merge: {len(stale)} record(s) match no current falsifier definition; nothing "
                   "was written. Re-run those falsifiers, or pass --allow-stale to keep them as STALE evidence.",
                   err=True)
        sys.exit(1)
    _warn_reordering(existing.records, [r for _, r in new])
    written = ledger_mod.append(target, [r for _, r in new])
    stale_note = f", {len(stale)} of them stale" if stale else ""
    click.echo(f"merged {written} new record(s) into {label}{stale_note}; {already} already present")
