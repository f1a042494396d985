"""`pv strength`: prove each falsifier can fail, by running it against planted bugs.

A falsifier earns trust by FAILing on a runtime broken in the way it claims to detect. Each
falsifier lists the `mutants:` it must kill; `pv strength` runs it under each of them:

    FAIL under the mutant  -> KILLED   (the falsifier sees the bug)
    PASS under the mutant  -> SURVIVED (the falsifier is blind to it)
    ERROR                  -> ERROR    (a crash is not a detection)
    SKIP                   -> SKIPPED  (the device was absent: not evidence)

Every run is a ledger record carrying the mutant's name, so the dashboard and the lifecycle
see it. `--matrix` runs every registered mutant against every selected falsifier and prints
the kill matrix and the mutation score, killed / (killed + survived).

One pytest process runs per mutant (the mutant is active around each check call only).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from pv.config import ConfigError, Workspace, load_workspace

KILLED, SURVIVED, ERROR, SKIPPED = "KILLED", "SURVIVED", "ERROR", "SKIPPED"
_CELL = {KILLED: "K", SURVIVED: "·", ERROR: "E", SKIPPED: "S"}
_COLOURS = {KILLED: "green", SURVIVED: "red", ERROR: "red", SKIPPED: "yellow"}


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


@dataclass
class StrengthResult:
    falsifiers: list[str]  # rows, in plan order
    mutants: list[str]  # columns
    declared: dict[str, list[str]]  # falsifier -> its declared mutants
    verdicts: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)  # (f, m) -> device -> verdict
    messages: dict[tuple[str, str], str] = field(default_factory=dict)
    broken: list[str] = field(default_factory=list)  # mutants whose pytest run broke

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
        cells = [r for _, _, r in self.cells(declared_only)]
        return cells.count(KILLED), cells.count(KILLED) + cells.count(SURVIVED)

    def killers(self, mutant: str) -> list[str]:
        return [f for f in self.falsifiers if self.cell(f, mutant) == KILLED]

    def kills_beyond_declared(self, falsifier: str) -> list[str]:
        declared = set(self.declared.get(falsifier, []))
        return [m for m in self.mutants if m not in declared and self.cell(falsifier, m) == KILLED]

    def to_json(self) -> dict[str, Any]:
        killed, judged = self.score()
        dk, dj = self.score(declared_only=True)
        return {
            "mutants": self.mutants,
            "falsifiers": self.falsifiers,
            "score": {"killed": killed, "judged": judged, "ratio": killed / judged if judged else None},
            "declared_score": {"killed": dk, "judged": dj, "ratio": dk / dj if dj else None},
            "cells": [
                {"falsifier": f, "mutant": m, "result": r, "declared": m in self.declared.get(f, []),
                 "devices": self.verdicts[(f, m)], "message": self.messages.get((f, m), "")}
                for f, m, r in self.cells()
            ],
            "broken_runs": self.broken,
        }


def render_matrix(result: StrengthResult) -> str:
    """The kill matrix as markdown: falsifiers down, mutants across; declared pairs in bold."""
    killed, judged = result.score()
    lines = [
        "# Kill matrix",
        "",
        "Each cell runs one falsifier under one planted bug (`pv strength --matrix`). "
        "**K** killed (the falsifier FAILed), · survived (it PASSed), E errored, S skipped "
        "(device absent), blank: not run. Bold cells are mutants the falsifier declares.",
        "",
        f"- matrix: {len(result.falsifiers)} falsifiers × {len(result.mutants)} mutants",
        f"- mutation score: {killed}/{judged}" + (f" ({100 * killed / judged:.1f}%)" if judged else ""),
    ]
    dk, dj = result.score(declared_only=True)
    lines.append(f"- declared pairs killed: {dk}/{dj}")
    lines += ["", "| falsifier | " + " | ".join(f"`{m}`" for m in result.mutants) + " | kills |",
              "| --- |" + " :-: |" * len(result.mutants) + " ---: |"]
    for f in result.falsifiers:
        row = []
        for m in result.mutants:
            r = result.cell(f, m)
            text = "" if r is None else _CELL[r]
            row.append(f"**{text}**" if text and m in result.declared.get(f, []) else text)
        n = sum(result.cell(f, m) == KILLED for m in result.mutants)
        lines.append(f"| `{f}` | " + " | ".join(row) + f" | {n} |")
    lines.append("| killed by | " + " | ".join(str(len(result.killers(m))) for m in result.mutants) + " | |")
    lonely = [m for m in result.mutants if len(result.killers(m)) == 1]
    unkilled = [m for m in result.mutants if not result.killers(m)]
    narrow = [f for f in result.falsifiers if not result.kills_beyond_declared(f)]
    lines += ["", "## Mutants killed by exactly one falsifier", ""]
    lines += [f"- `{m}`: only `{result.killers(m)[0]}`" for m in lonely] or ["- none"]
    lines += ["", "## Mutants no falsifier kills", ""]
    lines += [f"- `{m}`" for m in unkilled] or ["- none"]
    lines += ["", "## Falsifiers that kill nothing beyond their declared mutants", ""]
    lines += [f"- `{f}`" for f in narrow] or ["- none"]
    if result.broken:
        lines += ["", "## Runs that broke (no verdicts)", ""] + [f"- `{m}`" for m in result.broken]
    return "\n".join(lines) + "\n"


def run_strength(workspace: Workspace, plan: Any, selected_ids: list[str], mutants: list[str], *,
                 device: str, ledger: Any, matrix: bool, echo=click.echo) -> StrengthResult:
    from pv.run import Selected, execute
    from pv.generate import test_name

    index = plan.falsifiers()
    declared = {fid: list(index[fid][1].mutants) for fid in selected_ids}
    result = StrengthResult(falsifiers=selected_ids, mutants=mutants, declared=declared)
    for mutant in mutants:
        targets = [fid for fid in selected_ids if matrix or mutant in declared[fid]]
        tests = []
        for fid in targets:
            contract_file, falsifier = index[fid]
            devices = [d for d in falsifier.devices if device == "auto" or d == device]
            for dev in devices:
                tests.append(Selected(fid, contract_file.contract.metadata.id, dev,
                                      f"{workspace.rel(contract_file.path)}::{test_name(fid, dev)}"))
        if not tests:
            continue
        echo(click.style(f"mutant {mutant}: {len(tests)} falsifier test(s)", bold=True))

        def on_outcome(event: dict[str, Any], _rep: int, mutant=mutant) -> None:
            fid, dev, verdict = event.get("falsifier"), event.get("device"), event.get("verdict", "ERROR")
            result.verdicts.setdefault((fid, mutant), {})[dev] = verdict
            if verdict in ("ERROR", "SKIP") and event.get("message"):
                result.messages[(fid, mutant)] = str(event["message"]).strip().splitlines()[0][:200]
            label = {"FAIL": KILLED, "PASS": SURVIVED, "ERROR": ERROR, "SKIP": SKIPPED}.get(verdict, verdict)
            echo(f"  {fid}  {dev:<4}  " + click.style(label, fg=_COLOURS.get(label)))

        run = execute(workspace, tests, device=device, ledger=ledger, mutant=mutant, on_outcome=on_outcome)
        if run.broken:
            result.broken.append(mutant)
            echo(click.style(f"  pytest run under {mutant} broke (exit {run.returncodes}); output tail:", fg="red"),
                 err=True)
            echo(run.output.rstrip("\n")[-3000:], err=True)
            for test in tests:  # a test that reported nothing is an error, never a kill
                result.verdicts.setdefault((test.falsifier, mutant), {}).setdefault(test.device, "ERROR")
    return result


@click.command(name="strength")
@click.argument("falsifiers", nargs=-1, metavar="[FALSIFY-ID]...")
@click.option("--contract", "contracts", multiple=True, metavar="ID", help="Only the falsifiers of this contract.")
@click.option("--device", type=click.Choice(["cpu", "cuda", "auto"]), default="auto", show_default=True,
              help="Run on this device only; auto runs every declared device.")
@click.option("--mutant", "only_mutants", multiple=True, metavar="NAME", help="Only these mutants.")
@click.option("--matrix", is_flag=True, help="Every mutant against every selected falsifier: the kill matrix.")
@click.option("--format", "fmt", type=click.Choice(["markdown", "json"]), default="markdown", show_default=True)
@click.option("--write", "write_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the kill matrix (markdown) to this file, e.g. docs/KILL_MATRIX.md.")
@click.option("--no-ledger", is_flag=True, help="Dry run: record nothing.")
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="Append to this ledger instead of [tool.pv] ledger.")
def command(falsifiers: tuple[str, ...], contracts: tuple[str, ...], device: str, only_mutants: tuple[str, ...],
            matrix: bool, fmt: str, write_path: str | None, no_ledger: bool, ledger_path: str | None) -> None:
    """Run falsifiers under their declared planted bugs and expect each to FAIL (killed).

    With no falsifier or contract named, every falsifier is taken. Exit 1 when a declared
    mutant SURVIVED or ERRORed (or, with --matrix, when any declared pair was not killed);
    SKIPs are reported as not evidence.

    \b
    Examples:
      pv strength --device cpu                       every declared pair on cpu
      pv strength FALSIFY-CUDA-FORWARD-PARITY-001    one falsifier, its mutants
      pv strength --matrix --device cpu --write docs/KILL_MATRIX.md
    """
    from pv import generate, mutation
    from pv.run import DEFAULT, select

    try:
        workspace = load_workspace()
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if no_ledger and ledger_path:
        raise click.UsageError("--no-ledger and --ledger exclude each other")
    plan = generate.ensure_fresh(workspace)
    chosen = select(plan, falsifiers, contracts, not (falsifiers or contracts), device)
    selected_ids = list(dict.fromkeys(s.falsifier for s in chosen))
    try:
        registry = mutation.load_registry(workspace)
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
            raise click.UsageError(f"declared but not registered: {', '.join(unknown)} (run `pv validate`)")
    if only_mutants:
        mutants = [m for m in mutants if m in set(only_mutants)]
    unproven = [fid for fid in selected_ids if not index[fid][1].mutants]
    if not mutants:
        raise click.UsageError("no mutants to run: the selected falsifiers declare none (use --matrix to run all)")
    ledger: Any = None if no_ledger else (Path(ledger_path).resolve() if ledger_path else DEFAULT)

    echo = click.echo if fmt == "markdown" else (lambda *a, **k: click.echo(*a, **{**k, "err": True}))
    result = run_strength(workspace, plan, selected_ids, mutants, device=device, ledger=ledger, matrix=matrix,
                          echo=echo)
    if write_path:
        from pv.atomic import write_text

        write_text(write_path, render_matrix(result))
    if fmt == "json":
        click.echo(json.dumps({**result.to_json(), "unproven": unproven}, indent=2))
    else:
        _print_summary(result, unproven, matrix)
    not_killed = [(f, m, r) for f, m, r in result.cells(declared_only=True) if r in (SURVIVED, ERROR)]
    if not_killed or result.broken:
        sys.exit(1)


def _print_summary(result: StrengthResult, unproven: list[str], matrix: bool) -> None:
    click.echo("")
    if matrix:
        click.echo(render_matrix(result))
    else:
        for f, m, r in result.cells(declared_only=True):
            devices = ", ".join(f"{d} {v}" for d, v in sorted(result.verdicts[(f, m)].items()))
            click.echo(f"{f}  {m}  " + click.style(r, fg=_COLOURS[r], bold=r != KILLED) + f"  ({devices})")
    killed, judged = result.score(declared_only=not matrix)
    click.echo("")
    click.echo(click.style(f"mutation score: {killed}/{judged} killed"
                           + (f" ({100 * killed / judged:.1f}%)" if judged else ""), bold=True))
    survived = [(f, m) for f, m, r in result.cells(declared_only=True) if r == SURVIVED]
    for f, m in survived:
        click.echo(click.style(f"SURVIVED: {f} passes with {m} planted — it cannot see that bug", fg="red"))
    skipped = [(f, m) for f, m, r in result.cells() if r == SKIPPED]
    if skipped:
        click.echo(click.style(f"{len(skipped)} pair(s) skipped — not evidence (device absent)", fg="yellow"))
    if unproven:
        click.echo(click.style(f"UNPROVEN (declare no mutant): {', '.join(unproven)}", fg="yellow"))
