"""pv.config: the [tool.pv] settings. A pyproject.toml or a project tree that cannot work is a
usage error that names the file and the setting (exit 2), never a traceback mid-verb."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from pv.cli import main
from pv.config import ConfigError, find_pyproject, load_workspace


def project(tmp_path, pyproject: str):
    (tmp_path / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    (tmp_path / "contracts").mkdir()
    return tmp_path


@pytest.mark.parametrize("pyproject", ["tool = 5\n", "tool = [1, 2]\n", 'tool = "pv"\n'])
def test_a_tool_key_that_is_not_a_table_is_a_config_error(tmp_path, pyproject):
    project(tmp_path, pyproject)
    with pytest.raises(ConfigError, match="`tool` must be a table"):
        find_pyproject(tmp_path)


@pytest.mark.parametrize("key, make, found", [
    ("ledger", lambda root: (root / "evidence" / "ledger.jsonl").mkdir(parents=True), "is a directory"),
    ("status_file", lambda root: (root / "docs" / "STATUS.md").mkdir(parents=True), "is a directory"),
    ("generated_dir", lambda root: (root / "generated_tests").write_text("x"), "is not a directory"),
    ("ledger", lambda root: (root / "evidence").mkdir() or os.mkfifo(root / "evidence" / "ledger.jsonl"),
     "is not a regular file"),
])
def test_a_path_setting_of_the_wrong_kind_is_a_config_error(tmp_path, key, make, found):
    project(tmp_path, "[tool.pv]\n")
    make(tmp_path)
    with pytest.raises(ConfigError, match=f"\\[tool.pv\\] {key} = .*{found}, but pv needs a"):
        load_workspace(tmp_path)


@pytest.mark.parametrize("argv", [["status"], ["status", "--check"], ["ledger", "check"], ["ledger", "show"],
                                  ["generate"], ["validate"]])
def test_verbs_refuse_a_ledger_that_is_a_directory_with_exit_2(tmp_path, monkeypatch, argv):
    project(tmp_path, "[tool.pv]\n")
    (tmp_path / "evidence" / "ledger.jsonl").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2, result.output
    assert "ledger = 'evidence/ledger.jsonl'" in result.output and "is a directory" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_verbs_refuse_a_tool_scalar_with_exit_2(tmp_path, monkeypatch):
    project(tmp_path, "tool = 5\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["validate"])
    assert result.exit_code == 2 and "`tool` must be a table" in result.output
    assert isinstance(result.exception, SystemExit)


def test_rel_names_a_symlink_loop_instead_of_raising(tmp_path):
    project(tmp_path, "[tool.pv]\n")
    loop = tmp_path / "contracts" / "self-v1.yaml"
    os.symlink(loop.name, loop)
    assert load_workspace(tmp_path).rel(loop) == os.path.join("contracts", "self-v1.yaml")


@pytest.mark.parametrize("value, env, expected", [
    (None, None, 1800.0),                 # the default: a hung check never hangs `pv run`
    ("120", None, 120.0),
    ("0", None, 0.0),                     # 0: no limit
    ("120", "7.5", 7.5),                  # PV_CHECK_TIMEOUT wins for one command
])
def test_check_timeout_is_read_and_overridable(tmp_path, monkeypatch, value, env, expected):
    project(tmp_path, "[tool.pv]\n" + ("" if value is None else f"check_timeout_s = {value}\n"))
    if env is None:
        monkeypatch.delenv("PV_CHECK_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("PV_CHECK_TIMEOUT", env)
    assert load_workspace(tmp_path).check_timeout_s == expected


@pytest.mark.parametrize("value, env, where", [
    ("-1", None, "check_timeout_s"), ('"long"', None, "check_timeout_s"), ("true", None, "check_timeout_s"),
    ("1e9", None, "check_timeout_s"), ("nan", None, "check_timeout_s"),
    ("60", "soon", "PV_CHECK_TIMEOUT"), ("60", "inf", "PV_CHECK_TIMEOUT"),
])
def test_a_bad_check_timeout_is_a_config_error_naming_where(tmp_path, monkeypatch, value, env, where):
    project(tmp_path, f"[tool.pv]\ncheck_timeout_s = {value}\n")
    if env is None:
        monkeypatch.delenv("PV_CHECK_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("PV_CHECK_TIMEOUT", env)
    with pytest.raises(ConfigError, match=f"{where} must be a number of seconds between 0"):
        load_workspace(tmp_path)


def test_a_pyproject_saved_with_a_byte_order_mark_is_read(tmp_path):
    # Windows editors save UTF-8 with a BOM; tomllib alone reports "Invalid statement" at 1:1
    (tmp_path / "pyproject.toml").write_bytes(b"\xef\xbb\xbf[tool.pv]\nledger = \"ev/l.jsonl\"\n")
    assert load_workspace(tmp_path).ledger == tmp_path / "ev" / "l.jsonl"


def test_untraced_imports_are_read_and_checked(tmp_path):
    project(tmp_path, "[tool.pv]\n")
    assert load_workspace(tmp_path).untraced_imports == ()
    (tmp_path / "pyproject.toml").write_text('[tool.pv]\nuntraced_imports = ["torch", "numpy.linalg"]\n')
    assert load_workspace(tmp_path).untraced_imports == ("torch", "numpy.linalg")
    for bad in ('"torch"', '["torch; import os"]', "[1]"):
        (tmp_path / "pyproject.toml").write_text(f"[tool.pv]\nuntraced_imports = {bad}\n")
        with pytest.raises(ConfigError, match="untraced_imports must be a list of dotted module names"):
            load_workspace(tmp_path)
