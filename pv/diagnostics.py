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


# A hint for every code, used when the check that found the problem had nothing more specific.
DEFAULT_HINTS: dict[str, str] = {
    "PV100": "check the path and the file's permissions",
    "PV101": "look at this line and the one before: indentation (spaces only), quotes, brackets, `key: value`",
    "PV102": "remove the tag; contracts are plain YAML data",
    "PV103": "contracts need no aliases; write the values out",
    "PV104": "a contract is a few kilobytes",
    "PV105": "contracts are UTF-8 YAML text",
    "PV106": "start from an existing contract in contracts/",
    "PV107": "a contract starts with `metadata:`",
    "PV108": "contracts are a few levels deep",
    "PV199": "this is a bug in pv; please report it with the file",
    "PV201": "check the spelling against docs/contract-format.md",
    "PV202": "add this key (docs/contract-format.md lists the required keys)",
    "PV203": "docs/contract-format.md gives each key's type",
    "PV204": "docs/contract-format.md gives each key's allowed values",
    "PV205": "remove or rename one of them",
    "PV209": "write true / false for a boolean, or quote the word for text",
    "PV301": "ids are unique across the contracts dir; rename one",
    "PV302": "ids are unique across the contracts dir; rename one",
    "PV303": "ids are unique across the contracts dir; rename one",
    "PV304": "rename the file to <metadata.id>-v<major>.yaml",
    "PV305": "obligations may only name falsifiers of the same contract",
    "PV306": "depends_on names metadata.id of a contract in the contracts dir",
    "PV307": "a contract cannot depend on itself, directly or through others",
    "PV401": "allowed: numbers, names, + - * / ** %, comparisons, and/or/not, ln log log2 log10 exp sqrt abs min max",
    "PV406": "names in pv expressions are ASCII letters, digits and _",
    "PV403": "allowed: numbers, names, + - * / ** %, comparisons, and/or/not, ln log log2 log10 exp sqrt abs min max",
}


def internal_error(path: str, exc: BaseException) -> Diagnostic:
    """PV199: pv itself failed on this file. Callers catch the failure per file, so a bug in
    pv never hides the other files' problems (nor prints a traceback)."""
    return Diagnostic(path=path, line=0, col=0, code="PV199",
                      message=f"internal error while checking this file: {type(exc).__name__}: {exc}",
                      hint=DEFAULT_HINTS["PV199"])


def with_default_hint(d: Diagnostic) -> Diagnostic:
    """The diagnostic, with the code's default hint when it has none of its own."""
    if d.hint or d.code not in DEFAULT_HINTS:
        return d
    from dataclasses import replace

    return replace(d, hint=DEFAULT_HINTS[d.code])


def did_you_mean(word: str, candidates: list[str], otherwise: str, *, cutoff: float = 0.7) -> str:
    """The hint for a name that is not one of `candidates`: "did you mean 'X'?" for the one most
    like `word` (difflib's similarity ratio, at least `cutoff`), `otherwise` when none is that
    close. The one "did you mean" rule of pv validate's checks."""
    import difflib  # lazily: only a misspelling pays for it

    near = difflib.get_close_matches(word, candidates, n=1, cutoff=cutoff)
    return f"did you mean {near[0]!r}?" if near else otherwise


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
