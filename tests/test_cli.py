"""The `pv` command group (pv/cli.py): verb typos get a suggestion; every verb that works on a
project refuses to run outside one (exit 2, a clear message, nothing written)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pv.cli import VERBS, main
from pv.config import find_pyproject

# One invocation per verb (and per ledger subcommand), with arguments that would otherwise be
# accepted, so the refusal comes from the missing project and not from click's parsing.
OUTSIDE = {
    "validate": ["validate"],
    "generate": ["generate"],
    "generate --check": ["generate", "--check"],
    "run": ["run", "--all", "--device", "cpu", "--no-ledger"],
    "status": ["status"],
    "status --check": ["status", "--check"],
    "status --promote": ["status", "--promote"],
    "strength": ["strength", "--device", "cpu", "--no-ledger"],
    "bisect": ["bisect", "tiny-trained", "--a", "cpu:reference", "--b", "cpu:fast"],
    "ledger check": ["ledger", "check"],
    "ledger show": ["ledger", "show"],
    "ledger merge": ["ledger", "merge", "other.jsonl"],
    "measure": ["measure", "FALSIFY-X-001"],
}
# Verbs that make or serve a project and so run anywhere.
ANYWHERE = {"init", "schema"}


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_every_verb_is_covered_here():
    covered = {args[0] for args in OUTSIDE.values()}
    assert covered | ANYWHERE == set(VERBS), "add the new verb to OUTSIDE (or ANYWHERE)"


@pytest.mark.parametrize("name", sorted(OUTSIDE))
def test_verb_refuses_outside_a_pv_project(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    outside = tmp_path / "not-a-project"
    outside.mkdir()
    # a pyproject.toml without [tool.pv] does not make a pv project
    (outside / "pyproject.toml").write_text('[project]\nname = "other"\n')
    (outside / "other.jsonl").write_text("")
    assert find_pyproject(outside) is None  # precondition: no [tool.pv] above tmp_path either
    monkeypatch.chdir(outside)
    before = sorted(p.relative_to(outside) for p in outside.rglob("*"))

    result = invoke(*OUTSIDE[name])

    assert result.exit_code == 2, result.output
    assert "not inside a pv project" in result.output and "pv init" in result.output
    assert "Traceback" not in result.output
    assert sorted(p.relative_to(outside) for p in outside.rglob("*")) == before  # nothing written


@pytest.mark.parametrize(("typed", "meant"), [("valdate", "validate"), ("generat", "generate"), ("stauts", "status"),
                                              ("strenght", "strength"), ("shema", "schema")])
def test_verb_typo_gets_a_suggestion(typed: str, meant: str):
    result = invoke(typed)
    assert result.exit_code == 2
    assert f"No such command '{typed}'. Did you mean '{meant}'?" in result.output


def test_suggestions_read_like_the_ledger_subcommands():
    top, sub = invoke("valdate"), invoke("ledger", "chek")
    assert "Did you mean 'validate'?" in top.output and "Did you mean 'check'?" in sub.output


def test_unrelated_word_gets_no_suggestion():
    result = invoke("xyzzy")
    assert result.exit_code == 2
    assert "No such command 'xyzzy'." in result.output and "Did you mean" not in result.output


def test_help_lists_every_verb_without_importing_them():
    result = invoke("--help")
    assert result.exit_code == 0
    for verb in VERBS:
        assert f"  {verb} " in result.output


def test_a_file_pv_cannot_write_is_one_line_and_exit_1_not_a_traceback(tmp_path, monkeypatch):
    """An OSError from the machine (here generated_dir runs through a file; a read-only
    directory or a full disk is the same) names the path, exits 1, prints no traceback."""
    from click.testing import CliRunner

    from pv.cli import main
    from pv_workspace import falsifier, make_workspace

    ws = make_workspace(tmp_path)
    pyproject = ws.root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('generated_dir = "generated_tests"',
                                                       'generated_dir = "pyproject.toml/generated"'))
    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001")])
    monkeypatch.chdir(ws.root)
    result = CliRunner().invoke(main, ["generate"])
    assert result.exit_code == 1, result.output
    assert "cannot access" in result.output and "pyproject.toml" in result.output and "Not a directory" in result.output
    assert isinstance(result.exception, SystemExit)
