"""Reading contracts of the provable-contracts dialect (`pv validate --dialect provable-contracts`).

That toolchain shares pv's key names (metadata, equations, proof_obligations,
falsification_tests with id/rule/prediction/if_fails) but not its rules. The lenient reading:
  - the YAML is loaded exactly as pv loads its own contracts (safe, bounded, positions);
    a file that does not load, or is not a mapping, is an error;
  - unknown top-level sections (kani_harnesses, qa_gate, ...) are allowed, and counted;
  - unknown keys inside known sections are ignored, and counted;
  - missing ids (contract, obligation, falsifier) are tolerated, and counted;
  - formulas are free text (counted: how many happen to parse in pv's language);
  - everything else that pv's strict schema would reject, and every prediction that is not
    in pv's expression language, is a warning: it is what pv could not execute.
The report says how much of the corpus pv can read, and what stands in the way most often.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pv import keypaths as K
from pv.diagnostics import Diagnostic, Severity, internal_error

# (section, key) of the ids the dialect may leave out
_ID_KEYS = {(p.parts[0], p.key) for p in (K.CONTRACT_ID, K.OBLIGATION_ID, K.FALSIFIER_ID)}


@dataclass
class DialectReport:
    files: int = 0
    loaded: int = 0  # YAML loads and is a mapping
    load_problems: Counter = field(default_factory=Counter)  # code -> files
    strict_valid: int = 0  # files pv's own schema accepts as they are
    with_metadata: int = 0
    with_metadata_id: int = 0
    with_falsification_tests: int = 0
    falsifiers: int = 0
    falsifiers_with_id: int = 0
    falsifiers_with_check: int = 0
    predictions: int = 0
    predictions_parse: int = 0
    predictions_boolean: int = 0
    prediction_errors: Counter = field(default_factory=Counter)  # first words of the ExprError
    obligations: int = 0
    obligations_with_id: int = 0
    formulas: int = 0
    formulas_parse: int = 0
    duplicate_falsifier_ids: int = 0
    sections_ignored: Counter = field(default_factory=Counter)  # unknown top-level section -> files
    keys_ignored: Counter = field(default_factory=Counter)  # e.g. falsification_tests[].test -> times
    ids_missing: Counter = field(default_factory=Counter)
    problems: Counter = field(default_factory=Counter)  # "PV202 metadata.kind: missing" -> times
    examples: dict = field(default_factory=dict)  # problem -> Counter of offending values (enums)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in self.__dict__.items():
            if isinstance(value, Counter):
                value = dict(value.most_common())
            elif name == "examples":
                value = {k: dict(v.most_common()) for k, v in value.items()}
            out[name] = value
        return out

    def format_text(self, top: int = 8) -> str:
        def pct(n: int, d: int) -> str:
            return f"{n} of {d} ({100 * n / d:.0f}%)" if d else f"{n} of 0"

        lines = [
            "provable-contracts dialect: what pv could read",
            f"  YAML loads (mapping):            {pct(self.loaded, self.files)}",
            f"  valid under pv's strict schema:  {pct(self.strict_valid, self.files)}",
            f"  have metadata / metadata.id:     {self.with_metadata} / {self.with_metadata_id}",
            f"  have falsification_tests:        {pct(self.with_falsification_tests, self.files)}, "
            f"{self.falsifiers} tests ({self.falsifiers_with_id} with id)",
            f"  predictions parse in pv:         {pct(self.predictions_parse, self.predictions)}"
            f" ({self.predictions_boolean} boolean)",
            f"  formulas parse in pv:            {pct(self.formulas_parse, self.formulas)}",
            f"  falsifiers bound to a check:     {pct(self.falsifiers_with_check, self.falsifiers)}",
            f"  proof obligations (with id):     {self.obligations} ({self.obligations_with_id})",
            f"  duplicate falsifier ids:         {self.duplicate_falsifier_ids}",
        ]
        if self.load_problems:
            lines.append("  files that do not load: " + _top(self.load_problems, top))
        if self.sections_ignored:
            lines.append("  sections pv ignores (files): " + _top(self.sections_ignored, top))
        if self.keys_ignored:
            lines.append("  keys pv ignores (times): " + _top(self.keys_ignored, top))
        if self.problems:
            lines.append("  most common problems (times):")
            for what, n in self.problems.most_common(top):
                seen = self.examples.get(what)
                values = f" ({_top(seen, 4)})" if seen else ""
                lines.append(f"    {n:5d}  {what}{values}")
        if self.prediction_errors:
            lines.append("  why predictions do not parse (times):")
            lines += [f"    {n:5d}  {what}" for what, n in self.prediction_errors.most_common(top)]
        return "\n".join(lines)


def _top(counter: Counter, n: int) -> str:
    return ", ".join(f"{k} ({v})" for k, v in counter.most_common(n))


def _generic(loc: tuple) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += "[]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _warn(d: Diagnostic) -> Diagnostic:
    return Diagnostic(path=d.path, line=d.line, col=d.col, code=d.code, message=d.message, hint=d.hint,
                      severity=Severity.WARNING)


_PROSE = re.compile(r"\b(?!(?:and|or|not)\b)[A-Za-z_]\w*\s+(?!(?:and|or|not)\b)[A-Za-z_]\w*\b")


def _expr_reason(message: str, text: str = "") -> str:
    """A short class of an expression error, for counting."""
    if message.startswith("syntax error") and _PROSE.search(text):
        return "prose: words side by side, not an expression"
    if message.startswith("syntax error") and any(ord(ch) > 127 for ch in text):
        return "mathematical notation (non-ASCII symbols)"
    for marker in (" is not allowed", ":"):
        if marker in message:
            head = message.split(marker)[0]
            if head.startswith("syntax error"):
                return message.split(" (")[0][:60]
            if head.startswith("the literal"):
                return "a text literal" if "'" in head or '"' in head else "a literal"
            if head.startswith("the name"):
                return "a name with a leading underscore"
            if head.startswith("the function"):
                return "a function outside pv's list"
            return head[:60]
    return message[:60]


def read_dialect(paths: list[Path], display: Callable[[Path], str]) -> tuple[list[Diagnostic], DialectReport]:
    from pydantic import ValidationError

    from pv import expr
    from pv.crosscheck import expr_diagnostic
    from pv.safe_yaml import read_yaml
    from pv.schema_errors import data_loc, schema_diagnostics
    from pv.schema import Contract

    report = DialectReport(files=len(paths))
    out: list[Diagnostic] = []
    falsifier_ids: Counter = Counter()
    for path in paths:
        name = display(path)
        try:
            loaded, problems = read_yaml(path, name)
        except Exception as exc:  # noqa: BLE001
            out.append(internal_error(name, exc))
            report.load_problems["PV199"] += 1
            continue
        if loaded is None:
            out += problems
            for d in problems:
                report.load_problems[d.code] += 1
            continue
        out += [_warn(d) for d in problems]  # duplicate keys: pv would refuse, the dialect reads on
        data = loaded.data
        if not isinstance(data, dict):
            out.append(Diagnostic(name, 1, 1, "PV107", f"top level is a {type(data).__name__}, not a mapping"))
            report.load_problems["PV107"] += 1
            continue
        report.loaded += 1
        meta = data.get(K.METADATA.key)
        if isinstance(meta, dict):
            report.with_metadata += 1
            report.with_metadata_id += isinstance(meta.get(K.CONTRACT_ID.key), str)
        tests = data.get(K.FALSIFIERS.key)
        tests = [t for t in tests if isinstance(t, dict)] if isinstance(tests, list) else []
        report.with_falsification_tests += bool(tests)
        obligations = data.get(K.OBLIGATIONS.key)
        obligations = [o for o in obligations if isinstance(o, dict)] if isinstance(obligations, list) else []
        report.obligations += len(obligations)
        report.obligations_with_id += sum(isinstance(o.get(K.OBLIGATION_ID.key), str) for o in obligations)
        # The strict schema, read leniently.
        counted_here: set[str] = set()
        try:
            Contract.model_validate(data)
            report.strict_valid += 1
        except ValidationError as exc:
            for err in exc.errors():
                loc = tuple(err["loc"])
                generic = _generic(loc)
                if err["type"] == "extra_forbidden":
                    if len(loc) == 1:
                        report.sections_ignored[str(loc[0])] += 1
                    else:
                        report.keys_ignored[generic] += 1
                    continue
                if err["type"] == "missing" and (loc[0], loc[-1]) in _ID_KEYS:
                    report.ids_missing[generic] += 1
                    continue
                what = _problem_class(err, generic)
                place = what + "@" + repr(data_loc(data, loc)[0])
                if place not in counted_here:  # a union reports once per member; count the place once
                    counted_here.add(place)
                    report.problems[what] += 1
                    value = loaded.value_at(loc)
                    if isinstance(value, (str, int, float)) and not isinstance(value, bool) and err["type"] == "enum":
                        report.examples.setdefault(what, Counter())[str(value)] += 1
            kept = [d for d in schema_diagnostics(loaded, exc)
                    if d.code != "PV201" and not (d.code == "PV202" and d.message.endswith(".id"))]
            out += [_warn(d) for d in kept]
        # Predictions in pv's expression language; formulas only counted.
        for i, test in enumerate(data.get(K.FALSIFIERS.key) or []):
            if not isinstance(test, dict):
                continue
            report.falsifiers += 1
            fid = test.get(K.FALSIFIER_ID.key)
            if isinstance(fid, str):
                report.falsifiers_with_id += 1
                falsifier_ids[fid] += 1
            report.falsifiers_with_check += isinstance(test.get(K.CHECK.key), str)
            prediction = test.get(K.PREDICTION.key)
            if not isinstance(prediction, str):
                continue
            report.predictions += 1
            try:
                parsed = expr.parse(prediction)
            except expr.ExprError as exc:
                report.prediction_errors[_expr_reason(exc.message, prediction)] += 1
                out.append(_warn(expr_diagnostic(loaded, K.PREDICTION.at(i), "PV401", exc,
                                            "prediction")))
                continue
            report.predictions_parse += 1
            if expr.is_boolean(parsed):
                report.predictions_boolean += 1
            else:
                out.append(Diagnostic(name, *loaded.position(K.PREDICTION.at(i)), "PV402",
                                      f"prediction {parsed.text!r} is not true/false at the top level",
                                      severity=Severity.WARNING))
        equations = data.get(K.EQUATIONS.key)
        for eq in (equations.values() if isinstance(equations, dict) else []):
            if isinstance(eq, dict) and isinstance(eq.get(K.FORMULA.key), str):
                report.formulas += 1
                try:
                    expr.parse(eq[K.FORMULA.key])
                    report.formulas_parse += 1
                except expr.ExprError:
                    pass
    report.duplicate_falsifier_ids = sum(1 for n in falsifier_ids.values() if n > 1)
    return out, report


_KIND_WORDS = {
    "missing": "missing",
    "enum": "not one of pv's values",
    "string_pattern_mismatch": "does not match pv's pattern",
    "too_short": "empty",
    "value_error": "rejected by a rule",
    "date_from_datetime_parse": "not a date",
}


def _problem_class(err: dict, generic: str) -> str:
    """A schema error as a countable class: code, place (indices folded) and kind."""
    kind = err["type"]
    code = "PV202" if kind == "missing" else "PV203" if kind.endswith("_type") else "PV204"
    word = _KIND_WORDS.get(kind) or ("wrong type" if kind.endswith("_type") else kind.replace("_", " "))
    place = generic
    for member in (".str", ".int", ".float", ".bool"):  # union member tags of params values
        if place.endswith(member):
            place, word = place[: -len(member)], "not a plain value"
    return f"{code} {place}: {word}"
