"""The dashboard's kill matrix (docs/STATUS.md): every falsifier against the planted bugs it
declares, from the lifecycle's per-mutant states. Split out of `pv status` by concern."""

from __future__ import annotations

from typing import Any

from pv.lifecycle import MutantState
from pv.markdown import md_code
from pv.markdown import table as _table


def kill_matrix_section(entries: list[Any]) -> list[str]:
    """Markdown lines of `## Kill matrix` for the dashboard's entries (pv.statusreport.Entry)."""
    out = ["## Kill matrix", ""]
    mutants = sorted({m for e in entries for f in e.status.falsifiers for m in f.falsifier.mutants})
    falsifiers = [(e, f) for e in entries for f in e.status.falsifiers]
    if not falsifiers:
        out += ["No falsifiers.", ""]
    else:
        out += [
            "Each falsifier run under each planted bug it declares: KILLED (it failed, as it must), "
            "SURVIVED (it passed: blind to that bug), ERROR, STALE (run on code that has changed since), "
            "— (not run yet), **NO CELL** (the bug is planted in no runtime the falsifier runs on). Blank: not "
            "declared. Only the cells of the runtimes a bug is planted in count: a record under it on another "
            "runtime counts neither way.",
            "",
        ]
        cell = {MutantState.KILLED: "KILLED", MutantState.SURVIVED: "**SURVIVED**",
                MutantState.ERROR: "ERROR", MutantState.STALE: "STALE", MutantState.NOT_RUN: "—",
                MutantState.NO_CELL: "**NO CELL**"}
        rows = []
        for e, f in falsifiers:
            states = {m.mutant: cell[m.state] for m in f.mutants}
            rows.append([md_code(f.id), f.strength] + [states.get(m, "") for m in mutants])
        out += _table(["falsifier", "killed"] + [md_code(m) for m in mutants], rows)
        out.append("")
    return out
