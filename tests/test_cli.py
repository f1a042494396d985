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
    "mutate": ["mutate", "--all", "--device", "cpu", "--list"],
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


def _project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, contract: str | None) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "pyproject.toml").write_text('[tool.pv]\ncontracts_dir = "contracts"\nmutants_module = "checks.mutants"\n')
    (root / "other.jsonl").write_text("")
    if contract is not None:
        (root / "contracts").mkdir()
        (root / "contracts" / "demo-v1.yaml").write_text(contract)
    monkeypatch.chdir(root)
    monkeypatch.setenv("PV_FORCE_NO_CUDA", "1")
    return root


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", sorted(OUTSIDE))
def test_a_missing_contracts_dir_is_a_usage_error_and_nothing_is_written(name, tmp_path, monkeypatch):
    """Without it, generate deleted every generated module and status wrote an empty dashboard."""
    root = _project(tmp_path, monkeypatch, None)
    (root / "generated_tests").mkdir()
    (root / "generated_tests" / "test_demo.py").write_text("# Generated by pv from contracts/demo-v1.yaml\n")
    before = _tree(root)
    result = invoke(*OUTSIDE[name])
    assert result.exit_code == 2, result.output
    assert "contracts_dir 'contracts'" in result.output and "is not a directory" in result.output
    assert "Traceback" not in result.output
    assert _tree(root) == before


BAD_TAG = """\
metadata:
  id: demo
  version: 1.0.0
  kind: pattern
  status: DRAFT
  description: !!bool foo
falsification_tests:
  - id: FALSIFY-DEMO-001
    rule: r
    prediction: loss < 1
    devices: [cpu]
    if_fails: f
"""
HUGE_INT = BAD_TAG.replace("!!bool foo", "d").replace("loss < 1", f"loss < {10 ** 400}")


@pytest.mark.parametrize("contract, where", [(BAD_TAG, "demo-v1.yaml:6:16"), (HUGE_INT, "demo-v1.yaml:10:")])
@pytest.mark.parametrize("name", sorted(n for n in OUTSIDE if not n.startswith("ledger show")))
def test_a_bad_tag_value_or_an_integer_past_float_range_is_a_diagnostic_in_every_verb(name, contract, where, tmp_path,
                                                                                      monkeypatch):
    """`!!bool foo` was a KeyError traceback, a huge integer literal an OverflowError one."""
    _project(tmp_path, monkeypatch, contract)
    result = CliRunner().invoke(main, OUTSIDE[name])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output and "PV199" not in result.output
    if name == "validate":
        assert result.exit_code == 1 and where in result.output
