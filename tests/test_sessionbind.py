"""pv.sessionbind: the workspace's code a falsifier's session loaded outside the bound packages
(a conftest.py, a plugin module, a parent package's __init__) binds its records by digest.

The attacks (the round of 2026-12-02) as a contributor would try them: a conftest.py that patches
a library the check uses (never a function of a bound package, which pv already flags) turns a
FAIL into a PASS, and is deleted once the record is written; a parent package's __init__.py
that does the same and is put back."""

from __future__ import annotations

import json
import sys
import types

from pv import codebind, identity, sessionbind
from pv_workspace import cli, falsifier, make_workspace

USES_MATH = '''\
import math


def loss(*, device):
    """observations: val_loss (2.0: the runtime is red for `val_loss < 1`)"""
    return {"val_loss": math.sqrt(4.0)}
'''

PATCHES_MATH = "import math\n\nmath.sqrt = lambda x: 0.5\n"


def _falsifier_state(ws, monkeypatch) -> tuple[str, list[dict]]:
    ws.enter(monkeypatch)
    data = json.loads(cli("status")("--format", "json").stdout)
    f = data["contracts"][0]["falsifiers"][0]
    return f["state"], f


def _red_workspace(tmp_path):
    ws = make_workspace(tmp_path, mutants=False)
    (ws.root / ws.package / "uses_math.py").write_text(USES_MATH, encoding="utf-8")
    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001", prediction="val_loss < 1", check="uses_math:loss")])
    ws.generate()
    return ws


def test_attack_a_conftest_that_patches_a_library_then_is_deleted_leaves_no_fresh_pass(tmp_path, monkeypatch):
    ws = _red_workspace(tmp_path)
    assert ws.pytest("generated_tests").returncode == 1  # honest: FAIL
    conftest = ws.generated / "conftest.py"
    conftest.write_text(PATCHES_MATH, encoding="utf-8")
    assert ws.pytest("generated_tests").returncode == 0  # the conftest makes it pass
    records = ws.records()
    assert [r.verdict.value for r in records] == ["FAIL", "PASS"]
    assert records[1].session_code == {"generated_tests/conftest.py": sessionbind._digest(conftest)}
    assert not records[1].binding_problems  # math is no bound package: nothing flagged it at run time
    conftest.unlink()
    state, f = _falsifier_state(ws, monkeypatch)
    assert state == "STALE", f  # was DISCHARGED: the deleted conftest's PASS decided
    assert "generated_tests/conftest.py (loaded in the session: removed)" in json.dumps(f)


def test_a_conftest_edited_after_the_run_stales_its_record_and_one_left_as_it_was_does_not(tmp_path, monkeypatch):
    ws = _red_workspace(tmp_path)
    conftest = ws.generated / "conftest.py"
    conftest.write_text(PATCHES_MATH, encoding="utf-8")
    assert ws.pytest("generated_tests").returncode == 0
    # left as it ran: the tree still patches math, the record is about this tree (visible in it)
    conftest.write_text("# a comment\n" + PATCHES_MATH, encoding="utf-8")
    assert _falsifier_state(ws, monkeypatch)[0] == "DISCHARGED"
    conftest.write_text("import math\n", encoding="utf-8")
    state, f = _falsifier_state(ws, monkeypatch)
    assert state == "STALE" and "generated_tests/conftest.py (loaded in the session)" in json.dumps(f)


def test_loaded_binds_the_workspaces_other_modules_only(tmp_path):
    root = tmp_path / "ws"
    (root / "generated_tests").mkdir(parents=True)
    (root / "lab" / "runtime").mkdir(parents=True)
    (root / "pv").mkdir()
    (root / ".venv" / "lib").mkdir(parents=True)
    files = {
        "lab": root / "lab" / "__init__.py",                          # a parent of the bound package
        "lab.runtime": root / "lab" / "runtime" / "__init__.py",      # bound by its units
        "lab.runtime.kernels": root / "lab" / "runtime" / "kernels.py",
        "conftest": root / "generated_tests" / "conftest.py",
        "test_demo": root / "generated_tests" / "test_demo.py",       # judged by pv.identity
        "pv.harness": root / "pv" / "harness.py",                     # the tool
        "evil_plugin": root / "evil_plugin.py",
        "torch": root / ".venv" / "lib" / "torch.py",                 # the environment
        "elsewhere": tmp_path / "elsewhere.py",                       # outside the workspace
    }
    modules = {}
    for name, path in files.items():
        path.write_text(f"X = {name!r}\n", encoding="utf-8")
        modules[name] = types.SimpleNamespace(__file__=str(path))
    modules["builtin"] = types.SimpleNamespace()
    real_prefix = sys.prefix
    try:
        sys.prefix = str(root / ".venv")
        found = sessionbind.loaded(root, ["lab.runtime"], root / "generated_tests", modules)
    finally:
        sys.prefix = real_prefix
    assert sorted(found) == ["evil_plugin.py", "generated_tests/conftest.py", "lab/__init__.py"]
    assert codebind.session_changes(root, found) == ()
    (root / "lab" / "__init__.py").write_text("import math\nmath.sqrt = abs\n", encoding="utf-8")
    (root / "evil_plugin.py").unlink()
    assert codebind.session_changes(root, found) == ("evil_plugin.py (loaded in the session: removed)",
                                                "lab/__init__.py (loaded in the session)")


def test_a_crafted_session_path_is_read_as_a_file_or_called_removed(tmp_path):
    assert codebind.session_changes(tmp_path, {"/dev/zero": "x", "../nowhere.py": "y"}) == (
        "../nowhere.py (loaded in the session: removed)", "/dev/zero (loaded in the session: removed)")


def test_attack_another_contracts_generated_module_edited_by_hand_then_restored(tmp_path, monkeypatch):
    """Every module pytest collects is imported: a patch added to the top of another contract's
    generated module runs beside this falsifier's test. pv.identity judges only the falsifier's
    own module, so the PASS it made counted once that module was generated again."""
    ws = _red_workspace(tmp_path)
    ws.add_contract("other", [falsifier("FALSIFY-OTHER-001", prediction="val_loss < 3")])
    ws.generate()
    other = ws.generated / "test_other.py"
    rendered = other.read_text(encoding="utf-8")
    other.write_text(rendered + "\n" + PATCHES_MATH, encoding="utf-8")
    assert ws.pytest("generated_tests").returncode == 0
    demo = [r for r in ws.records() if r.contract == "demo"]
    assert [r.verdict.value for r in demo] == ["PASS"]
    assert any("generated_tests/test_other.py ran in the session but is not what" in p for p in demo[0].binding_problems)
    other.write_text(rendered, encoding="utf-8")  # `pv generate` puts it back
    state, f = _falsifier_state(ws, monkeypatch)
    assert state == "STALE", f  # was DISCHARGED


def test_modules_as_pv_generate_renders_them_leave_no_problem(tmp_path):
    ws = _red_workspace(tmp_path)
    sources = {str(p.resolve()): p.read_text(encoding="utf-8") for p in ws.generated.glob("test_*.py")}
    assert identity.unrendered_modules(ws.workspace(), sources) == []
    path = next(iter(sources))
    assert len(identity.unrendered_modules(ws.workspace(), {path: sources[path] + "\n# edited\n"})) == 1
    assert len(identity.unrendered_modules(ws.workspace(), {path: "# Generated by pv from nowhere.yaml — x\n"})) == 1


def test_attack_a_conftest_linked_to_a_file_outside_the_workspace_is_bound_where_the_tree_has_it(tmp_path):
    root = tmp_path / "ws"
    (root / "generated_tests").mkdir(parents=True)
    outside = tmp_path / "evil.py"
    outside.write_text(PATCHES_MATH, encoding="utf-8")
    link = root / "generated_tests" / "conftest.py"
    link.symlink_to(outside)
    modules = {"conftest": types.SimpleNamespace(__file__=str(link))}
    found = sessionbind.loaded(root, [], root / "generated_tests", modules)
    assert list(found) == ["generated_tests/conftest.py"]
    link.unlink()
    assert codebind.session_changes(root, found) == ("generated_tests/conftest.py (loaded in the session: removed)",)
