"""Problems found in contracts, printed as `path:line:col: CODE message` with a hint.

Codes are stable; tests and tools key on them. Families:
  PV1xx loading (YAML syntax, unsafe tags, alias bombs, size, binary, empty)
  PV2xx schema (unknown key, missing key, wrong type, bad value)
  PV3xx cross-checks (duplicate id, dangling reference, cycle, check binding, mutants)
  PV4xx expressions (prediction / formula language)
  PV5xx evidence (declared status vs computed status)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from enum import Enum


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Diagnostic:
    path: str
    line: int  # 1-based; 0 when the problem concerns the file as a whole
    col: int  # 1-based; 0 when unknown
    code: str
    message: str
    hint: str = ""
    severity: Severity = Severity.ERROR

    def format(self) -> str:
        level = "" if self.severity is Severity.ERROR else "warning: "
        text = f"{self.path}:{self.line}:{self.col}: {self.code} {level}{self.message}"
        if self.hint:
            text += f"\n    hint: {self.hint}"
        return text

    def to_json(self) -> dict:
        data = asdict(self)
        data["severity"] = self.severity.value
        return data


def sort_key(d: Diagnostic) -> tuple:
    return (d.path, d.line, d.col, d.code)


def render_json(diagnostics: list[Diagnostic], files_checked: int, **extra: object) -> str:
    """The JSON report: counts, any `extra` fields (e.g. contracts, falsifiers), diagnostics."""
    errors = sum(d.severity is Severity.ERROR for d in diagnostics)
    return json.dumps(
        {
            "files": files_checked,
            **extra,
            "errors": errors,
            "warnings": len(diagnostics) - errors,
            "diagnostics": [d.to_json() for d in sorted(diagnostics, key=sort_key)],
        },
        indent=2,
    )
