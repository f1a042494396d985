"""`pv init --ci github`: the CI workflow, alone in a pv project or with the scaffold; an
existing workflow is never overwritten without --force."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from pv.cli import main

REPO_ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = Path(".github/workflows/pv.yml")


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    monkeypatch.chdir(root)
    return root


def run_steps(text: str) -> list[str]:
    steps = yaml.safe_load(text)["jobs"]["pv"]["steps"]
    return [s["run"] for s in steps if "run" in s]


def test_the_workflow_validates_generates_runs_without_recording_and_requires_fresh_evidence(here: Path):
    result = invoke("init", "--ci", "github")
    assert result.exit_code == 0, result.output
    assert "created  .github/workflows/pv.yml" in result.output
    runs = run_steps((here / WORKFLOW).read_text())
    assert runs[1:] == ["pv validate", "pv generate --check",
                        "pv run --all --device cpu --no-ledger --junitxml pv-junit.xml",
                        "pv status --check", "pv status --require-fresh"]
    assert (here / "contracts" / "demo-softmax-v1.yaml").is_file()  # the scaffold too


def test_in_a_pv_project_it_writes_only_the_workflow_and_never_overwrites_it(here: Path):
    assert invoke("init").exit_code == 0
    before = sorted(p.relative_to(here) for p in here.rglob("*"))
    result = invoke("init", "--ci", "github")
    assert result.exit_code == 0, result.output
    after = sorted(p.relative_to(here) for p in here.rglob("*"))
    assert set(after) - set(before) == {Path(".github"), Path(".github/workflows"), WORKFLOW}

    (here / WORKFLOW).write_text("# my own\n")
    refused = invoke("init", "--ci", "github")
    assert refused.exit_code == 2
    assert "refusing to overwrite .github/workflows/pv.yml: it exists; nothing was written" in refused.output
    assert "--force" in refused.output and (here / WORKFLOW).read_text() == "# my own\n"
    forced = invoke("init", "--ci", "github", "--force")
    assert forced.exit_code == 0 and "replaced .github/workflows/pv.yml" in forced.output
    assert "pv status --require-fresh" in (here / WORKFLOW).read_text()


def test_a_fresh_init_with_an_existing_workflow_writes_nothing(here: Path):
    (here / WORKFLOW).parent.mkdir(parents=True)
    (here / WORKFLOW).write_text("# mine\n")
    result = invoke("init", "--ci", "github")
    assert result.exit_code == 2 and "refusing to overwrite" in result.output
    assert sorted(p.name for p in here.iterdir()) == [".github"]
    assert invoke("init", "--force").exit_code == 2  # --force is for the workflow only


def test_the_examples_workflow_is_what_pv_init_writes(here: Path):
    invoke("init", "--ci", "github")
    assert (REPO_ROOT / "examples" / "welford" / WORKFLOW).read_text() == (here / WORKFLOW).read_text()
