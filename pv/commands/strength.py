"""`pv strength`: prove each falsifier can fail, by running it against planted bugs.

A falsifier earns trust by FAILing on a runtime broken in the way it claims to detect. Each
falsifier lists the `mutants:` it must kill; `pv strength` runs it under each of them:

    FAIL under the mutant  -> KILLED   (the falsifier sees the bug)
    PASS under the mutant  -> SURVIVED (the falsifier is blind to it)
    ERROR                  -> ERROR    (a crash is not a detection)
    SKIP                   -> SKIPPED  (the device was absent: not evidence)

Over a falsifier's devices, a FAIL on any device kills (many mutants act on one path only);
otherwise an ERROR is an error, a PASS survives, and only SKIPs skip — the same rule as
pv.lifecycle's. A mutant may say where it can show (`pv_devices` on its function, e.g. a
CUDA-only bug); it is not run on other devices, so a PASS there is never called blindness.
Likewise a mutant is planted in some runtimes (`@mutant(..., runtimes=)`, default the project's
default runtime): a falsifier that runs on several runtimes is run under it on the cells of
those runtimes only. A declared pair with no such cell is NO CELL, a finding: the contract
declares a bug its falsifier can never meet.

Every run is a ledger record carrying the mutant's name, so the dashboard and the lifecycle
see it. `--matrix` runs every registered mutant against every selected falsifier and prints
the kill matrix and the mutation score, killed / (killed + survived).

One pytest process runs per mutant (the mutant is active around each check call only);
`--jobs N` runs N of those processes at a time.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import click

from pv.commands import pass_workspace
from pv.config import Workspace

KILLED, SURVIVED, ERROR, SKIPPED = "KILLED", "SURVIVED", "ERROR", "SKIPPED"
_CELL = {KILLED: "K", SURVIVED: "·", ERROR: "E", SKIPPED: "S"}
_COLOURS = {KILLED: "green", SURVIVED: "red", ERROR: "red", SKIPPED: "yellow"}
_LABEL = {"FAIL": KILLED, "PASS": SURVIVED, "ERROR": ERROR, "SKIP": SKIPPED}


def cell_result(verdicts: dict[str, str]) -> str:
    """One falsifier x one mutant, over its devices: a FAIL on any device kills (many mutants act
    on one path only); otherwise an ERROR is an error, a PASS survives, only SKIPs skip."""
    values = set(verdicts.values())
    if "FAIL" in values:
        return KILLED
    if "ERROR" in values:
        return ERROR
    if "PASS" in values:
        return SURVIVED
    return SKIPPED


def mutant_runtimes(entry: Any, table: Any) -> frozenset[str] | None:
    """The runtimes a registered mutant is planted in (pv.mutation.planted_in: its `runtimes=`, else
    the project's default runtime); None: every cell (no runtimes anywhere, or not registered)."""
    from pv.mutation import planted_in

    return None if entry is None else planted_in(getattr(entry, "runtimes", None), table)


def meets(planted: frozenset[str] | None, runtime: str | None, table: Any) -> bool:
    from pv import mutation

    return mutation.meets(planted, runtime, table)


def no_cell_reason(planted: frozenset[str] | None, runtimes: list[str] | None, table: Any) -> str:
    where = ", ".join(runtimes) if runtimes else f"its own code ({next(iter(table), 'no runtime')})"
    return f"planted in {', '.join(sorted(planted or ()))} only; the falsifier runs on {where}"


def mutant_devices(entry: Any) -> tuple[str, ...] | None:
    """The devices a registered mutant acts on (`pv_devices` on its function), None for all."""
    factory = getattr(entry, "factory", entry)
    devices = getattr(factory, "pv_devices", None)
    return tuple(devices) if devices else None


@dataclass
class StrengthResult:
    falsifiers: list[str]  # rows, in plan order
    mutants: list[str]  # columns
    declared: dict[str, list[str]]  # falsifier -> its declared mutants
    matrix: bool = False  # every mutant against every falsifier (else: declared pairs only)
    device: str = "auto"
    verdicts: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # (f, m) -> device -> verdict
    messages: dict[tuple[str, str], str] = field(default_factory=dict)  # why a cell errored or skipped
    not_applicable: dict[tuple[str, str], str] = field(default_factory=dict)  # (f, m) -> why it was not run
    no_cell: dict[tuple[str, str], str] = field(default_factory=dict)  # declared, planted in no runtime of f
    broken: list[str] = field(default_factory=list)  # mutants whose pytest run broke
    unproven: list[str] = field(default_factory=list)  # selected falsifiers that declare no mutant
    seconds: dict[str, float] = field(default_factory=dict)  # mutant -> wall time of its run
    records: int = 0  # ledger records written

    def cell(self, falsifier: str, mutant: str) -> str | None:
        verdicts = self.verdicts.get((falsifier, mutant))
        return None if verdicts is None else cell_result(verdicts)

    def cells(self, declared_only: bool = False) -> list[tuple[str, str, str]]:
        out = []
        for f in self.falsifiers:
            for m in self.mutants:
                if declared_only and m not in self.declared.get(f, []):
                    continue
                result = self.cell(f, m)
                if result is not None:
                    out.append((f, m, result))
        return out

    def score(self, declared_only: bool = False) -> tuple[int, int]:
        """(killed, killed + survived): errors and skips are not judged."""
        cells = [r for _, _, r in self.cells(declared_only)]
        return cells.count(KILLED), cells.count(KILLED) + cells.count(SURVIVED)

    def errored(self, declared_only: bool = False) -> int:
        """Pairs that ran and crashed: outside the score's denominator, so reported beside it."""
        return sum(1 for _, _, r in self.cells(declared_only) if r == ERROR)

    def killers(self, mutant: str) -> list[str]:
        return [f for f in self.falsifiers if self.cell(f, mutant) == KILLED]

    def kills(self, falsifier: str) -> list[str]:
        return [m for m in self.mutants if self.cell(falsifier, m) == KILLED]

    def kills_beyond_declared(self, falsifier: str) -> list[str]:
        declared = set(self.declared.get(falsifier, []))
        return [m for m in self.kills(falsifier) if m not in declared]

    def not_killed(self) -> list[tuple[str, str, str]]:
        """Declared pairs that ran and were not killed (SURVIVED or ERROR): the findings."""
        return [(f, m, r) for f, m, r in self.cells(declared_only=True) if r in (SURVIVED, ERROR)]

    @property
    def ok(self) -> bool:
        return not (self.not_killed() or self.broken or self.unproven or self.no_cell)

    def to_json(self) -> dict[str, Any]:
        killed, judged = self.score(declared_only=not self.matrix)
        dk, dj = self.score(declared_only=True)
        return {
            "mode": "matrix" if self.matrix else "declared",
            "device": self.device,
            "mutants": self.mutants,
            "falsifiers": self.falsifiers,
            # errored: pairs that crashed, outside `judged` (an ERROR measures nothing)
            "score": {"killed": killed, "judged": judged, "ratio": killed / judged if judged else None,
                      "errored": self.errored(declared_only=not self.matrix)},
            "declared_score": {"killed": dk, "judged": dj, "ratio": dk / dj if dj else None,
                               "errored": self.errored(declared_only=True)},
            "cells": [
                {"falsifier": f, "mutant": m, "result": r, "declared": m in self.declared.get(f, []),
                 "devices": self.verdicts[(f, m)], "message": self.messages.get((f, m), "")}
                for f, m, r in self.cells()
            ],
            "not_applicable": [{"falsifier": f, "mutant": m, "reason": why}
                               for (f, m), why in self.not_applicable.items()],
            "killed_by": {m: self.killers(m) for m in self.mutants},
            "not_killed": [{"falsifier": f, "mutant": m, "result": r} for f, m, r in self.not_killed()],
            "no_cell": [{"falsifier": f, "mutant": m, "reason": why} for (f, m), why in self.no_cell.items()],
            "unproven": self.unproven,
            "broken_runs": self.broken,
            "seconds": {m: round(s, 1) for m, s in self.seconds.items()},
            "records": self.records,
        }


def _score_line(killed: int, judged: int) -> str:
    return f"{killed}/{judged}" + (f" ({100 * killed / judged:.1f}%)" if judged else "")


def render_matrix(result: StrengthResult) -> str:
    """The kill matrix as markdown: falsifiers down, mutants across; declared pairs in bold."""
    killed, judged = result.score(declared_only=not result.matrix)
    dk, dj = result.score(declared_only=True)
    mode = ("every registered mutant against every selected falsifier (`pv strength --matrix`)" if result.matrix
            else "each falsifier under the mutants it declares (`pv strength`)")
    lines = [
        "# Kill matrix",
        "",
        f"Each cell runs one falsifier under one planted bug: {mode}, on device `{result.device}`. "
        "**K** killed (the falsifier FAILed), · survived (it PASSed), E errored, S skipped "
        "(device absent), - not applicable (the mutant cannot show on the devices run), blank: not run. "
        "Bold cells are mutants the falsifier declares.",
        "",
        f"- matrix: {len(result.falsifiers)} falsifiers × {len(result.mutants)} mutants",
        f"- mutation score: {_score_line(killed, judged)} (killed / (killed + survived)"
        + (", every pair run" if result.matrix else ", declared pairs") + ")",
        f"- declared pairs killed: {_score_line(dk, dj)}",
    ]
    errored = result.errored(declared_only=not result.matrix)
    if errored:
        lines.append(f"- {errored} pair(s) ERROR: not judged, so outside the score (a crash is not a kill)")
    run_cells = sum(1 for f in result.falsifiers for m in result.mutants if (f, m) in result.verdicts)
    total_cells = len(result.falsifiers) * len(result.mutants)
    if result.matrix and run_cells < total_cells:
        complete = [m for m in result.mutants if all((f, m) in result.verdicts for f in result.falsifiers)]
        lines.append(f"- **partial**: {run_cells}/{total_cells} cells have evidence ({len(complete)} mutants run "
                     "against every falsifier); the lists below only reflect the cells run")
    lines += ["", "| falsifier | " + " | ".join(f"`{m}`" for m in result.mutants) + " | kills |",
              "| --- |" + " :-: |" * len(result.mutants) + " ---: |"]
    for f in result.falsifiers:
        row = []
        for m in result.mutants:
            r = result.cell(f, m)
            text = "-" if (f, m) in result.not_applicable else "" if r is None else _CELL[r]
            row.append(f"**{text}**" if text and m in result.declared.get(f, []) else text)
        lines.append(f"| `{f}` | " + " | ".join(row) + f" | {len(result.kills(f))} |")
    lines.append("| killed by | " + " | ".join(str(len(result.killers(m))) for m in result.mutants) + " | |")
    findings = result.not_killed()
    lines += ["", "## Declared mutants not killed", ""]
    lines += [f"- `{f}` {r.lower()} `{m}`" for f, m, r in findings] or ["- none"]
    if result.no_cell:
        lines += ["", "## Declared mutants no cell of the falsifier meets", ""]
        lines += [f"- `{f}` `{m}`: {why}" for (f, m), why in result.no_cell.items()]
    if result.unproven:
        lines += ["", "## UNPROVEN falsifiers (declare no mutant)", ""] + [f"- `{f}`" for f in result.unproven]
    if result.matrix:
        lonely = [m for m in result.mutants if len(result.killers(m)) == 1]
        unkilled = [m for m in result.mutants
                    if not result.killers(m) and any(result.cell(f, m) for f in result.falsifiers)]
        narrow = [f for f in result.falsifiers if result.kills(f) and not result.kills_beyond_declared(f)]
        blind = [f for f in result.falsifiers if not result.kills(f)
                 and any(result.cell(f, m) for m in result.mutants)]
        lines += ["", "## Mutants killed by exactly one falsifier", ""]
        lines += [f"- `{m}`: only `{result.killers(m)[0]}`" for m in lonely] or ["- none"]
        lines += ["", "## Mutants no falsifier kills", ""]
        lines += [f"- `{m}`" for m in unkilled] or ["- none"]
        lines += ["", "## Falsifiers that kill nothing beyond their declared mutants", ""]
        lines += [f"- `{f}`" for f in narrow] or ["- none"]
        if blind:
            lines += ["", "## Falsifiers that kill no mutant at all", ""] + [f"- `{f}`" for f in blind]
    if result.not_applicable:
        lines += ["", "## Not applicable on these devices and runtimes", ""]
        reasons: dict[str, list[str]] = {}
        for (f, m), why in result.not_applicable.items():
            reasons.setdefault(f"`{m}`: {why}", []).append(f)
        lines += [f"- {reason} ({len(fs)} falsifier(s))" for reason, fs in reasons.items()]
    if result.broken:
        lines += ["", "## Runs that broke (no verdicts)", ""] + [f"- `{m}`" for m in result.broken]
    return "\n".join(lines) + "\n"


def plan_pairs(workspace: Workspace, plan: Any, selected_ids: list[str], mutants: list[str], registry: dict[str, Any],
               *, device: str, matrix: bool, result: StrengthResult,
               skip_subjects: tuple[str, ...] = ()) -> dict[str, list[Any]]:
    """mutant -> the generated tests to run under it (records not-applicable pairs in `result`);
    the cells of `skip_subjects` are left out."""
    from pv.codegen import test_name
    from pv.commands.run import Selected
    from pv.runtimes import cells as runtime_cells

    index = plan.falsifiers()
    out: dict[str, list[Any]] = {}
    for mutant in mutants:
        acts_on = mutant_devices(registry.get(mutant))
        planted = mutant_runtimes(registry.get(mutant), workspace.runtimes)
        tests = []
        for fid in selected_ids:
            if not (matrix or mutant in result.declared[fid]):
                continue
            contract_file, falsifier = index[fid]
            devices = [d for d in falsifier.devices if device == "auto" or d == device]
            usable = [d for d in devices if acts_on is None or d in acts_on]
            if devices and not usable:
                result.not_applicable[(fid, mutant)] = f"acts on {', '.join(acts_on or ())} only"
            subjects = [s for s in falsifier.subjects or [None] if s not in skip_subjects]
            runtimes = [rt for rt in falsifier.runtimes or [None] if meets(planted, rt, workspace.runtimes)]
            if not runtimes:
                why = no_cell_reason(planted, falsifier.runtimes, workspace.runtimes)
                if mutant in result.declared[fid]:
                    result.no_cell[(fid, mutant)] = why
                else:
                    result.not_applicable[(fid, mutant)] = why
                continue
            for subject, dev, rt in runtime_cells(falsifier.runtimes and runtimes, subjects, usable):  # pv.runtimes
                tests.append(Selected(fid, contract_file.contract.metadata.id, dev,
                                      f"{workspace.rel(contract_file.path)}::{test_name(fid, dev, subject, rt)}",
                                      subject, rt))
        if tests:
            out[mutant] = tests
    return out


def planted_in_checks_only(event: Any, entry: Any, workspace: Workspace) -> str | None:
    """Why a live FAIL under a bug is no kill because the bug replaced check code only (None: it
    is a kill, or it cannot be told): pv.identity's rule, before the kill is counted, so the
    printed score and the dashboard agree. `entry`: the falsifier's (target, falsifier)."""
    from pv.identity import seams_in_checks_only

    return seams_in_checks_only(getattr(event, "planted_at", None), event.runtime, entry[1] if entry else None,
                                workspace)


def run_strength(workspace: Workspace, plan: Any, selected_ids: list[str], mutants: list[str], *,
                 device: str, ledger: Any, matrix: bool, registry: dict[str, Any] | None = None,
                 jobs: int = 1, echo: Callable[..., None] = click.echo,
                 skip_subjects: tuple[str, ...] = ()) -> StrengthResult:
    from pv.commands.run import execute

    index = plan.falsifiers()
    declared = {fid: list(index[fid][1].mutants) for fid in selected_ids}
    result = StrengthResult(falsifiers=selected_ids, mutants=mutants, declared=declared, matrix=matrix,
                            device=device, unproven=[fid for fid in selected_ids if not declared[fid]])
    pairs = plan_pairs(workspace, plan, selected_ids, mutants, registry or {}, device=device, matrix=matrix,
                       result=result, skip_subjects=skip_subjects)
    lock = threading.Lock()

    def one(mutant: str) -> None:
        tests = pairs[mutant]
        started = time.monotonic()
        if jobs == 1:
            echo(click.style(f"mutant {mutant}: {len(tests)} falsifier test(s)", bold=True))

        def on_outcome(event: Any, _rep: int) -> None:  # a pv.outcome.Outcome
            fid, verdict = event.falsifier, event.verdict or "ERROR"
            dev = _cell(event.device, event.subject, event.runtime)
            message = event.message
            # The rule pv status judges the record by (pv.identity.planted_in_checks): a FAIL under
            # a bug that replaced only the adapter or the check is the instrument broken, no kill.
            in_checks = planted_in_checks_only(event, index.get(fid), workspace) if verdict == "FAIL" else None
            if in_checks:
                verdict, message = "ERROR", in_checks
            with lock:
                result.verdicts.setdefault((fid, mutant), {})[dev] = verdict
                if verdict in ("ERROR", "SKIP") and message:
                    result.messages[(fid, mutant)] = str(message).strip().splitlines()[0][:200]
                if event.record_id:
                    result.records += 1
                label = _LABEL.get(verdict, verdict)
                prefix = f"  {mutant}  " if jobs > 1 else "  "
                echo(f"{prefix}{fid}  {dev:<4}  " + click.style(label, fg=_COLOURS.get(label)))

        run = execute(workspace, tests, device=device, ledger=ledger, mutant=mutant, on_outcome=on_outcome)
        with lock:
            result.seconds[mutant] = time.monotonic() - started
            if run.broken:
                result.broken.append(mutant)
                echo(click.style(f"  pytest run under {mutant} broke (exit {run.returncodes}); output tail:",
                                 fg="red"), err=True)
                echo(run.output.rstrip("\n")[-3000:], err=True)
                for test in tests:  # a test that reported nothing is an error, never a kill
                    result.verdicts.setdefault((test.falsifier, mutant), {}).setdefault(
                        _cell(test.device, test.subject, test.runtime), "ERROR")
            if jobs > 1:
                echo(click.style(f"mutant {mutant}: done in {result.seconds[mutant]:.0f}s", bold=True))

    order = [m for m in mutants if m in pairs]
    if jobs <= 1:
        for mutant in order:
            one(mutant)
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for future in [pool.submit(one, m) for m in order]:
                future.result()
    result.broken.sort(key=order.index)
    return result


@click.command(name="strength")
@click.argument("falsifiers", nargs=-1, metavar="[FALSIFY-ID]...")
@click.option("--contract", "contracts", multiple=True, metavar="ID", help="Only the falsifiers of this contract.")
@click.option("--device", type=click.Choice(["cpu", "cuda", "auto"]), default="auto", show_default=True,
              help="Run on this device only; auto runs every declared device.")
@click.option("--mutant", "only_mutants", multiple=True, metavar="NAME", help="Only these mutants.")
@click.option("--matrix", is_flag=True, help="Every mutant against every selected falsifier: the kill matrix.")
@click.option("--format", "fmt", type=click.Choice(["markdown", "json"]), default="markdown", show_default=True,
              help="json: one JSON object on stdout (progress goes to stderr).")
@click.option("--write", "write_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the kill matrix (markdown) to this file, e.g. docs/KILL_MATRIX.md.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="Run this many mutants' pytest processes at a time.")
@click.option("--skip-subject", "skip_subjects", multiple=True, metavar="NAME",
              help="Leave this subject's cells out (repeatable), e.g. a production-scale subject.")
@click.option("--no-ledger", is_flag=True, help="Dry run: record nothing.")
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="Append to this ledger instead of [tool.pv] ledger.")
@click.option("--from-ledger", is_flag=True,
              help="Run nothing: build the result (and kill matrix) from the fresh records already in the ledger.")
@pass_workspace
def command(falsifiers: tuple[str, ...], contracts: tuple[str, ...], device: str, only_mutants: tuple[str, ...],
            matrix: bool, fmt: str, write_path: str | None, jobs: int, skip_subjects: tuple[str, ...],
            no_ledger: bool, ledger_path: str | None, from_ledger: bool, *, workspace: Workspace) -> None:
    """Run falsifiers under their declared planted bugs and expect each to FAIL (killed).

    With no falsifier or contract named, every falsifier is taken. Exit 1 when a declared
    mutant SURVIVED or ERRORed, a selected falsifier declares no mutant (UNPROVEN), or a pytest
    run broke; with --matrix, undeclared pairs that survive are reported but do not fail the
    run. SKIPs (device absent) are reported as not evidence. Exit 2 for usage errors (an
    unknown falsifier, contract or mutant).

    \b
    Examples:
      pv strength --device cpu                       every declared pair on cpu
      pv strength FALSIFY-CUDA-FORWARD-PARITY-001    one falsifier, its mutants
      pv strength --mutant final_norm_skipped        the falsifiers declaring one mutant
      pv strength --matrix --device cpu --write docs/KILL_MATRIX.md
    """
    from pv import mutation
    from pv import codegen
    from pv.commands.run import DEFAULT, select

    if no_ledger and ledger_path:
        raise click.UsageError("--no-ledger and --ledger exclude each other")
    progress = click.echo if fmt == "markdown" else (lambda *a, **k: click.echo(*a, **{**k, "err": True}))
    plan = codegen.ensure_fresh(workspace, echo=progress)
    chosen = select(plan, falsifiers, contracts, not (falsifiers or contracts), device)
    selected_ids = list(dict.fromkeys(s.falsifier for s in chosen))
    try:
        registry = workspace_registry(workspace)
        for name in only_mutants:
            mutation.get(registry, name)
    except mutation.MutationError as exc:
        raise click.UsageError(str(exc)) from None
    index = plan.falsifiers()
    if matrix:
        mutants = sorted(registry)
    else:
        mutants = sorted({m for fid in selected_ids for m in index[fid][1].mutants})
        unknown = [m for m in mutants if m not in registry]
        if unknown:
            raise click.ClickException(f"declared but not registered in {workspace.mutants_module}: "
                                       f"{', '.join(unknown)} (run `pv validate`)")
    if only_mutants:
        wanted = set(only_mutants)
        mutants = [m for m in mutants if m in wanted]
        if not matrix:
            selected_ids = [fid for fid in selected_ids if wanted & set(index[fid][1].mutants)]
            if not selected_ids:
                raise click.UsageError(f"no selected falsifier declares {', '.join(sorted(wanted))} "
                                       "(use --matrix to run it against them anyway)")
    ledger: Any = None if no_ledger else (Path(ledger_path).resolve() if ledger_path else DEFAULT)

    if from_ledger:
        source = Path(ledger_path).resolve() if ledger_path else workspace.ledger
        result = result_from_ledger(source, plan, selected_ids, mutants, device=device, matrix=matrix)
    else:
        result = run_strength(workspace, plan, selected_ids, mutants, device=device, ledger=ledger, matrix=matrix,
                              registry=registry, jobs=jobs, echo=progress, skip_subjects=skip_subjects)
    if write_path:
        from pv.atomic import write_text

        write_text(write_path, render_matrix(result))
    if fmt == "json":
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        _print_summary(result, ledger_label=None if ledger is None else
                       workspace.rel(workspace.ledger if ledger is DEFAULT else Path(ledger)))
    if not result.ok:
        sys.exit(1)


def result_from_ledger(path: Path, plan: Any, selected_ids: list[str], mutants: list[str], *, device: str,
                       matrix: bool) -> StrengthResult:
    """The strength result the ledger already holds: for each (falsifier, mutant, device), the
    latest fresh record run under that mutant (same definition, same code). Cells never run, or
    whose latest record ran code that has changed since, stay blank."""
    from pv import ledger as ledger_file
    from pv.identity import EvidenceCheck
    from pv.lifecycle import cell_subject

    index = plan.falsifiers()
    declared = {fid: list(index[fid][1].mutants) for fid in selected_ids}
    result = StrengthResult(falsifiers=selected_ids, mutants=mutants, declared=declared, matrix=matrix,
                            device=device)
    from pv.runtimes import cell_runtime

    # the definition hash of each cell: per subject for a falsifier with subjects
    current = {fid: {s: index[fid][1].definition_sha256(s, plan.workspace.subject_param)
                     for s in (index[fid][1].subjects or [None])} for fid in selected_ids}
    wanted = set(mutants)
    latest: dict[tuple[str, str, str], Any] = {}
    # a record not run by the contract's generated test, on its definition, never counts
    tree = EvidenceCheck(plan.workspace, [t.loaded for t in plan.targets])
    for record in ledger_file.read(path).records:
        cells = current.get(record.falsifier, {})
        subject = cell_subject(record, cells)  # a record from before subjects: by its hash
        if (record.mutant not in wanted or record.falsifier not in current
                or subject not in cells or record.falsifier_sha256 != cells[subject]
                or (device != "auto" and record.device != device)
                or record.device not in index[record.falsifier][1].devices
                or (not matrix and record.mutant not in declared[record.falsifier])
                or tree.refuses(record, index[record.falsifier][1])):
            continue
        runtime = cell_runtime(record.runtime, index[record.falsifier][1].runtimes)
        if not tree.mutant_meets(record.mutant, runtime):
            continue  # run where the bug's code never runs: evidence neither way
        # The ledger's order decides which record is the latest, never the typed-in time.
        latest[(record.falsifier, record.mutant, _cell(record.device, subject, runtime))] = record
    latest = {key: r for key, r in latest.items() if not tree.record_changes(r)}
    for (fid, mutant, dev), record in sorted(latest.items()):
        result.verdicts.setdefault((fid, mutant), {})[dev] = record.verdict.value
        if record.verdict.value in ("ERROR", "SKIP") and record.message:
            result.messages[(fid, mutant)] = record.message.strip().splitlines()[0][:200]
    result.unproven = [fid for fid in selected_ids if not declared[fid]]
    for fid in selected_ids:
        falsifier = index[fid][1]
        for mutant in declared[fid]:
            if mutant in wanted and not any(tree.mutant_meets(mutant, rt) for rt in falsifier.runtimes or [None]):
                result.no_cell[(fid, mutant)] = (f"planted in no runtime the falsifier runs on "
                                                 f"({', '.join(falsifier.runtimes or ['its own code'])})")
    return result


def _cell(device: str, subject: str | None, runtime: str | None = None) -> str:
    """A verdict's column: the device, `cpu[tiny-trained]` for a subject's cell, and
    `cpu[tiny-trained]@transformers` for a runtime's (as pv.lifecycle labels cells)."""
    label = device if subject is None else f"{device}[{subject}]"
    return label if runtime is None else f"{label}@{runtime}"


def workspace_registry(workspace: Workspace) -> dict[str, Any]:
    """The mutants of the workspace's own mutants module (and its submodules), by name: the
    process-wide registry may also hold mutants that other modules registered."""
    from pv import mutation

    registry = mutation.load_registry(workspace)
    module = workspace.mutants_module
    return {name: entry for name, entry in registry.items()
            if entry.module == module or str(entry.module).startswith(module + ".")}


def _print_summary(result: StrengthResult, ledger_label: str | None) -> None:
    from pv.identity import PLANTED_IN_CHECKS

    click.echo("")
    if result.matrix:
        click.echo(render_matrix(result))
    else:
        for f, m, r in result.cells(declared_only=True):
            devices = ", ".join(f"{d} {v}" for d, v in sorted(result.verdicts[(f, m)].items()))
            click.echo(f"{f}  {m}  " + click.style(r, fg=_COLOURS[r], bold=r != KILLED) + f"  ({devices})")
    killed, judged = result.score(declared_only=not result.matrix)
    # An ERROR is outside the score's denominator (it measured nothing), so "8/8 (100.0%)" beside
    # a ninth pair that crashed reads as a full score; the line itself says what it leaves out.
    errored = result.errored(declared_only=not result.matrix)
    click.echo("")
    click.echo(click.style(f"mutation score: {_score_line(killed, judged)} killed"
                           + ("" if result.matrix else " (declared pairs)")
                           + (f"; {errored} pair(s) ERROR, not judged (not kills)" if errored else ""), bold=True))
    for f, m, r in result.not_killed():
        if r == SURVIVED:
            click.echo(click.style(f"SURVIVED: {f} passes with {m} planted — it cannot see that bug", fg="red"))
        elif (why := result.messages.get((f, m), "")).startswith(PLANTED_IN_CHECKS):
            click.echo(click.style(f"NOT A KILL: {f} FAILed under {m}, but {why}", fg="red"))
        else:
            click.echo(click.style(f"ERROR: {f} under {m} could not run — not a kill" + (f": {why}" if why else ""),
                                   fg="red"))
    skipped = [(f, m) for f, m, r in result.cells() if r == SKIPPED]
    if skipped:
        click.echo(click.style(f"{len(skipped)} pair(s) skipped — not evidence (device absent)", fg="yellow"))
    if result.not_applicable:
        click.echo(f"{len(result.not_applicable)} pair(s) not applicable here (the mutant acts on other devices "
                   "or runtimes)")
    for (f, m), why in result.no_cell.items():
        click.echo(click.style(f"NO CELL: {f} declares {m}, which it can never meet: {why}", fg="red"))
    if result.unproven:
        click.echo(click.style(f"UNPROVEN (declare no mutant): {', '.join(result.unproven)}", fg="red"))
    if result.broken:
        click.echo(click.style(f"pytest runs broke under: {', '.join(result.broken)}", fg="red"))
    if ledger_label is None:
        click.echo("dry run: no ledger records written")
    else:
        click.echo(f"{result.records} record(s) appended to {ledger_label}")
