"""Evidence bound to the code it executed (pv.execution, pv.codeunits, pv.importbind).

Each test builds a small package in tmp_path, runs a "check" of it inside
`execution.collecting`, binds what ran, edits the tree as a user (or an attacker) would, and
asks `TreeDigests.record_changes` — what `pv status` asks — whether the record is still fresh.
"""

from __future__ import annotations

import importlib
import marshal
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from pv import execution, importbind
from pv.codebind import TreeDigests

KERNELS = '''\
"""The kernels."""
EPS = 1e-6


def used(x):
    return x + EPS


def unused(x):
    return x * 2


class Box:
    size = 3

    def area(self):
        return self.size * self.size
'''

CHECKS = '''\
import importlib
import subprocess
import sys

from . import kernels
from .helpers import SCALE


def check(device="cpu"):
    return {"y": kernels.used(1.0) * SCALE}


def lazy(device="cpu"):
    return {"y": importlib.import_module(__package__ + ".lazy").work()}


def child(device="cpu"):
    code = f"import {__package__}.spawned as s; s.work()"
    subprocess.run([sys.executable, "-c", code], check=True)
    return {"y": 1}


def method(device="cpu"):
    return {"y": kernels.Box().area()}
'''


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    name = f"pvx_{uuid.uuid4().hex[:10]}"
    root = tmp_path / "ws"
    package = root / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "kernels.py").write_text(KERNELS)
    (package / "helpers.py").write_text("SCALE = 2\n\n\ndef helper():\n    return 1\n")
    (package / "checks.py").write_text(CHECKS)
    (package / "lazy.py").write_text("def work():\n    return 5\n")
    (package / "spawned.py").write_text("def work():\n    return 7\n")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    yield SimpleNamespace(name=name, root=root, dir=package)
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def record(pkg, function: str = "check") -> SimpleNamespace:
    checks = importlib.import_module(f"{pkg.name}.checks")
    with execution.collecting([pkg.name]) as run:
        getattr(checks, function)()
    bound = execution.bind(run, [pkg.name], pkg.root)
    return SimpleNamespace(executed_code=bound.executed, code_origins=bound.origins,
                           binding_problems=bound.problems, code_digests=None)


def changes(pkg, rec) -> tuple[str, ...]:
    return TreeDigests(pkg.root).record_changes(rec)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_the_functions_that_ran_are_bound_and_nothing_else(pkg):
    rec = record(pkg)
    assert not rec.binding_problems
    kernels = rec.executed_code[f"{pkg.name}.kernels"]
    assert set(kernels) == {"<module>", "used"}  # not `unused`, not Box.area
    assert set(rec.executed_code[f"{pkg.name}.checks"]) == {"<module>", "check"}
    assert set(rec.executed_code[pkg.name]) == {"<module>"}  # the parent package ran first
    assert set(rec.executed_code[f"{pkg.name}.helpers"]) == {"<module>"}  # imported: its constants
    assert f"{pkg.name}.lazy" not in rec.executed_code
    assert changes(pkg, rec) == ()


@pytest.mark.parametrize("old, new", [
    ("def unused(x):", "def added(x):\n    return x\n\n\ndef unused(x):"),  # an unused function
    ("EPS = 1e-6", "EPS = 1e-6  # a comment"),
    ("return x * 2", "return x * 3"),  # a function no check executed
    ('"""The kernels."""', '"""The kernels, documented."""'),
    ("return self.size * self.size", "return self.size ** 2"),  # a method that did not run
])
def test_edits_to_code_that_did_not_run_stale_nothing(pkg, old, new):
    rec = record(pkg)
    edit(pkg.dir / "kernels.py", old, new)
    edit(pkg.dir / "helpers.py", "return 1", "return 2")  # a function of an imported module, not run
    assert changes(pkg, rec) == ()


def test_an_edit_to_a_function_that_ran_stales_exactly_the_records_that_ran_it(pkg):
    ran_used, ran_area = record(pkg, "check"), record(pkg, "method")
    edit(pkg.dir / "kernels.py", "return x + EPS", "return x - EPS")
    assert changes(pkg, ran_used) == (f"{pkg.name}.kernels:used",)
    assert changes(pkg, ran_area) == ()
    edit(pkg.dir / "kernels.py", "return self.size * self.size", "return self.size")
    assert changes(pkg, ran_area) == (f"{pkg.name}.kernels:Box.area",)


def test_module_level_code_of_a_module_that_ran_or_was_imported_binds(pkg):
    rec = record(pkg)
    edit(pkg.dir / "helpers.py", "SCALE = 2", "SCALE = 3")  # reached by a relative import
    assert changes(pkg, rec) == (f"{pkg.name}.helpers (module-level code)",)


def test_a_removed_function_that_ran_is_a_change(pkg):
    rec = record(pkg)
    edit(pkg.dir / "kernels.py", "def used(x):\n    return x + EPS\n", "")
    assert changes(pkg, rec) == (f"{pkg.name}.kernels:used (removed)",)


def test_a_module_reached_only_by_importlib_is_bound(pkg):
    rec = record(pkg, "lazy")
    assert set(rec.executed_code[f"{pkg.name}.lazy"]) == {"<module>", "work"}
    edit(pkg.dir / "lazy.py", "return 5", "return 6")
    assert changes(pkg, rec) == (f"{pkg.name}.lazy:work",)


def test_code_a_child_process_ran_is_bound(pkg):
    rec = record(pkg, "child")
    assert not rec.binding_problems
    assert "work" in rec.executed_code[f"{pkg.name}.spawned"]
    edit(pkg.dir / "spawned.py", "return 7", "return 8")
    assert changes(pkg, rec) == (f"{pkg.name}.spawned:work",)


# --- the module that ran is not the file that was digested (attack class 3) -------------------


def test_a_package_directory_that_appears_beside_a_module_is_a_change(pkg):
    rec = record(pkg)
    shadow = pkg.dir / "kernels"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("EPS = 0\n\ndef used(x):\n    return 0\n")
    assert changes(pkg, rec) == (f"{pkg.name}.kernels (now loads from {pkg.name}/kernels/__init__.py)",)


def test_an_extension_module_beside_a_module_is_a_change(pkg):
    rec = record(pkg)
    (pkg.dir / ("kernels" + importbind.EXTENSION_SUFFIXES[0])).write_bytes(b"\x7fELF not really")
    assert changes(pkg, rec)[0].startswith(f"{pkg.name}.kernels (now loads from {pkg.name}/kernels.")


def test_a_package_directory_shadowing_a_module_while_it_runs_is_flagged(pkg):
    shadow = pkg.dir / "kernels"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("EPS = 0\n\n\ndef used(x):\n    return 0\n")
    rec = record(pkg)
    assert f"{pkg.name}.kernels: the package directory kernels/ shadows kernels.py" in rec.binding_problems
    assert changes(pkg, rec)[0].startswith("binding: ")  # never fresh


def test_forged_bytecode_in_pycache_is_flagged(pkg):
    source = pkg.dir / "kernels.py"
    forged = compile(KERNELS.replace("return x + EPS", "return x"), str(source), "exec")
    stat = source.stat()
    cache = Path(importlib.util.cache_from_source(str(source)))
    cache.parent.mkdir(exist_ok=True)
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little") + \
        (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    cache.write_bytes(header + marshal.dumps(forged))
    rec = record(pkg)
    assert any("ran from bytecode" in p and "kernels.py" in p for p in rec.binding_problems), rec.binding_problems


def test_a_function_patched_by_a_conftest_is_flagged(pkg, tmp_path, monkeypatch):
    hooks = tmp_path / "elsewhere"
    hooks.mkdir()
    (hooks / "conftest.py").write_text("def used(x):\n    return 0.0\n")
    spec = importlib.util.spec_from_file_location(f"conftest_{pkg.name}", hooks / "conftest.py")
    patch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(patch)
    kernels = importlib.import_module(f"{pkg.name}.kernels")
    monkeypatch.setattr(kernels, "used", patch.used)
    rec = record(pkg)
    assert any(p.startswith(f"{pkg.name}.kernels.used is replaced by code from") and "conftest.py" in p
               for p in rec.binding_problems), rec.binding_problems


def test_a_path_entry_in_front_that_shadows_the_workspace_is_flagged(pkg, tmp_path, monkeypatch):
    copy = tmp_path / "copy" / pkg.name
    copy.mkdir(parents=True)
    for file in pkg.dir.glob("*.py"):
        (copy / file.name).write_text(file.read_text())
    monkeypatch.syspath_prepend(str(copy.parent))  # what a sitecustomize.py could do
    rec = record(pkg)
    assert any("not the workspace's" in p for p in rec.binding_problems), rec.binding_problems


def test_a_module_that_disappeared_is_a_change_even_if_a_copy_imports(pkg, tmp_path, monkeypatch):
    rec = record(pkg)
    copy = tmp_path / "site" / pkg.name
    copy.mkdir(parents=True)
    for file in pkg.dir.glob("*.py"):
        (copy / file.name).write_text(file.read_text())
    monkeypatch.syspath_prepend(str(copy.parent))
    (pkg.dir / "kernels.py").unlink()
    assert changes(pkg, rec) == (f"{pkg.name}.kernels (removed)",)


def test_a_record_whose_binding_could_not_be_computed_is_never_fresh(pkg):
    rec = record(pkg)
    assert changes(pkg, SimpleNamespace(**{**vars(rec), "binding_problems": ["coverage failed"]})) == \
        ("binding: coverage failed",)
    assert changes(pkg, SimpleNamespace(**{**vars(rec), "executed_code": {}})) == ("records no executed code",)


def test_an_old_record_keeps_the_module_rule(pkg):
    old = SimpleNamespace(code_digests=None)
    assert changes(pkg, old) == ("recorded before code binding",)


def test_resolve_follows_the_path_finders_order(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "__init__.py").write_text("")
    (tmp_path / "a" / "m.py").write_text("")
    assert importbind.resolve("a.m", [tmp_path]) == tmp_path / "a" / "m.py"
    (tmp_path / "a" / "m.pyc").write_bytes(b"")
    assert importbind.resolve("a.m", [tmp_path]) == tmp_path / "a" / "m.py"  # source before bytecode
    (tmp_path / "a" / "m").mkdir()
    assert importbind.resolve("a.m", [tmp_path]) == tmp_path / "a" / "m.py"  # a bare directory is a namespace only
    (tmp_path / "a" / "m" / "__init__.py").write_text("")
    assert importbind.resolve("a.m", [tmp_path]) == tmp_path / "a" / "m" / "__init__.py"
    assert importbind.resolve("a.nothing", [tmp_path]) is None


def test_a_child_that_leaves_with_os_exit_still_reports(pkg):
    (pkg.dir / "hard.py").write_text(textwrap.dedent("""\
        import os


        def work():
            from pv.execution import save_before_hard_exit
            save_before_hard_exit()
            os._exit(0)
        """))
    checks = importlib.import_module(f"{pkg.name}.checks")
    with execution.collecting([pkg.name]) as run:
        subprocess.run([sys.executable, "-c", f"import {pkg.name}.hard as h; h.work()"], check=True)
    bound = execution.bind(run, [pkg.name], pkg.root)
    assert "work" in bound.executed[f"{pkg.name}.hard"]
    assert checks  # the parent imported the package too


# --- one collector for the session: each check sees only its own lines ------------------------


def test_each_check_of_a_session_binds_only_what_it_ran(pkg):
    first, second, again = record(pkg, "check"), record(pkg, "method"), record(pkg, "check")
    kernels = f"{pkg.name}.kernels"
    assert set(first.executed_code[kernels]) == {"<module>", "used"}
    assert set(second.executed_code[kernels]) == {"<module>", "Box.area"}  # not `used`, which ran before
    assert set(again.executed_code[kernels]) == {"<module>", "used"}  # a line run before counts again
    assert execution._collector((pkg.name,)) is execution._collector((pkg.name,))  # kept, not rebuilt


def test_a_check_run_inside_another_check_binds_what_each_ran(pkg):
    checks = importlib.import_module(f"{pkg.name}.checks")
    with execution.collecting([pkg.name]) as outer:
        checks.method()
        with execution.collecting([pkg.name]) as inner:
            checks.check()
    outer_units = execution.bind(outer, [pkg.name], pkg.root).executed[f"{pkg.name}.kernels"]
    inner_units = execution.bind(inner, [pkg.name], pkg.root).executed[f"{pkg.name}.kernels"]
    assert "Box.area" in outer_units and "used" not in outer_units
    assert set(inner_units) == {"<module>", "used"}
    assert not outer.problem and not inner.problem



CACHED = '''\
from pv import execution

from . import kernels

_CACHE = {}


def computed():
    if "run" not in _CACHE:
        _CACHE["run"] = (kernels.used(1.0), execution.current_check())
    value, token = _CACHE["run"]
    execution.reuses(token)
    return value


def first(device="cpu"):
    return {"y": computed()}


def second(device="cpu"):
    return {"y": computed()}
'''


def test_attack_a_check_answered_from_a_cache_binds_the_code_that_computed_the_value(pkg):
    """Red team 2026-12-03: FALSIFY-TEXTBOOK-TRAINING-001 judged a run that -002 computed earlier
    in the session (pvlab's fixtures cache): its record bound only the cache lookup, and an edit
    to Trainer.train_step left its cpu cell PASS, fresh. A check that reuses a cached value says
    so (execution.reuses with the token current_check() gave the computing check): its record
    binds what that check ran. A cache that does not say so is still blind (docs/status.md)."""
    (pkg.dir / "cached.py").write_text(CACHED)
    module = importlib.import_module(f"{pkg.name}.cached")

    def run(function):
        with execution.collecting([pkg.name]) as ran:
            getattr(module, function)()
        bound = execution.bind(ran, [pkg.name], pkg.root)
        return SimpleNamespace(executed_code=bound.executed, code_origins=bound.origins,
                               binding_problems=bound.problems, code_digests=None)

    first, second = run("first"), run("second")
    assert "used" in first.executed_code[f"{pkg.name}.kernels"]
    assert "used" in second.executed_code[f"{pkg.name}.kernels"]   # reused: bound, though not run here
    assert "first" in second.executed_code[f"{pkg.name}.cached"]   # the computing check whole: more, never less
    edit(pkg.dir / "kernels.py", "return x + EPS", "return x - EPS")
    assert changes(pkg, second) and changes(pkg, first)
    assert execution.current_check() is None
    execution.reuses("pv-check-unknown")                            # outside a check: nothing happens
