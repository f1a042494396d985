"""What `pv run` hands to other tools: one JSON document, a JUnit XML file, and the spread of
repeated runs.

    document(result, ...)   every outcome (verdict, observations, margin, explanation) + counts
    junit_xml(result)       the same outcomes as JUnit XML (CI systems show it per test)
    spreads(outcomes)       per falsifier cell: min/max/mean of each numeric observation and of
                            the margin over the repetitions of `pv run --repeat N`

`result` is pv run's RunResult (duck-typed here: outcomes, run_id, missing, unrecorded, ok,
count()); nothing in this module runs a test or writes the ledger.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any, Iterable

from pv import explain
from pv.outcome import Outcome

FORMAT_VERSION = 1


def explanation(outcome: Outcome) -> str:
    """One line saying why the verdict is not PASS: the false clauses of a FAIL (pv.explain),
    the first line of an ERROR's or SKIP's message; '' for a PASS."""
    if outcome.verdict == "PASS":
        return ""
    if outcome.verdict == "FAIL" and outcome.prediction:
        why = explain.explanation(outcome.prediction, outcome.observations or {})
        if why:
            return why
    return str(outcome.message or "").strip().split("\n")[0]


def cell_label(outcome: Outcome) -> str:
    inside = outcome.device if not outcome.subject else f"{outcome.device}-{outcome.subject}"
    return f"{outcome.falsifier}[{inside}]"


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


@dataclass
class Stat:
    values: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        if not self.values:
            return {"n": 0, "min": None, "max": None, "mean": None, "range": None}
        lo, hi = min(self.values), max(self.values)
        return {"n": len(self.values), "min": lo, "max": hi, "mean": sum(self.values) / len(self.values),
                "range": hi - lo}


@dataclass
class Spread:
    """One falsifier cell over its repetitions."""

    falsifier: str
    device: str
    subject: str | None
    verdicts: dict[str, int] = field(default_factory=dict)
    observations: dict[str, Stat] = field(default_factory=dict)
    margin: Stat = field(default_factory=Stat)

    def as_dict(self) -> dict[str, Any]:
        return {"falsifier": self.falsifier, "device": self.device, "subject": self.subject,
                "verdicts": dict(sorted(self.verdicts.items())),
                "observations": {k: v.as_dict() for k, v in sorted(self.observations.items())},
                "margin": self.margin.as_dict()}


def spreads(outcomes: Iterable[Outcome]) -> list[Spread]:
    """Group outcomes by cell (falsifier, device, subject), first-seen order."""
    cells: dict[tuple[Any, Any, Any], Spread] = {}
    for o in outcomes:
        key = (o.falsifier, o.device, o.subject)
        cell = cells.setdefault(key, Spread(str(o.falsifier), o.device, o.subject))
        cell.verdicts[o.verdict] = cell.verdicts.get(o.verdict, 0) + 1
        for name, value in (o.observations or {}).items():
            number = _finite(value)
            if number is not None:
                cell.observations.setdefault(name, Stat()).values.append(number)
        margin = _finite(o.margin)
        if margin is not None:
            cell.margin.values.append(margin)
    return list(cells.values())


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def spread_lines(cells: list[Spread]) -> list[str]:
    """The text `pv run --repeat N` prints after its table."""
    lines = ["spread over the repetitions (min .. max, mean):"]
    for cell in cells:
        where = cell.device if not cell.subject else f"{cell.device}[{cell.subject}]"
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(cell.verdicts.items()))
        lines.append(f"  {cell.falsifier} on {where}: {verdicts}")
        rows = [("margin", cell.margin.as_dict())] + [(k, s.as_dict()) for k, s in sorted(cell.observations.items())]
        for name, stat in rows:
            if stat["n"]:
                lines.append(f"    {name}: {_g(stat['min'])} .. {_g(stat['max'])}, mean {_g(stat['mean'])}")
    return lines


def outcome_entry(o: Outcome) -> dict[str, Any]:
    return {"falsifier": o.falsifier, "contract": o.contract, "device": o.device, "subject": o.subject,
            "repeat": o.repeat, "mutant": o.mutant, "verdict": o.verdict, "prediction": o.prediction,
            "observations": o.observations or {}, "margin": o.margin, "explanation": explanation(o),
            "message": o.message or "", "duration_s": o.duration_s, "seed": o.seed, "record_id": o.record_id}


def document(result: Any, *, device: str, mutant: str | None, ledger: str | None, repeat: int) -> dict[str, Any]:
    """The whole run as one JSON-ready mapping (`pv run --format json`)."""
    counts = {v: result.count(v) for v in ("PASS", "FAIL", "ERROR", "SKIP")}
    doc: dict[str, Any] = {
        "format": "pv-run", "format_version": FORMAT_VERSION, "run_id": result.run_id, "ok": result.ok,
        "device": device, "mutant": mutant, "repeat": repeat, "ledger": ledger,
        "counts": counts, "outcomes": [outcome_entry(o) for o in result.outcomes],
        "missing": list(result.missing),
        "unrecorded": [cell_label(o) for o in result.unrecorded],
    }
    if repeat > 1:
        doc["spread"] = [c.as_dict() for c in spreads(result.outcomes)]
    return doc


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no nan/inf; the text keeps what was seen
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def document_text(result: Any, **kwargs: Any) -> str:
    return json.dumps(_json_safe(document(result, **kwargs)), indent=2, sort_keys=False, allow_nan=False) + "\n"


def junit_xml(result: Any, *, suite: str = "pv run") -> str:
    """JUnit XML: one <testcase> per outcome (classname: the contract; name: falsifier[device]);
    FAIL -> <failure>, ERROR -> <error>, SKIP -> <skipped> (CI shows a skip as a skip, and
    pv run's exit status already says a SKIP is not evidence); observations and margin in
    <system-out>. A selected test that reported no verdict is an <error> too."""
    root = ET.Element("testsuites")
    total_time = sum(float(o.duration_s or 0) for o in result.outcomes)
    missing = list(result.missing)
    tests = len(result.outcomes) + len(missing)
    counts = {v: result.count(v) for v in ("FAIL", "ERROR", "SKIP")}
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(tests), failures=str(counts["FAIL"]),
                       errors=str(counts["ERROR"] + len(missing)), skipped=str(counts["SKIP"]),
                       time=f"{total_time:.3f}")
    ET.SubElement(ET.SubElement(ts, "properties"), "property", name="run_id", value=str(result.run_id))
    for o in result.outcomes:
        name = cell_label(o) + (f" #{o.repeat}" if o.repeat and o.repeat > 1 else "")
        case = ET.SubElement(ts, "testcase", classname=str(o.contract or "pv"), name=name,
                             time=f"{float(o.duration_s or 0):.3f}")
        tag = {"FAIL": "failure", "ERROR": "error", "SKIP": "skipped"}.get(o.verdict)
        if tag:
            child = ET.SubElement(case, tag, message=_clean(explanation(o)))
            child.text = _clean(o.message or "")
        observed = ", ".join(f"{k}={v}" for k, v in sorted((o.observations or {}).items()))
        ET.SubElement(case, "system-out").text = _clean(
            f"prediction: {o.prediction}\nobserved: {observed}\nmargin: {o.margin}\nverdict: {o.verdict}")
    for nodeid in missing:
        case = ET.SubElement(ts, "testcase", classname="pv", name=nodeid, time="0")
        ET.SubElement(case, "error", message="reported no verdict (see pytest's output)")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _clean(text: str) -> str:
    """XML 1.0 cannot carry most control characters; a check's message may hold them."""
    return "".join(ch if ch in "\t\n\r" or ord(ch) >= 32 else f"\\x{ord(ch):02x}" for ch in str(text))


def write_junit(path: str, result: Any) -> bool:
    """Write JUnit XML to `path` atomically (pv.atomic: a reader never sees half a file). A path
    that cannot be written is reported on stderr (which path, why); returns whether it was
    written. The run's own evidence is not affected."""
    import click

    from pv.atomic import write_text

    try:
        write_text(path, junit_xml(result))
    except OSError as exc:
        click.echo(click.style(f"--junitxml {path}: cannot write it ({exc.strerror or exc}); nothing was written "
                               "there. Choose a writable path.", fg="red", bold=True), err=True)
        return False
    click.echo(f"wrote JUnit XML to {path}", err=True)
    return True
