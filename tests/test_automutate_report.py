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
    from pv.statusreport import load_all

    [loaded] = load_all(ws.workspace())[0]   # the killer's definition, as `pv mutate` records it
    killer = {"FALSIFY-DEMO-001": loaded.contract.falsification_tests[0].definition_sha256()}
    lines = [_line("aaaaaaaaaaaa", "KILLED", digest, killed_by="FALSIFY-DEMO-001", definitions=killer),
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


def test_attack_a_kill_by_a_falsifier_defined_otherwise_since_is_not_counted(tmp_path, monkeypatch):
    """Attack: `pv mutate` records KILLED by FALSIFY-DEMO-001 at a tight bound; a contributor then
    loosens that falsifier's prediction until it would let the mutant through (or removes the
    falsifier), touching nothing in lib/core.py. The dashboard checked only the mutated module's
    digest, so it still scored the mutant killed: 1/1 (100%) on a falsifier that may no longer
    kill it. `pv mutate` itself reopens such a kill (results.is_fresh: the killer's definition must
    be the one it ran); the dashboard now leaves it out the same way and says so."""
    ws = make_workspace(tmp_path)
    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001", prediction="val_loss < 0.7 * ln(vocab_size)")])
    (ws.root / "lib").mkdir()
    (ws.root / "lib" / "__init__.py").write_text("", encoding="utf-8")
    (ws.root / "lib" / "core.py").write_text(CODE, encoding="utf-8")
    ws.enter(monkeypatch)
    tight = ws.workspace()
    from pv.statusreport import load_all

    [loaded] = load_all(tight)[0]
    then = loaded.contract.falsification_tests[0].definition_sha256()
    digest = digest_source(CODE.encode())
    lines = [_line("aaaaaaaaaaaa", "KILLED", digest, killed_by="FALSIFY-DEMO-001",
                   definitions={"FALSIFY-DEMO-001": then}),
             _line("bbbbbbbbbbbb", "KILLED", digest, killed_by="FALSIFY-GONE-001",
                   definitions={"FALSIFY-GONE-001": then}),  # a killer no contract has any more
             _line("cccccccccccc", "SURVIVED", digest)]
    (ws.root / "evidence").mkdir(exist_ok=True)
    (ws.root / "evidence" / "mutation.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    honest = status("--stdout").output.split("## Mutation score", 1)[1]
    assert "1/2 killed (50.0%)" in honest   # the kill by the falsifier as it ran counts; the gone one does not

    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001", prediction="val_loss < 100 * ln(vocab_size)")])
    loosened = status("--stdout")
    assert loosened.exit_code == 0, loosened.output
    text = loosened.output.split("## Mutation score", 1)[1]
    assert_contains(text, ["0/1 killed (0.0%)", "| `lib.core` | 0.0% | 0/1 | 1 |",
                           "2 kill(s) by a falsifier defined otherwise since"])
    assert "1/2 killed" not in text and "100.0%" not in text
