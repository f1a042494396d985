"""`pv ledger check|show|merge`: inspect, verify and merge evidence ledgers.

    pv ledger check [LEDGER]                     torn / malformed / duplicate lines: exit 1
    pv ledger show [--falsifier ID] [--last N]   the latest records as a table
    pv ledger merge FILE... [--allow-stale]      add another machine's records (append only)

`merge` is idempotent (records are deduplicated by record_id) and never rewrites an existing
line. It refuses, listing them, records whose falsifier_sha256 is not the current definition
of their falsifier (evidence about a definition that no longer exists), unless --allow-stale.
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Any

import click

from pv.commands import open_workspace
from pv.config import Workspace


def _workspace() -> Workspace:
    return open_workspace()


def _ledger_path(workspace: Workspace, given: str | None) -> Path:
    return Path(given).resolve() if given else workspace.ledger


def duplicate_ids(path: Path) -> list[tuple[int, str, int]]:
    """(line, record_id, first line) for every record_id seen before in the file."""
    first: dict[str, int] = {}
    dups = []
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            rid = json.loads(raw).get("record_id")
        except (ValueError, AttributeError):
            continue
        if not isinstance(rid, str):
            continue
        if rid in first:
            dups.append((number, rid, first[rid]))
        else:
            first[rid] = number
    return dups


def current_definitions(workspace: Workspace) -> tuple[dict[str, str], list[str]]:
    """falsifier id -> current definition_sha256, and the contract files that failed to load."""
    from pv.loader import load_contract

    current: dict[str, str] = {}
    broken: list[str] = []
    for path in workspace.contract_files():
        loaded, problems = load_contract(path, workspace.rel(path))
        if loaded is None or loaded.contract is None:
            broken.append(workspace.rel(path))
            continue
        for f in loaded.contract.falsification_tests:
            current[f.id] = f.definition_sha256()
    return current, broken


@click.group(name="ledger")
def command() -> None:
    """Inspect, check and merge evidence ledgers (append-only JSON Lines)."""


@command.command(name="check")
@click.argument("ledger", required=False, type=click.Path(dir_okay=False))
def check_cmd(ledger: str | None) -> None:
    """Report torn, malformed and duplicate lines (exit 1 if any)."""
    from pv import ledger as ledger_mod

    workspace = _workspace()
    path = _ledger_path(workspace, ledger)
    label = workspace.rel(path)
    if not path.exists():
        click.echo(f"{label}: no ledger yet (no evidence recorded)")
        return
    contents = ledger_mod.read(path)
    problems = [(p.line, p.message) for p in contents.problems]
    problems += [(line, f"duplicate record_id {rid} (first at line {first})")
                 for line, rid, first in duplicate_ids(path)]
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
    path = _ledger_path(workspace, ledger)
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


@command.command(name="merge")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--into", "into", type=click.Path(dir_okay=False), default=None,
              help="Ledger to append to (default: [tool.pv] ledger).")
@click.option("--allow-stale", is_flag=True,
              help="Also merge records whose falsifier definition has changed since they were made.")
def merge_cmd(files: tuple[str, ...], into: str | None, allow_stale: bool) -> None:
    """Append the records of other ledgers (e.g. the GPU machine's) that are not here yet."""
    from pv import ledger as ledger_mod

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
    for name in files:
        source = Path(name).resolve()
        if source == target.resolve():
            raise click.UsageError(f"{name} is the ledger being merged into")
        contents = ledger_mod.read(source)
        unreadable += [f"{name}:{p.line}: {p.message}" for p in contents.problems]
        incoming += [(name, r) for r in contents.records]
    if unreadable:
        for line in unreadable:
            click.echo(line, err=True)
        click.echo(f"refusing to merge: {len(unreadable)} bad line(s) in the input; nothing was written "
                   "(fix or remove them with `pv ledger check FILE` first)", err=True)
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
    stale = [(n, r) for n, r in new if current.get(r.falsifier) != r.falsifier_sha256]
    if stale and not allow_stale:
        for name, r in stale:
            why = "no such falsifier now" if r.falsifier not in current else "definition changed since"
            click.echo(f"{name}: {r.falsifier} {r.device} {r.verdict.value} {r.time_utc} "
                       f"sha256 {r.falsifier_sha256[:12]}: {why}", err=True)
        click.echo(f"refusing to merge: {len(stale)} record(s) match no current falsifier definition; nothing "
                   "was written. Re-run those falsifiers, or pass --allow-stale to keep them as STALE evidence.",
                   err=True)
        sys.exit(1)
    written = ledger_mod.append(target, [r for _, r in new])
    stale_note = f", {len(stale)} of them stale" if stale else ""
    click.echo(f"merged {written} new record(s) into {label}{stale_note}; {already} already present")
