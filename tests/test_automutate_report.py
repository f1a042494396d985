"""pv.automutate.report through `pv status`: the `## Mutation score` section appears when a
results file exists (score per module and per contract, survivors, marked equivalents), hides
results whose module changed since, and is absent (the dashboard unchanged) without one."""

from __future__ import annotations

import json

from pv.codebind import digest_source
from pv_workspace import assert_contains, cli, falsifier, make_workspace

status = cli("status")

CODE = "def scale(x, f):\n    return x * f\n"


def _line(mutant_id: str, result: str, digest: str, **extra) -> dict:
    return {"kind": "mutant", "id": mutant_id, "result": result, "module": "lib.core", "path": "lib/core.py",
            "line": 2, "col": 12, "scope": "scale", "operator": "arithmetic", "original": "x * f",
            "replacement": "x / f", "module_digest": digest, "contracts": ["demo"], "killed_by": None,
            "suite": "s", "diff": "", **extra}


def test_status_shows_the_mutation_section(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path)
    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001")])
    (ws.root / "lib").mkdir()
    (ws.root / "lib" / "__init__.py").write_text("", encoding="utf-8")
    (ws.root / "lib" / "core.py").write_text(CODE, encoding="utf-8")
    ws.enter(monkeypatch)
    without = status("--stdout")
    assert without.exit_code == 0 and "## Mutation score" not in without.output

    digest = digest_source(CODE.encode())
    lines = [_line("aaaaaaaaaaaa", "KILLED", digest, killed_by="FALSIFY-DEMO-001"),
             _line("bbbbbbbbbbbb", "SURVIVED", digest, original="x", replacement="None", operator="return"),
             _line("cccccccccccc", "SURVIVED", digest),
             _line("dddddddddddd", "SURVIVED", "an-older-digest")]  # code changed since: hidden
    (ws.root / "evidence").mkdir(exist_ok=True)
    (ws.root / "evidence" / "mutation.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (ws.root / "evidence" / "equivalent-mutants.toml").write_text(
        '[mutants.cccccccccccc]\nreason = "f is always 1.0 here"\n', encoding="utf-8")
    shown = status("--stdout")
    assert shown.exit_code == 0, shown.output
    text = shown.output.split("## Mutation score", 1)[1]
    assert_contains(text, ["1/2 killed (50.0%)", "equivalent 1", "1 result(s) on code that has changed since",
                           "| `lib.core` | 50.0% | 1/2 | 1 |", "| `demo` | 50.0% | 1/2 | 1 |",
                           "`bbbbbbbbbbbb` | lib/core.py:2", "f is always 1.0 here"])
    assert "dddddddddddd" not in text
    assert "cccccccccccc" not in text.split("### Surviving mutants")[1].split("### Marked equivalent")[0]
