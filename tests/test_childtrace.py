"""pv.childtrace: a check's child process is measured from its first bound import (and from
start-up when it runs a script), so nothing bound it runs is lost; what it imports first runs
untraced; a first bound import on another thread makes the record never fresh."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from pv import execution
from pv.codebind import TreeDigests


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    name = f"pvc_{uuid.uuid4().hex[:10]}"
    root = tmp_path / "ws"
    package = root / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "work.py").write_text("def work():\n    return 7\n\n\ndef idle():\n    return 0\n")
    (package / "script.py").write_text(f"from {name}.work import work\n\n\ndef main():\n    return work()\n\n\n"
                                       "if __name__ == '__main__':\n    main()\n")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    yield SimpleNamespace(name=name, root=root, dir=package)
    execution.set_untraced_imports(())
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def _bind(pkg, *command: str):
    importlib.import_module(pkg.name)
    with execution.collecting([pkg.name]) as run:
        subprocess.run([sys.executable, *command], check=True)
    return execution.bind(run, [pkg.name], pkg.root)


def test_a_c_child_is_measured_from_its_first_bound_import(pkg):
    bound = _bind(pkg, "-c", f"import json\nimport {pkg.name}.work as w\nw.work()")
    assert not bound.problems
    assert set(bound.executed[f"{pkg.name}.work"]) == {"<module>", "work"}


def test_a_m_child_whose_main_is_bound_is_measured(pkg):
    bound = _bind(pkg, "-m", f"{pkg.name}.script")
    assert "main" in bound.executed[f"{pkg.name}.script"] and "work" in bound.executed[f"{pkg.name}.work"]


def test_a_script_child_is_measured_from_start_up(pkg):
    bound = _bind(pkg, str(pkg.dir / "script.py"))  # __main__ is a file of the bound package, no import
    assert "main" in bound.executed[f"{pkg.name}.script"], bound.executed
    assert "work" in bound.executed[f"{pkg.name}.work"]


def test_untraced_imports_are_imported_before_the_first_bound_module(pkg, tmp_path):
    marker = tmp_path / "imported"
    (pkg.root / f"{pkg.name}_heavy.py").write_text(f"open({str(marker)!r}, 'w').write('yes')\n")
    execution.set_untraced_imports([f"{pkg.name}_heavy"])
    bound = _bind(pkg, "-c", f"import {pkg.name}.work as w\nw.work()")
    assert marker.read_text() == "yes"  # imported although the child never named it
    assert set(bound.executed[f"{pkg.name}.work"]) == {"<module>", "work"}


def test_a_first_bound_import_on_another_thread_makes_the_record_never_fresh(pkg):
    code = (f"import threading\nt = threading.Thread(target=lambda: __import__('{pkg.name}.work').work.work())\n"
            "t.start()\nt.join()")
    bound = _bind(pkg, "-c", code)
    assert any("on a thread other than its main one" in p for p in bound.problems), bound.problems
    record = SimpleNamespace(executed_code=bound.executed, code_origins=bound.origins,
                             binding_problems=bound.problems, code_digests=None)
    assert TreeDigests(pkg.root).record_changes(record)[0].startswith("binding: ")
