"""Markdown for the dashboard (docs/STATUS.md): text made safe for table cells, tables, and
the section of a user's own checkpoints (`pv run --subject-path`)."""

from __future__ import annotations

import re
from typing import Any

# Characters that could break a table row, open HTML, a link or a code span. (`_`, `#` and `~`
# only format text in the places pv puts contract text, so they are left readable.)
_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|&])")


def md_text(value: Any) -> str:
    """Contract or ledger text, safe inside a table cell or after a bullet: markdown and HTML
    punctuation backslash-escaped, line breaks as <br>."""
    lines = str(value).splitlines() or [""]
    return "<br>".join(_MD_SPECIAL.sub(r"\\\1", line) for line in lines)


def md_code(value: Any) -> str:
    """Text as an inline code span, safe inside a table cell (one line, pipes escaped)."""
    text = " ".join(str(value).split()).replace("|", "\\|")
    if not text:
        return ""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def fmt_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(cell if cell else " " for cell in row) + " |" for row in rows]
    return out
