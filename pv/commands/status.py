"""`pv status`: lifecycle status computed from the evidence, and the docs/STATUS.md dashboard.

    pv status                      write docs/STATUS.md ([tool.pv] status_file), print a summary
    pv status --check              exit 1 when docs/STATUS.md differs from what would be written
    pv status --stdout             print the markdown instead of writing it
    pv status --format json        print the computed status as JSON (nothing written)
    pv status --promote [ID...]    set declared statuses from the evidence (pv.promote), then write

The dashboard is a pure function of the contracts and the ledger: no clock, no absolute
paths, everything sorted, so `--check` can run in pre-commit and CI.
"""

from __future__ import annotations

import difflib
import json
import sys

import click

from pv.automutate.report import status_markdown as mutation_section
from pv.commands import pass_workspace
from pv.config import Workspace
from pv.releasegate import ship_blockers
from pv.schema import LifecycleStatus
from pv.statusjson import to_json
from pv.statusmarkdown import render_markdown
from pv.statusreport import (
    COMPUTABLE,
    Report,
    gather,
    open_ship_blocking,
    score,
    stale_rows,
    summary,
)



def render_json(report: Report, ids: set[str] | None = None) -> str:
    data = {
        "ledger": {"path": report.ledger_path,
                   "problems": [{"line": p.line, "message": p.message} for p in report.ledger_problems]},
        "load_failures": [{"path": p, "problem": m} for p, m in report.load_failures],
        "orphans": [{"line": line, "record_id": r.record_id, "falsifier": r.falsifier, "contract": r.contract,
                     "device": r.device, "subject": r.subject, "verdict": r.verdict.value, "why": why} for line, r, why in report.orphans],
        "failures_outside_required_cells": [
            {"contract": d.contract, "falsifier": d.falsifier, "runtime": d.runtime, "subject": d.subject,
             "device": d.device, "verdict": d.record.verdict.value, "record_id": d.record.record_id}
            for d in report.dropped],
        "summary": summary(report),
        "checkpoints": [{"subject": c.subject, "subject_digest": c.subject_digest, "contract": c.contract,
                         "falsifier": c.falsifier.id, "device": c.evidence.device, "state": c.evidence.state.value,
                         "observations": c.evidence.record.observations if c.evidence.record else None}
                        for c in report.adhoc],
        "contracts": [to_json(e.status, e.path) for e in report.entries if not ids or e.status.id in ids],
    }
    return json.dumps(data, indent=2, ensure_ascii=False)


def terminal_summary(report: Report, ids: set[str] | None = None) -> str:
    s = summary(report)
    counts = ", ".join(f"{status} {n}" for status, n in s["contracts_per_status"].items() if n) or "none"
    lines = [f"{s['contracts']} contract(s): {counts}"]
    devices = ", ".join(f"{d} {v['discharged']}/{v['total']}" for d, v in s["discharged_per_device"].items())
    m = s["mutants"]
    lines.append(f"falsifiers discharged: {devices or 'none required'}; mutants killed {score(m['killed'], m['declared'])}"
                 + (f"; {m['unproven_falsifiers']} UNPROVEN" if m["unproven_falsifiers"] else ""))
    for e in report.entries:
        st = e.status
        if ids and st.id not in ids:
            continue
        mark = "!" if st.evidence is LifecycleStatus.DRAFT_RED and not st.hand_set else " "
        declared = "" if st.declared is st.computed else f" (declared {st.declared.value})"
        lines.append(f" {mark} {st.id}: {st.computed.value}{declared} — {st.evidence_summary()}")
    for _, f in open_ship_blocking(report):
        if ids and f.contract not in ids:
            continue
        lines.append(f"open ship-blocking: {f.id} {f.state.value}: {f.explain()}")
    for cid in s["overclaims"]:
        lines.append(f"PV501 {cid}: declared status claims more than the evidence (pv validate)")
    if report.adhoc:
        lines.append(f"{len(report.adhoc)} row(s) on your checkpoints (not counted): see 'Your checkpoints'")
    return "\n".join(lines)


def _warn(report: Report) -> None:
    for p in report.ledger_problems:
        click.echo(f"warning: {report.ledger_path}:{p.line}: {p.message}; line ignored (run `pv ledger check`)",
                   err=True)
    for path, problem in report.load_failures:
        click.echo(f"warning: {path} not loaded ({problem}); run `pv validate`", err=True)
    if report.orphans:
        click.echo(f"warning: {len(report.orphans)} ledger record(s) name a falsifier no contract has (first: line "
                   f"{report.orphans[0][0]}: {report.orphans[0][2]}); run `pv ledger check`", err=True)


@click.command(name="status")
@click.argument("contract_ids", nargs=-1, metavar="[CONTRACT_ID]...")
@click.option("--check", is_flag=True, help="Exit 1 if the status file is out of date; write nothing.")
@click.option("--stdout", "to_stdout", is_flag=True, help="Print the markdown dashboard; write nothing.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: print the computed status for tools; write nothing.")
@click.option("--promote", is_flag=True,
              help="Set the declared status of the named contracts (default: all) from the evidence.")
@click.option("--allow-demote", is_flag=True, help="With --promote: allow lowering a declared status.")
@click.option("--require-fresh", is_flag=True,
              help="Release gate: exit 1 unless every ship-blocking falsifier is DISCHARGED on fresh "
                   "evidence (FALSIFIED, ERROR, STALE, PENDING, SKIP block); write nothing.")
@click.option("--html", "html_dir", type=click.Path(), default=None, metavar="DIR",
              help="Write the dashboard as static HTML into DIR (margin history, drift flags); nothing else.")
@click.option("--to", "target", type=click.Choice(COMPUTABLE),
              help="With --promote: the status to set (refused unless the evidence supports it).")
@pass_workspace
def command(contract_ids: tuple[str, ...], check: bool, to_stdout: bool, fmt: str, promote: bool,
            allow_demote: bool, require_fresh: bool, html_dir: str | None, target: str | None, *,
            workspace: Workspace) -> None:
    """Compute lifecycle status from the evidence and write the dashboard (docs/STATUS.md).

    CONTRACT_IDs select the contracts to promote (with --promote) or to show; the dashboard
    always covers every contract.
    """
    modes = [name for name, on in (("--check", check), ("--stdout", to_stdout), ("--format json", fmt == "json"),
                                   ("--promote", promote), ("--require-fresh", require_fresh), ("--html", html_dir)) if on]
    if len(modes) > 1:
        raise click.UsageError(f"{' and '.join(modes)} cannot be combined")
    if (allow_demote or target) and not promote:
        raise click.UsageError("--allow-demote and --to only apply with --promote")
    ws = workspace

    report, loaded = gather(ws)
    known = {e.status.id for e in report.entries}
    unknown = sorted(set(contract_ids) - known)
    if unknown:
        raise click.UsageError(f"unknown contract id(s): {', '.join(unknown)}; known: {', '.join(sorted(known)) or 'none'}")
    ids = set(contract_ids) or None
    _warn(report)
    try:  # a contract that did not load makes every mode exit 1 (the dashboard says which)
        status_display = ws.rel(ws.status_file)

        if fmt == "json":
            click.echo(render_json(report, ids))
            return
        if require_fresh:
            _require_fresh(report, ids)
            return
        if html_dir:
            from pathlib import Path

            from pv import dashboard

            try:
                flagged = dashboard.publish(report, ws.ledger, Path(html_dir))
            except dashboard.DashboardError as exc:
                raise (click.UsageError if exc.usage else click.ClickException)(str(exc)) from None
            click.echo(f"wrote {Path(html_dir) / 'index.html'} ({flagged} margin(s) shrinking toward zero)")
            return
        markdown = render_markdown(report) + mutation_section(ws, [lc.contract for lc in loaded])
        if to_stdout:
            click.echo(markdown, nl=False)
            return
        if check:
            current = ws.status_file.read_text(encoding="utf-8") if ws.status_file.is_file() else None
            if current == markdown:
                click.echo(f"{status_display} is up to date")
                return
            why = "does not exist" if current is None else "is out of date with the contracts and the ledger"
            click.echo(f"{status_display} {why}; run `pv status` and commit {status_display}", err=True)
            if stale_rows(report):  # code changed under the evidence: a new dashboard alone only shows it
                click.echo(f"{len(stale_rows(report))} falsifier x device row(s) are STALE: re-run them first "
                           "(`pv run --stale`; `pv strength` for planted bugs)", err=True)
            if current is not None:
                diff = list(difflib.unified_diff(current.splitlines(), markdown.splitlines(),
                                                 f"{status_display} (committed)", f"{status_display} (from evidence)",
                                                 lineterm="", n=1))
                for line in diff[:40]:
                    click.echo(line, err=True)
                if len(diff) > 40:
                    click.echo(f"... ({len(diff) - 40} more diff lines)", err=True)
            sys.exit(1)

        refused = False
        if promote:
            from pv.promote import promote_entries

            refused = promote_entries(report.entries, loaded, ids, allow_demote, target, click.echo)
            report, loaded = gather(ws)  # declared statuses changed
            markdown = render_markdown(report) + mutation_section(ws, [lc.contract for lc in loaded])

        click.echo(terminal_summary(report, ids))
        current = ws.status_file.read_text(encoding="utf-8") if ws.status_file.is_file() else None
        if current == markdown:
            click.echo(f"{status_display} is up to date")
        else:
            from pv.atomic import write_text

            write_text(ws.status_file, markdown)
            click.echo(f"wrote {status_display}")
        if refused:
            sys.exit(1)
    finally:
        if report.load_failures:
            sys.exit(1)


def _require_fresh(report: Report, ids: set[str] | None) -> None:
    """Exit 1 unless every ship-blocking falsifier is DISCHARGED on fresh evidence (pv.releasegate)."""
    blocked = ship_blockers(e.status for e in report.entries if not ids or e.status.id in ids)
    if not blocked:
        click.echo("fresh: every ship-blocking falsifier is DISCHARGED on fresh evidence")
        return
    click.echo(f"{len(blocked)} ship-blocking falsifier x device row(s) are not a fresh PASS:", err=True)
    for line in blocked:
        click.echo(f"  {line}", err=True)
    click.echo("fix what FAILs or ERRORs; re-run the rest: pv run --stale (STALE), pv run ID (PENDING)", err=True)
    sys.exit(1)


__all__ = ["command", "render_json", "terminal_summary"]
