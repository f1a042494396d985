"""What `pv run` prints on a terminal: one progress line per finished test, the table of
verdicts with observed values and margins, the explanations of what did not pass, and the
summary lines. (Machine-readable forms are pv.report's.)"""

from __future__ import annotations

from typing import Any

import click

from pv.outcome import Outcome

_COLOURS = {"PASS": "green", "FAIL": "red", "ERROR": "red", "SKIP": "yellow"}


def _margin(value: Any) -> str:
    if value is None:
        return "-"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return "0" if number == 0 else f"{number:+.4g}"


def _observed(observations: dict[str, Any], limit: int = 60) -> str:
    parts = []
    for key, value in sorted(observations.items()):
        parts.append(f"{key}={value:.6g}" if isinstance(value, float) else f"{key}={value}")
    text = ", ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short(message: str, limit: int) -> str:
    """One line of a message for a progress line or a table cell."""
    first = str(message).strip().split("\n")[0]
    if first.startswith("unbound falsifier"):
        return "unbound: the contract gives no `check:`"
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _verdict(verdict: str, mutant: str | None) -> str:
    text = verdict
    if mutant and verdict == "FAIL":
        text = "FAIL (killed)"
    elif mutant and verdict == "PASS":
        text = "PASS (survived)"
    return click.style(text.ljust(5), fg=_COLOURS.get(verdict), bold=verdict != "PASS")


def progress_line(event: Outcome, done: int, total: int, mutant: str | None) -> str:
    verdict = _verdict(event.verdict, mutant)
    extra = ""
    if event.verdict in ("SKIP", "ERROR") and event.message:
        extra = f"  {_short(event.message, 100)}"
    where = event.device if not event.subject else f"{event.device}[{event.subject}]"
    return (f"[{done}/{total}] {event.falsifier}  {where:<4}  {verdict}  "
            f"margin {_margin(event.margin)}  {float(event.duration_s or 0):.2f}s{extra}")


def print_table(result: Any, mutant: str | None, repeat: int) -> None:
    rows = []
    with_subjects = any(e.subject for e in result.outcomes)  # the column only when a subject ran
    for event in result.outcomes:
        row = [event.falsifier] + ([event.subject or "—"] if with_subjects else []) + [event.device]
        if repeat > 1:
            row.append(str(event.repeat or ""))
        row += [event.verdict, _margin(event.margin),
                f"{float(event.duration_s or 0):.2f}s",
                _observed(event.observations or {}) or _short(event.message or "", 60)]
        rows.append(row)
    header = ["FALSIFIER"] + (["SUBJECT"] if with_subjects else []) + ["DEVICE"] + (["#"] if repeat > 1 else []) + ["VERDICT", "MARGIN", "TIME", "OBSERVED"]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    verdict_col = header.index("VERDICT")
    click.echo("")
    click.echo("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    for row in rows:
        cells = []
        for i, (cell, width) in enumerate(zip(row, widths)):
            text = str(cell).ljust(width)
            if i == verdict_col:
                text = click.style(text, fg=_COLOURS.get(str(cell)), bold=cell != "PASS")
            cells.append(text)
        click.echo("  ".join(cells).rstrip())
    details = [e for e in result.outcomes if e.verdict in ("FAIL", "ERROR", "SKIP") and e.message]
    unbound = [e for e in details if str(e.message).startswith("unbound falsifier")]
    if unbound:
        click.echo("")
        click.echo(click.style(f"ERROR: {len(unbound)} unbound falsifier test(s) — no `check:` in the contract, so "
                               "nothing can falsify them yet:", bold=True))
        for event in unbound:
            click.echo(f"  {event.falsifier} on {event.device}")
    skips: dict[str, list[str]] = {}
    for event in details:
        if event.verdict == "SKIP":
            skips.setdefault(str(event.message).strip(), []).append(f"{event.falsifier} on {event.device}")
    for reason, tests in skips.items():
        click.echo("")
        click.echo(click.style(f"SKIP — not evidence ({len(tests)}): {reason}", bold=True, fg="yellow"))
        click.echo("  " + ", ".join(tests))
    for event in (e for e in details if e not in unbound and e.verdict != "SKIP"):
        click.echo("")
        click.echo(click.style(f"{event.verdict} {event.falsifier} on {event.device}:", bold=True))
        for line in str(event.message).strip("\n").split("\n"):
            click.echo(f"  {line}")


def summary_lines(result: Any, mutant: str | None, ledger_label: str | None) -> list[str]:
    passed, failed, errored, skipped = (result.count(v) for v in ("PASS", "FAIL", "ERROR", "SKIP"))
    if mutant:
        head = f"under mutant {mutant}: {failed} killed (FAIL), {passed} survived (PASS), {errored} errored"
    else:
        head = f"{passed} passed, {failed} falsified, {errored} errored"
    lines = [head]
    if skipped:
        lines.append(f"{skipped} skipped — not evidence (a SKIP never discharges a falsifier)")
    recorded = sum(1 for e in result.outcomes if e.record_id)
    lines.append("dry run: no ledger records written" if ledger_label is None
                 else f"{recorded} record(s) appended to {ledger_label} (run {result.run_id})")
    return lines
