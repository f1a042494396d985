"""`pv status --html DIR`: the dashboard as static HTML (one page, inline CSS and SVG: no
server, no script, no network).

    files = render(report, records)      # {name: text}, deterministic (no clock)
    write(Path(DIR), files)              # all or nothing

What the page shows: the summary; the cells whose margin is **shrinking toward zero**
(pv.margins: the rule and its constants); per contract, each falsifier x subject x device cell
with its state, runtime (when records name one), latest margin and a sparkline of its margin
over its history; the state of every cell by device, by subject and by runtime; the kill matrix
(each falsifier against each planted bug it declares); mutation scores.

Mutation evidence of other kinds (a mutation-testing tool's results) plugs in through
`SECTION_HOOKS`: each hook takes (report, records) and returns an HTML fragment (a <section>),
or "" when it has no data; the page renders the fragments after the built-in sections.

`report` is pv status's Report (entries with `.status`: pv.lifecycle.ContractStatus; `orphans`,
`ledger_problems`, `load_failures`); this module never reads the ledger or contracts itself.
"""

from __future__ import annotations

import html
import os
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pv import margins as margins_mod

MARKER = ".pv-dashboard"  # what makes a directory a previous pv dashboard (safe to replace)
FLAG_COLOUR = "#ff6a00"  # the shrinking-margin flag; nothing else on the page uses it
SECTION_HOOKS: list[Callable[[Any, list[Any]], str]] = []

STATE_COLOURS = {"PASS": "#2b8a3e", "FAIL": "#c92a2a", "ERROR": "#c92a2a", "SKIP": "#868e96",
                 "STALE": "#9c36b5", "PENDING": "#868e96"}

CSS = f"""
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #212529; background: #fff; }}
h1 {{ font-size: 22px; }} h2 {{ font-size: 18px; margin-top: 28px; }} h3 {{ font-size: 15px; }}
table {{ border-collapse: collapse; margin: 8px 0 16px; }}
th, td {{ border: 1px solid #dee2e6; padding: 3px 8px; text-align: left; vertical-align: middle; }}
th {{ background: #f1f3f5; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
.state {{ font-weight: 600; }}
.flag {{ background: {FLAG_COLOUR}; color: #000; font-weight: 700; padding: 2px 6px; border-radius: 3px; }}
tr.shrinking td {{ border-top: 2px solid {FLAG_COLOUR}; border-bottom: 2px solid {FLAG_COLOUR}; }}
.muted {{ color: #868e96; }}
code {{ font-size: 12px; }}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _margin_text(value: float | None) -> str:
    return "—" if value is None else ("0" if value == 0 else f"{value:+.4g}")


@dataclass(frozen=True)
class Row:
    contract: str
    falsifier: str
    subject: str | None
    device: str
    runtime: str | None
    state: str
    margin: float | None
    history: tuple[float, ...]
    shrinking: bool

    @property
    def anchor(self) -> str:
        parts = [self.falsifier, self.device] + ([self.subject] if self.subject else [])
        return "row-" + "-".join(p.replace(":", "_").replace("/", "_") for p in parts)


def rows(report: Any, records: list[Any]) -> list[Row]:
    """One row per falsifier cell of every contract, in the report's order."""
    from pv.lifecycle import refused

    code = getattr(report, "code", None)  # the EvidenceCheck the status was computed with
    out = []
    for entry in report.entries:
        for f in entry.status.falsifiers:
            for d in f.devices:
                record = d.record
                sha = record.falsifier_sha256 if record is not None else f.sha256
                points = margins_mod.history(records, f.id, d.device, d.subject, sha, d.runtime, f.falsifier.runtimes,
                                             lambda r, f=f: refused(r, code, f.falsifier))
                series = tuple(p.margin for p in points)
                state = d.state.value
                flagged = state not in ("FAIL", "ERROR") and margins_mod.shrinking(list(series))
                out.append(Row(entry.status.id, f.id, d.subject, d.device, getattr(record, "runtime", None),
                               state, None if record is None else record.margin, series, flagged))
    return out


def _state(state: str) -> str:
    return f'<span class="state" style="color:{STATE_COLOURS.get(state, "#212529")}">{_e(state)}</span>'


def _row_html(row: Row, with_contract: bool = False) -> str:
    flag = '<span class="flag">margin shrinking</span>' if row.shrinking else ""
    cells = ([f'<td><a href="#contract-{_e(row.contract)}">{_e(row.contract)}</a></td>'] if with_contract else [])
    cells += [f"<td><code>{_e(row.falsifier)}</code></td>", f"<td>{_e(row.subject or '—')}</td>",
              f"<td>{_e(row.device)}</td>", f"<td>{_e(row.runtime or '—')}</td>", f"<td>{_state(row.state)}</td>",
              f'<td class="num">{_e(_margin_text(row.margin))}</td>',
              f"<td>{margins_mod.sparkline(list(row.history), flagged=row.shrinking)}</td>", f"<td>{flag}</td>"]
    attrs = f' id="{_e(row.anchor)}"' + (' class="shrinking" data-flag="shrinking"' if row.shrinking else "")
    if with_contract:
        attrs = ' class="shrinking-summary"' if row.shrinking else ""
    return f"<tr{attrs}>" + "".join(cells) + "</tr>"


ROW_HEAD = "<th>falsifier</th><th>subject</th><th>device</th><th>runtime</th><th>state</th><th>margin</th>" \
           "<th>margin over its history</th><th></th>"


def _by(rows_: list[Row], key: Callable[[Row], str | None], title: str) -> str:
    groups: dict[str, Counter[str]] = {}
    for r in rows_:
        groups.setdefault(key(r) or "—", Counter())[r.state] += 1
    states = ["PASS", "FAIL", "ERROR", "STALE", "SKIP", "PENDING"]
    body = "".join(f"<tr><td>{_e(name)}</td>" + "".join(f'<td class="num">{c[s] or ""}</td>' for s in states)
                   + "</tr>" for name, c in sorted(groups.items()))
    return (f"<h3>by {_e(title)}</h3><table><tr><th>{_e(title)}</th>"
            + "".join(f"<th>{s}</th>" for s in states) + f"</tr>{body}</table>")


def _kill_matrix(report: Any) -> str:
    lines = []
    for entry in report.entries:
        for f in entry.status.falsifiers:
            for m in f.mutants:
                state = m.state.value
                colour = {"KILLED": "#2b8a3e", "SURVIVED": "#c92a2a"}.get(state, "#868e96")
                lines.append(f"<tr><td>{_e(entry.status.id)}</td><td><code>{_e(f.id)}</code></td>"
                             f"<td><code>{_e(m.mutant)}</code></td>"
                             f'<td><span class="state" style="color:{colour}">{_e(state)}</span></td></tr>')
    if not lines:
        return '<section id="kill-matrix"><h2>Kill matrix</h2><p class="muted">no planted bugs declared</p></section>'
    return ('<section id="kill-matrix"><h2>Kill matrix</h2><p>Each falsifier under each planted bug it declares '
            "(<code>pv strength</code>): KILLED means it failed under the bug, as it must.</p>"
            "<table><tr><th>contract</th><th>falsifier</th><th>planted bug</th><th>state</th></tr>"
            + "".join(lines) + "</table></section>")


def _mutation_scores(report: Any) -> str:
    lines = []
    for entry in report.entries:
        declared = sum(len(f.mutants) for f in entry.status.falsifiers)
        if not declared:
            continue
        killed = sum(f.killed for f in entry.status.falsifiers)
        lines.append(f"<tr><td>{_e(entry.status.id)}</td><td class='num'>{killed}/{declared}</td>"
                     f"<td class='num'>{100 * killed // declared}%</td></tr>")
    if not lines:
        return ""
    return ('<section id="mutation-scores"><h2>Mutation scores</h2><p>Planted bugs killed per contract '
            "(killed / declared, from the kill matrix).</p><table><tr><th>contract</th><th>killed</th><th>score</th></tr>"
            + "".join(lines) + "</table></section>")


def render(report: Any, records: list[Any]) -> dict[str, str]:
    """The dashboard's files, {name: text}. Deterministic: same report and records, same bytes."""
    all_rows = rows(report, records)
    flagged = [r for r in all_rows if r.shrinking]
    states = Counter(e.status.computed.value for e in report.entries)
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>pv dashboard</title>", f"<style>{CSS}</style></head><body>",
        "<h1>Contract status</h1>",
        "<p>Generated by <code>pv status --html</code> from the contracts and the evidence ledger; "
        "computed, never typed. Static: no script, no network.</p>",
        '<section id="summary"><h2>Summary</h2><table><tr><th>status</th><th>contracts</th></tr>'
        + "".join(f"<tr><td>{_e(s)}</td><td class='num'>{n}</td></tr>" for s, n in sorted(states.items()))
        + f"</table><p>{len(all_rows)} falsifier cells; {len(flagged)} with a margin shrinking toward zero.</p>",
    ]
    warnings = [("ledger line(s) unreadable", len(report.ledger_problems)),
                ("record(s) naming no contract's falsifier", len(report.orphans)),
                ("contract file(s) that could not be loaded", len(report.load_failures))]
    parts += [f"<p><strong>Warning:</strong> {n} {_e(what)} (see <code>pv status</code>).</p>" for what, n in warnings if n]
    parts.append("</section>")
    parts.append('<section id="shrinking"><h2>Margins shrinking toward zero</h2>'
                 f"<p>Flagged when the last {margins_mod.K} margins (one per commit) fall strictly, start above "
                 f"zero and end below {margins_mod.FRACTION:g} of where they started: the bound still holds, by "
                 "less each commit.</p>")
    if flagged:
        parts.append(f"<table><tr><th>contract</th>{ROW_HEAD}</tr>"
                     + "".join(_row_html(r, with_contract=True) for r in flagged) + "</table>")
    else:
        parts.append('<p class="muted">none</p>')
    parts.append("</section>")
    parts.append('<section id="contracts"><h2>Contracts</h2>')
    for entry in report.entries:
        s = entry.status
        parts.append(f'<h3 id="contract-{_e(s.id)}">{_e(s.id)} <span class="muted">v{_e(s.contract.metadata.version)} · '
                     f"{_e(entry.path)}</span></h3>")
        parts.append(f"<p>computed {_state(s.computed.value)} · declared {_e(s.declared.value)} · evidence "
                     f"{_e(s.evidence.value)}</p>")
        mine = [r for r in all_rows if r.contract == s.id]
        if mine:
            parts.append(f"<table><tr>{ROW_HEAD}</tr>" + "".join(_row_html(r) for r in mine) + "</table>")
    parts.append("</section>")
    parts.append('<section id="by-cell"><h2>Cells by device, subject and runtime</h2>'
                 + _by(all_rows, lambda r: r.device, "device") + _by(all_rows, lambda r: r.subject, "subject")
                 + _by(all_rows, lambda r: r.runtime, "runtime") + "</section>")
    parts.append(_kill_matrix(report))
    parts.append(_mutation_scores(report))
    parts += [fragment for hook in SECTION_HOOKS if (fragment := hook(report, records))]
    parts.append("</body></html>")
    return {"index.html": "\n".join(p for p in parts if p) + "\n",
            MARKER: "This directory was written by `pv status --html`; pv replaces it whole.\n"}


class DashboardError(Exception):
    """The directory cannot take the dashboard; nothing was written. `usage`: the directory
    given is the wrong kind of thing (exit 2), else the machine refused the write (exit 1)."""

    def __init__(self, message: str, usage: bool = False):
        super().__init__(message)
        self.usage = usage


def check_target(target: Path) -> None:
    """Refuse a target that is a file, or an existing non-empty directory that is not a
    previous pv dashboard (its files would be deleted)."""
    if target.exists() and not target.is_dir():
        raise DashboardError(f"{target} exists and is not a directory; choose another --html DIR", usage=True)
    if target.is_dir() and any(target.iterdir()) and not (target / MARKER).is_file():
        raise DashboardError(f"{target} is not empty and is not a pv dashboard (no {MARKER} in it); pv would "
                             "replace everything in it. Choose an empty or new directory", usage=True)


def write(target: Path, files: dict[str, str]) -> None:
    """Write the files into a new directory beside `target`, then put it in `target`'s place
    (a rename): a reader sees the old dashboard or the new one, never half of either."""
    target = Path(target)
    check_target(target)
    parent = target.resolve().parent
    if not parent.is_dir():
        raise DashboardError(f"{parent} does not exist; create it or choose another --html DIR")
    try:
        staging = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.", suffix=".tmp"))
    except OSError as exc:
        raise DashboardError(f"cannot write in {parent}: {exc.strerror or exc}; choose a writable --html DIR") from None
    old: Path | None = None
    try:
        for name, text in files.items():
            (staging / name).write_text(text, encoding="utf-8")
        os.chmod(staging, 0o755)
        if target.exists():
            old = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.", suffix=".old"))
            os.rmdir(old)
            os.replace(target, old)
        os.replace(staging, target)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if old is not None and old.exists() and not target.exists():
            os.replace(old, target)  # put the previous dashboard back
        raise DashboardError(f"cannot write {target}: {exc.strerror or exc}; nothing was changed") from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def publish(report: Any, ledger_path: Path, target: Path) -> int:
    """Render from the report and the ledger's records and write into `target`; returns how
    many cells are flagged as shrinking."""
    from pv import ledger

    records = ledger.read(ledger_path).records if Path(ledger_path).exists() else []
    check_target(Path(target))  # before rendering: a refusal costs nothing
    files = render(report, records)
    write(Path(target), files)
    return files["index.html"].count('data-flag="shrinking"')
