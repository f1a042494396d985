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
from dataclasses import dataclass, field
from typing import Any

import click

from pv import ledger as ledger_mod
from pv.commands import pass_workspace
from pv.automutate.report import status_markdown as mutation_section
from pv.config import Workspace
from pv.killmatrix import kill_matrix_section
from pv.ledger import LedgerProblem, LedgerRecord
from pv.lifecycle import (
    ContractStatus,
    DeviceEvidence,
    DeviceState,
    FalsifierState,
    FalsifierStatus,
    AdhocCell,
    adhoc_cells,
    compute,
    orphans,
)
from pv.declared import overclaim
from pv.dropped import failures_outside_cells
from pv.dropped import warning_lines as dropped_warning
from pv.statusjson import to_json
from pv.loader import LoadedContract, load_contract
from pv.markdown import fmt_value, md_code, md_text
from pv.markdown import table as _table
from pv.releasegate import ship_blockers
from pv.schema import DEVICES, STATUS_RANK, LifecycleStatus

STATUS_ORDER = [
    LifecycleStatus.ACTIVE_RUNTIME,
    LifecycleStatus.DRAFT_PARTIAL_DISCHARGE,
    LifecycleStatus.DRAFT_RED,
    LifecycleStatus.DRAFT,
    LifecycleStatus.RETIRED,
    LifecycleStatus.SUPERSEDED,
]
COMPUTABLE = [s.value for s in STATUS_RANK]


# --- gathering (the only I/O) --------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    path: str  # as the user would type it, relative to the workspace root
    status: ContractStatus


@dataclass
class Report:
    entries: list[Entry]
    ledger_path: str = "evidence/ledger.jsonl"
    ledger_problems: list[LedgerProblem] = field(default_factory=list)
    load_failures: list[tuple[str, str]] = field(default_factory=list)  # (path, first problem)
    # Records naming a falsifier no contract has: (ledger line, record, why). They decide nothing.
    orphans: list[tuple[int, LedgerRecord, str]] = field(default_factory=list)
    # Evidence on users' own checkpoints (`pv run --subject-path`): shown, never counted.
    adhoc: list[AdhocCell] = field(default_factory=list)
    # FAILs and ERRORs on cells no falsifier requires any more (pv.dropped): shown, never counted.
    dropped: list = field(default_factory=list)
    # What judged the records (pv.identity.EvidenceCheck; None: nothing did): the HTML
    # dashboard's margin histories leave out the records it refuses, as the cells do.
    code: Any = None

    @property
    def live(self) -> list[Entry]:
        """Entries whose contracts count towards the summary (not RETIRED/SUPERSEDED)."""
        return [e for e in self.entries if not e.status.hand_set]


def build_report(
    loaded: list[LoadedContract], failures: list[tuple[str, str]], records: list[LedgerRecord],
    ledger_path: str, ledger_problems: list[LedgerProblem], lines: list[int] | None = None,
    code: Any = None, subject_param: str = "subject",
) -> Report:
    """Pure: contracts (already loaded) + records -> report, sorted by contract id, then path.
    `lines`: each record's ledger line (default: its position); `code`: the tree's module
    digests (pv.codebind.TreeDigests) that decide whether a record's code is current."""
    usable = [lc for lc in loaded if lc.contract is not None]
    contracts = [lc.contract for lc in usable]
    statuses = compute(contracts, records, code, subject_param)  # type: ignore[arg-type]
    by_contract = {id(lc.contract): lc.display_path for lc in usable}
    entries = sorted((Entry(by_contract[id(s.contract)], s) for s in statuses), key=lambda e: (e.status.id, e.path))
    lines = lines if lines is not None else list(range(1, len(records) + 1))
    lost = [(lines[i], r, why) for i, r, why in orphans(contracts, records, incomplete=bool(failures))]  # type: ignore[arg-type]
    return Report(entries, ledger_path, sorted(ledger_problems, key=lambda p: p.line), sorted(failures), lost,
                  adhoc_cells(contracts, records, code),  # type: ignore[arg-type]
                  failures_outside_cells(contracts, records, code, subject_param), code)  # type: ignore[arg-type]


def load_all(ws: Workspace) -> tuple[list[LoadedContract], list[tuple[str, str]]]:
    loaded, failures = [], []
    for path in ws.contract_files():
        lc, problems = load_contract(path, ws.rel(path))
        problems = [p for p in problems if p.severity.value == "error"]  # e.g. a duplicate key: not judged
        if lc is None or lc.contract is None or problems:
            first = problems[0].format().splitlines()[0] if problems else "cannot be loaded"
            failures.append((ws.rel(path), first))
        else:
            loaded.append(lc)
    # Records name a contract by its id: judged against one of two files declaring it (pv validate's
    # PV301), they would be judged against whichever loaded last, so neither is judged.
    from pv.crosscheck import unique_ids

    twice = {d.path: d.format().splitlines()[0] for d in unique_ids(loaded) if d.code == "PV301"}
    failures += [(path, problem) for path, problem in twice.items()]
    return [lc for lc in loaded if lc.display_path not in twice], failures


def gather(ws: Workspace) -> tuple[Report, list[LoadedContract]]:
    loaded, failures = load_all(ws)
    from pv.identity import EvidenceCheck  # the tree's code, and whether what ran is the contract's

    contents = ledger_mod.read(ws.ledger)
    report = build_report(loaded, failures, contents.records, ws.rel(ws.ledger), contents.problems,
                          contents.lines, EvidenceCheck(ws, loaded), ws.subject_param)
    return report, loaded


# --- markdown ------------------------------------------------------------------------------------

def _prediction_names(prediction: str) -> list[str] | None:
    from pv import expr

    try:
        return sorted(expr.parse(prediction).names)
    except (expr.ExprError, ValueError):
        return None


def _observed(record: LedgerRecord, prediction: str) -> str:
    obs = record.observations or {}
    names = _prediction_names(prediction)
    keys = [k for k in names if k in obs] if names else []
    if not keys:
        keys = sorted(obs)
    text = ", ".join(f"{k}={fmt_value(obs[k])}" for k in keys)
    if record.verdict.value != "PASS" and record.message and not text:
        text = _shorten(record.message, 120)
    return md_text(text) if text else "—"


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _evidence_cell(record: LedgerRecord | None) -> str:
    if record is None:
        return "—"
    date = md_text(record.time_utc[:10])
    commit = record.git_commit[:7] if record.git_commit else "no commit"
    if record.git_dirty:
        commit += "+dirty"
    cell = f"{date} {md_code(commit)}"
    if record.device != "cpu" and record.device_name:  # which accelerator the evidence came from
        cell += f" on {md_text(record.device_name)}"
    if record.binding:  # timed untraced: bound to whole modules, not the functions that ran (pv.timing)
        cell += f" · binding: {md_text(record.binding)}"
    return cell


def _margin(record: LedgerRecord | None) -> str:
    if record is None or record.margin is None:
        return "—"
    return fmt_value(float(record.margin))


def _device_row_cells(prediction: str, d: DeviceEvidence) -> list[str]:
    record = d.record
    if d.state is DeviceState.PENDING:
        return [d.device, "PENDING", "—", "—", "—"]
    if d.state is DeviceState.STALE:
        last = f" (last {record.verdict.value})" if record is not None else ""
        return [d.device, f"STALE{last}", md_text(d.stale_reason()), "—", _evidence_cell(record)]
    assert record is not None
    return [d.device, d.state.value, _observed(record, prediction), _margin(record), _evidence_cell(record)]


def _subject(subject: str | None) -> str:
    return "—" if subject is None else md_code(subject)


def _checkpoints_section(report: Report) -> list[str]:
    """Falsifiers run on users' own checkpoints (`pv run --subject-path DIR`): one row per
    falsifier x checkpoint (path and digest) x device. They never count toward a contract."""
    out = ["## Your checkpoints", ""]
    if not report.adhoc:
        return out + ["None. Run the model-level falsifiers on a checkpoint of yours with "
                      "`pv run --subject-path DIR --contract ID` (docs/adopting.md).", ""]
    out += ["Evidence on checkpoints given by path. A checkpoint is its path and the digest of its "
            "config.json and weight headers; these rows never count toward a contract's status.", ""]
    rows = []
    for c in report.adhoc:
        d = c.evidence
        verdict, observed, margin, evidence = _device_row_cells(c.falsifier.prediction, d)[1:]
        rows.append([md_code(c.subject), md_code((c.subject_digest or "?")[:12]), md_code(c.falsifier.id),
                     md_code(c.contract), d.device, verdict, observed, margin, evidence])
    return out + _table(["checkpoint", "digest", "falsifier", "contract", "device", "verdict", "observed",
                         "margin", "evidence"], rows) + [""]


def stale_rows(report: Report) -> list[tuple[Entry, FalsifierStatus, DeviceEvidence]]:
    """Every falsifier x required device whose deciding evidence is stale: the re-runs owed."""
    return [(e, f, d) for e in report.live for f in e.status.falsifiers for d in f.devices
            if d.state is DeviceState.STALE]


def _falsifier_label(f: FalsifierStatus) -> str:
    label = md_code(f.id)
    if f.falsifier.ship_blocking:
        label += "<br>ship-blocking"
    return label


def _open_ship_blocking(report: Report) -> list[tuple[Entry, FalsifierStatus]]:
    found = [
        (e, f) for e in report.live for f in e.status.falsifiers
        if f.falsifier.ship_blocking and f.state is not FalsifierState.DISCHARGED
    ]
    order = {s: i for i, s in enumerate([FalsifierState.FALSIFIED, FalsifierState.ERROR, FalsifierState.STALE,
                                         FalsifierState.PARTIAL, FalsifierState.PENDING])}
    return sorted(found, key=lambda ef: (order.get(ef[1].state, 9), ef[0].status.id, ef[1].id))


def summary(report: Report) -> dict[str, Any]:
    """The numbers at the top of the dashboard (and in `--format json`)."""
    per_status = {s.value: 0 for s in STATUS_ORDER}
    for e in report.entries:
        per_status[e.status.computed.value] += 1
    falsifiers = [f for e in report.live for f in e.status.falsifiers]
    per_device = {}
    for device in DEVICES:
        needing = [f for f in falsifiers if device in f.falsifier.devices]
        if needing:
            passed = sum(f.device_passed(device) for f in needing)  # every subject's cell
            per_device[device] = {"discharged": passed, "total": len(needing)}
    falsifier_states = {s.value: sum(f.state is s for f in falsifiers) for s in FalsifierState}
    declared = sum(len(f.mutants) for f in falsifiers)
    killed = sum(f.killed for f in falsifiers)
    return {
        "contracts": len(report.entries),
        "contracts_per_status": per_status,
        "falsifiers": len(falsifiers),
        "falsifiers_per_state": falsifier_states,
        "discharged_per_device": per_device,
        "mutants": {"killed": killed, "declared": declared, "unproven_falsifiers": sum(f.unproven for f in falsifiers)},
        "open_ship_blocking": [f.id for _, f in _open_ship_blocking(report)],
        "overclaims": [e.status.id for e in report.entries if overclaim(e.status)],
        "stale": [{"falsifier": f.id, "subject": d.subject, "device": d.device, "why": list(d.stale_because)}
                  for _, f, d in stale_rows(report)],
        "orphan_records": len(report.orphans),
        "failures_outside_required_cells": len(report.dropped),
        "checkpoint_rows": len(report.adhoc),
    }


def _score(killed: int, declared: int) -> str:
    return f"{killed}/{declared} ({100 * killed // declared}%)" if declared else "0/0"


def render_markdown(report: Report) -> str:
    """The dashboard. Deterministic: same contracts + ledger, same bytes."""
    s = summary(report)
    out: list[str] = [
        "<!-- Generated by `pv status` from the contracts and the evidence ledger. Do not edit by hand:",
        "     run `pv status` to regenerate it; `pv status --check` fails when it is out of date. -->",
        "# Contract status",
        "",
    ]
    if report.ledger_problems:
        out += [
            "> **Warning:** the ledger " + md_code(report.ledger_path) + f" has {len(report.ledger_problems)} "
            "unreadable line(s); they are ignored below. Run `pv ledger check`.",
            ">",
            *[f"> - line {p.line}: {md_text(p.message)}" for p in report.ledger_problems],
            "",
        ]
    if report.orphans:
        fails = sum(r.verdict.value in ("FAIL", "ERROR") for _, r, _ in report.orphans)
        out += [
            f"> **Warning:** {len(report.orphans)} ledger record(s) name a falsifier that no contract has"
            + (f", {fails} of them FAIL or ERROR" if fails else "") + "; they decide nothing below. Run "
            "`pv ledger check`.",
            ">",
            *[f"> - line {line}: {md_code(r.falsifier)} {r.verdict.value} on {md_text(r.device)}"
              f"{' with subject ' + md_code(r.subject) if r.subject else ''}"
              f"{' under ' + md_code(r.mutant) if r.mutant else ''}: {md_text(why)}"
              for line, r, why in report.orphans[:50]],
            *([f"> - … and {len(report.orphans) - 50} more"] if len(report.orphans) > 50 else []),
            "",
        ]
    out += dropped_warning(report.dropped)
    if report.load_failures:
        out += [
            f"> **Warning:** {len(report.load_failures)} contract file(s) could not be loaded and are not "
            "shown. Run `pv validate`.",
            ">",
            *[f"> - {md_code(path)}: {md_text(problem)}" for path, problem in report.load_failures],
            "",
        ]

    out += ["## Summary", ""]
    out += _table(["status", "contracts"],
                  [[status, str(n)] for status, n in s["contracts_per_status"].items()])
    out.append("")
    if s["discharged_per_device"]:
        out += _table(["device", "falsifiers discharged"],
                      [[d, f"{v['discharged']}/{v['total']}"] for d, v in s["discharged_per_device"].items()])
        out.append("")
    states = " · ".join(f"{n} {state}" for state, n in s["falsifiers_per_state"].items() if n)
    m = s["mutants"]
    out += [
        f"- **Falsifiers:** {s['falsifiers']}" + (f" ({states})" if states else ""),
        f"- **Mutation score:** {_score(m['killed'], m['declared'])} declared mutants killed; "
        f"{m['unproven_falsifiers']} falsifier(s) UNPROVEN (declare no mutant)",
        f"- **Open ship-blocking falsifiers:** {len(s['open_ship_blocking'])}",
        f"- **Stale falsifier x device rows (re-run owed):** {len(s['stale'])}",
    ]
    if s["overclaims"]:
        out.append("- **Declared status claims more than the evidence (PV501):** "
                   + ", ".join(md_code(c) for c in s["overclaims"]))
    if any(e.status.hand_set for e in report.entries):
        out.append("- RETIRED and SUPERSEDED contracts are listed but not counted above.")
    out.append("")

    out += ["## Open ship-blocking falsifiers", ""]
    open_rows = _open_ship_blocking(report)
    if open_rows:
        out += _table(
            ["falsifier", "contract", "status", "why", "if it fails"],
            [[md_code(f.id), md_code(e.status.id), f"**{f.state.value}**", md_text(f.explain()),
              md_text(f.falsifier.if_fails)] for e, f in open_rows],
        )
    else:
        out.append("None.")
    out.append("")

    out += ["## Needs a re-run (stale evidence)", ""]
    owed = stale_rows(report)
    if owed:
        out += [f"{len(owed)} falsifier x device row(s) are STALE: the deciding record was made for an older "
                "definition or ran code that has changed since. Stale evidence never discharges. Re-run them "
                "with `pv run --stale --device DEVICE`.", ""]
        out += _table(["falsifier", "subject", "device", "last verdict", "why"],
                      [[md_code(f.id), _subject(d.subject), d.device, d.record.verdict.value if d.record else "—",
                        md_text(d.stale_reason())] for _, f, d in owed])
    else:
        out.append("None.")
    out.append("")

    out += ["## Contracts", ""]
    if not report.entries:
        out += ["No contracts.", ""]
    for e in report.entries:
        st = e.status
        meta = st.contract.metadata
        out += [f"### {md_text(st.id)}", ""]
        line = f"- **{st.computed.value}** · declared {st.declared.value} · evidence {st.evidence.value}"
        reason = overclaim(st)
        if st.hand_set:
            line += " (set by hand)"
        elif reason:
            line += f" · **declared claims more than the evidence:** {md_text(reason)}"
        elif st.declared is not st.evidence:
            line += f" · declared lags the evidence: run `pv status --promote {st.id}`"
        out += [
            line,
            f"- {md_code(e.path)} · version {md_text(meta.version)} · kind {meta.kind.value} · "
            f"{md_text(st.evidence_summary())}",
            f"- {md_text(meta.description)}",
        ]
        if st.blockers and not st.hand_set:
            out.append("- Not ACTIVE_RUNTIME because:")
            out += [f"  - {md_text(b)}" for b in st.blockers]
        out.append("")
        rows = []
        for f in st.falsifiers:
            for i, d in enumerate(f.devices):
                head = [_falsifier_label(f), f.state.value] if i == 0 else ["", ""]
                device, verdict, observed, margin, evidence = _device_row_cells(f.falsifier.prediction, d)
                tail = [md_code(f.falsifier.prediction), f.strength] if i == 0 else ["", ""]
                rows.append(head + [_subject(d.subject), device, verdict, observed, tail[0], margin, evidence,
                                    tail[1]])
        out += _table(["falsifier", "status", "subject", "device", "verdict", "observed", "prediction (bound)",
                       "margin", "evidence", "mutants killed"], rows)
        out.append("")

    out += _checkpoints_section(report)

    out += kill_matrix_section(report.entries)
    return "\n".join(out)


# --- json and terminal ---------------------------------------------------------------------------


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
    lines.append(f"falsifiers discharged: {devices or 'none required'}; mutants killed {_score(m['killed'], m['declared'])}"
                 + (f"; {m['unproven_falsifiers']} UNPROVEN" if m["unproven_falsifiers"] else ""))
    for e in report.entries:
        st = e.status
        if ids and st.id not in ids:
            continue
        mark = "!" if st.evidence is LifecycleStatus.DRAFT_RED and not st.hand_set else " "
        declared = "" if st.declared is st.computed else f" (declared {st.declared.value})"
        lines.append(f" {mark} {st.id}: {st.computed.value}{declared} — {st.evidence_summary()}")
    for _, f in _open_ship_blocking(report):
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


__all__ = ["command", "render_markdown", "render_json", "terminal_summary", "build_report", "gather", "summary",
           "md_text", "md_code", "Report", "Entry"]
