"""`pv schema` (pv/commands/schema.py): the contract JSON Schema written into the adopter's
project, and the PV207/PV208 hints that point contracts at it relatively."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pv.cli import main
from pv.schema import json_schema_text
from pv_workspace import hand_written_contract

PYPROJECT = '[tool.pv]\ncontracts_dir = "contracts"\ncheck_packages = ["demo_checks"]\n'

CONTRACT = hand_written_contract()


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    (root / "contracts" / "sub").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    monkeypatch.chdir(root)
    return root


def test_prints_the_schema_by_default(project: Path):
    result = invoke("schema")
    assert result.exit_code == 0
    assert result.output == json_schema_text()
    assert json.loads(result.output)["title"] == "pv contract"


def test_write_puts_it_in_the_project_root_even_from_a_subdirectory(project: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(project / "contracts" / "sub")
    result = invoke("schema", "--write")
    assert result.exit_code == 0, result.output
    target = project / ".pv" / "contract.schema.json"
    assert target.read_text() == json_schema_text()
    assert "wrote" in result.output
    again = invoke("schema", "--write")
    assert again.exit_code == 0 and "up to date" in again.output


def test_write_to_a_given_path(project: Path):
    result = invoke("schema", "--write", "schemas/pv.json")
    assert result.exit_code == 0, result.output
    assert (project / "schemas" / "pv.json").read_text() == json_schema_text()
    assert not (project / ".pv").exists()


def test_write_outside_a_project_uses_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("schema", "--write")
    assert result.exit_code == 0, result.output
    assert (tmp_path / ".pv" / "contract.schema.json").read_text() == json_schema_text()


def test_check_reports_missing_stale_and_current(project: Path):
    missing = invoke("schema", "--check")
    assert missing.exit_code == 1 and "does not exist; run `pv schema --write`" in missing.output
    target = project / ".pv" / "contract.schema.json"
    target.parent.mkdir()
    target.write_text(json_schema_text().replace('"pv contract"', '"an older pv"'))
    stale = invoke("schema", "--check")
    assert stale.exit_code == 1 and "differs from the schema of this pv" in stale.output
    assert invoke("schema", "--write").exit_code == 0
    assert invoke("schema", "--check").exit_code == 0


@pytest.mark.parametrize("args", [["schema", "out.json"], ["schema", "--write", "--check"], ["schema", "--write", "."]])
def test_usage_errors(project: Path, args: list[str]):
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert not (project / "out.json").exists()


# --- the hints of pv validate ---------------------------------------------------------------------


def _hint(result, code: str) -> str:
    lines = result.output.splitlines()
    at = next(i for i, line in enumerate(lines) if f" {code} " in line)
    return lines[at + 1]


def test_pv207_hint_says_to_write_the_schema_and_names_it_relatively(project: Path):
    (project / "contracts" / "demo-v1.yaml").write_text(CONTRACT)
    result = invoke("validate")
    hint = _hint(result, "PV207")
    assert "run `pv schema --write`" in hint
    assert hint.endswith("# yaml-language-server: $schema=../.pv/contract.schema.json"), hint
    assert "site-packages" not in hint and "pv/schema/" not in hint

    assert invoke("schema", "--write").exit_code == 0
    hint = _hint(invoke("validate"), "PV207")
    assert "pv schema --write" not in hint  # the copy exists now: just the line to write
    assert hint.endswith("make the first line: # yaml-language-server: $schema=../.pv/contract.schema.json"), hint


def test_pv208_hint_names_the_project_copy(project: Path):
    (project / "contracts" / "demo-v1.yaml").write_text(
        "# yaml-language-server: $schema=/somewhere/site-packages/pv/schema/contract.schema.json\n" + CONTRACT)
    hint = _hint(invoke("validate"), "PV208")
    assert "run `pv schema --write`" in hint and hint.endswith("$schema=../.pv/contract.schema.json"), hint


def test_the_relative_reference_resolves_to_the_written_schema(project: Path):
    """Following the hint literally gives a contract with no schema warning at all."""
    assert invoke("schema", "--write").exit_code == 0
    path = project / "contracts" / "demo-v1.yaml"
    path.write_text(CONTRACT)
    hint = _hint(invoke("validate"), "PV207")
    line = hint[hint.index("# yaml-language-server:"):]
    path.write_text(line + "\n" + CONTRACT)
    result = invoke("validate")
    assert "PV207" not in result.output and "PV208" not in result.output, result.output
