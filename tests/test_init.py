"""`pv init` (pv/commands/init.py): the scaffold validates and measures something real, an
existing pyproject.toml keeps every byte, nothing that exists is overwritten."""

from __future__ import annotations

import importlib
import json
import sys
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from pv.cli import main

REPO_ROOT = Path(__file__).resolve().parents[1]

EXISTING = """\
# my project's settings (this comment must survive)
[project]
name = "My-Lib"
version = "0.1.0"

[tool.black]
line-length = 100"""  # no trailing newline on purpose


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "some-project"
    root.mkdir()
    monkeypatch.chdir(root)
    return root


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_scaffold_in_an_empty_directory(here: Path):
    result = invoke("init")
    assert result.exit_code == 0, result.output
    settings = tomllib.loads((here / "pyproject.toml").read_text())["tool"]["pv"]
    assert settings["check_packages"] == ["some_project_checks"]
    assert settings["mutants_module"] == "some_project_checks.mutants"
    for rel in ("contracts/demo-softmax-v1.yaml", "some_project_checks/__init__.py", "some_project_checks/checks.py",
                "some_project_checks/softmax.py", "some_project_checks/mutants.py", ".pre-commit-config.yaml",
                ".pv/contract.schema.json"):
        assert (here / rel).is_file(), rel
        assert f"created  {rel}" in result.output
    assert "Next steps:" in result.output and "pv generate" in result.output and "pv strength" in result.output
    # no unfilled template placeholders anywhere
    for path in here.rglob("*"):
        if path.is_file() and path.suffix != ".json":
            assert "$package" not in path.read_text() and "$schema=$" not in path.read_text(), path


def test_the_projects_own_packages_bind_the_evidence(here: Path):
    """Without code_packages an edit to the code under test would leave its evidence fresh (only
    the check package binds): init names the project's packages, at the root or under src/."""
    for pkg in ("my_lib", "src/other_lib", "tests", "docs"):
        (here / pkg).mkdir(parents=True)
        (here / pkg / "__init__.py").write_text("")
    assert invoke("init").exit_code == 0
    settings = tomllib.loads((here / "pyproject.toml").read_text())["tool"]["pv"]
    assert settings["code_packages"] == ["my_lib", "other_lib"]
    assert invoke("validate").exit_code == 0


def test_without_a_package_of_its_own_code_packages_is_a_comment_to_fill_in(here: Path):
    assert invoke("init").exit_code == 0
    text = (here / "pyproject.toml").read_text()
    assert "code_packages" not in tomllib.loads(text)["tool"]["pv"]
    assert '# code_packages = ["your_package"]' in text


def test_first_contract_validates_without_warnings_and_matches_the_json_schema(here: Path):
    assert invoke("init").exit_code == 0
    result = invoke("validate")
    assert result.exit_code == 0, result.output
    assert "0 errors, 0 warnings" in result.output  # the schema line resolves (no PV207/PV208)
    text = (here / "contracts" / "demo-softmax-v1.yaml").read_text()
    assert text.startswith("# yaml-language-server: $schema=../.pv/contract.schema.json\n")
    schema = json.loads((here / ".pv" / "contract.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(yaml.safe_load(text))


def test_appends_to_an_existing_pyproject_keeping_every_byte(here: Path):
    (here / "pyproject.toml").write_text(EXISTING)
    result = invoke("init")
    assert result.exit_code == 0, result.output
    assert "added [tool.pv] to pyproject.toml" in result.output
    text = (here / "pyproject.toml").read_text()
    assert text.startswith(EXISTING + "\n")
    data = tomllib.loads(text)
    assert data["tool"]["black"] == {"line-length": 100} and data["project"]["name"] == "My-Lib"
    assert data["tool"]["pv"]["check_packages"] == ["my_lib_checks"]  # named after [project] name


def test_a_pyproject_that_a_table_would_break_is_left_alone(here: Path):
    original = 'tool = {black = {}}\n'  # an inline `tool` table: no [tool.pv] header can follow
    (here / "pyproject.toml").write_text(original)
    result = invoke("init")
    assert result.exit_code == 2, result.output
    assert "would break it" in result.output and "Traceback" not in result.output
    assert (here / "pyproject.toml").read_text() == original
    assert files_under(here) == ["pyproject.toml"]


def test_invalid_toml_is_a_usage_error(here: Path):
    (here / "pyproject.toml").write_text("[project\n")
    result = invoke("init")
    assert result.exit_code == 2 and "not valid TOML" in result.output
    assert files_under(here) == ["pyproject.toml"]


def test_an_existing_pv_project_is_refused(here: Path):
    (here / "pyproject.toml").write_text('[tool.pv]\ncontracts_dir = "contracts"\n')
    result = invoke("init")
    assert result.exit_code == 2 and "already has a [tool.pv] table" in result.output
    assert files_under(here) == ["pyproject.toml"]


@pytest.mark.parametrize("existing", [".pre-commit-config.yaml", "contracts/demo-softmax-v1.yaml",
                                      "some_project_checks/other.py", "docs/STATUS.md", "evidence/ledger.jsonl",
                                      ".pv/contract.schema.json"])
def test_refuses_to_overwrite_and_writes_nothing(here: Path, existing: str):
    (here / "pyproject.toml").write_text(EXISTING.replace("My-Lib", "some-project"))
    (here / existing).parent.mkdir(parents=True, exist_ok=True)
    (here / existing).write_text("mine\n")
    before = files_under(here)

    result = invoke("init")

    assert result.exit_code == 2, result.output
    named = existing if existing != "some_project_checks/other.py" else "some_project_checks/"
    assert "refusing to overwrite" in result.output and named in result.output
    assert files_under(here) == before
    assert (here / existing).read_text() == "mine\n"
    assert (here / "pyproject.toml").read_text() == EXISTING.replace("My-Lib", "some-project")


def test_package_option_names_the_check_package(here: Path):
    result = invoke("init", "--package", "acme_falsifiers")
    assert result.exit_code == 0, result.output
    assert tomllib.loads((here / "pyproject.toml").read_text())["tool"]["pv"]["check_packages"] == ["acme_falsifiers"]
    assert "check: acme_falsifiers.checks:softmax_normalises" in (here / "contracts" / "demo-softmax-v1.yaml").read_text()
    assert invoke("validate").exit_code == 0


@pytest.mark.parametrize(("name", "why"), [("1abc", "not a Python package name"), ("a.b", "not a Python package name"),
                                           ("class", "not a Python package name"), ("json", "standard-library"),
                                           ("yaml", "already importable"), ("pv", "already importable")])
def test_package_names_that_would_shadow_are_refused(here: Path, name: str, why: str):
    result = invoke("init", "--package", name)
    assert result.exit_code == 2, result.output
    assert why in result.output and "--package" in result.output
    assert files_under(here) == []


def test_the_scaffolded_check_measures_and_its_planted_bug_is_visible(here: Path, monkeypatch: pytest.MonkeyPatch):
    """The check compares float softmax with 50-digit decimals: tiny errors on the real code,
    a sum error far above the contract's bound under the planted bug (so strength kills it)."""
    package = f"pvinit_{abs(hash(str(here))) % 10**8}"
    assert invoke("init", "--package", package).exit_code == 0
    monkeypatch.syspath_prepend(str(here))
    try:
        checks = importlib.import_module(f"{package}.checks")
        mutants = importlib.import_module(f"{package}.mutants")
        params = dict(size=64, scale=30.0, trials=5, seed=0)
        clean = checks.softmax_normalises(device="cpu", **params)
        assert clean["max_abs_error"] < 1e-15 and clean["max_sum_error"] < 1e-15, clean
        with mutants.softmax_drops_last_term():
            broken = checks.softmax_normalises(device="cpu", **params)
        assert broken["max_sum_error"] > 1e-6, broken
        assert checks.softmax_normalises(device="cpu", **params) == clean  # the bug is removed on exit
        from pv.harness import DeviceUnavailable

        with pytest.raises(DeviceUnavailable):
            checks.softmax_normalises(device="cuda", **params)
    finally:
        for mod in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
            del sys.modules[mod]


def test_pre_commit_config_uses_pvs_hooks(here: Path):
    """The scaffolded hooks are pv's three, with the entries and file patterns of
    .pre-commit-hooks.yaml (run locally: no network needed at commit time)."""
    assert invoke("init").exit_code == 0
    config = yaml.safe_load((here / ".pre-commit-config.yaml").read_text())
    [repo] = config["repos"]
    assert repo["repo"] == "local"
    hooks = {h["id"]: h for h in repo["hooks"]}
    offered = {h["id"]: h for h in yaml.safe_load((REPO_ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == set(offered)
    for hook_id, hook in hooks.items():
        assert (hook["entry"], hook["files"], hook["pass_filenames"]) == (
            offered[hook_id]["entry"], offered[hook_id]["files"], offered[hook_id]["pass_filenames"])
        assert hook["language"] == "system"


def test_a_write_that_fails_is_a_clear_error(here: Path):
    """`.pv` is a file, so .pv/contract.schema.json cannot be written (root or not)."""
    (here / ".pv").write_text("a file where pv wants a folder\n")
    result = invoke("init")
    assert result.exit_code == 1, result.output
    assert "cannot write" in result.output and "written so far: contracts/demo-softmax-v1.yaml" in result.output
    assert "Traceback" not in result.output
    assert not (here / "pyproject.toml").exists()  # no [tool.pv]: the project was not half-made a pv project


@pytest.mark.parametrize(("folder", "pyproject", "expected"), [
    ("my-lib", {}, "my_lib_checks"),
    ("2024 analysis", {}, "p2024_analysis_checks"),
    ("x", {"project": {"name": "Acme.Trainer"}}, "acme_trainer_checks"),
    ("x", {"project": {"name": ""}}, "x_checks"),
    ("---", {}, "project_checks"),
])
def test_default_package_is_named_after_the_project(folder: str, pyproject: dict, expected: str):
    from pv.commands.init import default_package

    assert default_package(Path("/somewhere") / folder, pyproject) == expected


def test_a_pyproject_that_is_a_directory_is_refused_before_anything_is_written(here: Path):
    (here / "pyproject.toml").mkdir()
    result = CliRunner().invoke(main, ["init"])
    assert result.exit_code == 2 and "pyproject.toml is not a regular file" in result.output
    assert files_under(here) == ["pyproject.toml"]


def test_a_pyproject_with_a_byte_order_mark_keeps_it_and_works(here: Path):
    (here / "pyproject.toml").write_bytes(b"\xef\xbb\xbf" + EXISTING.encode())
    result = invoke("init")
    assert result.exit_code == 0, result.output
    raw = (here / "pyproject.toml").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf" + EXISTING.encode() + b"\n")
    assert invoke("validate").exit_code == 0  # and pv reads it back
