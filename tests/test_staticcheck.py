"""pv.staticcheck's parsing of check modules gives the same answer in every process: not
depending on the interpreter's recursion limit (torch.compile raises it to 2,000 for the rest
of an xdist worker's life) nor on how deep the caller's stack is."""

from __future__ import annotations

import sys

import pytest

from pv import staticcheck

DEEP = "x = " + "-" * 3000 + "1\n"
SHALLOW = "x = " + "-" * 100 + "1\n"


def _at_depth(frames: int, fn):
    return fn() if frames == 0 else _at_depth(frames - 1, fn)


def _outcome(path):
    tree, error = staticcheck.parse_module(path)
    return (tree is not None, None if error is None else error.msg)


@pytest.mark.parametrize("limit", [1000, 2000, 20000])
@pytest.mark.parametrize("extra_frames", [0, 300])
def test_a_deep_module_is_refused_the_same_way_whatever_the_limit_and_stack(tmp_path, limit, extra_frames):
    deep, shallow = tmp_path / "deep.py", tmp_path / "shallow.py"
    deep.write_text(DEEP)
    shallow.write_text(SHALLOW)
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, previous))
    try:
        assert _at_depth(extra_frames, lambda: _outcome(deep)) == (False, "nests too deeply for Python's parser")
        assert _at_depth(extra_frames, lambda: _outcome(shallow)) == (True, None)
        assert sys.getrecursionlimit() == max(limit, previous)  # restored
    finally:
        sys.setrecursionlimit(previous)


def test_an_index_without_autosave_writes_its_facts_only_when_saved(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "m.py").write_text("def check(*, device, a=1):\n    pass\n")
    (tmp_path / "pkg" / "mutants.py").write_text("from pv import mutant\n\n@mutant('drops_bias')\ndef a():\n    yield\n")
    facts = tmp_path / ".pv-cache" / "pv" / "module-facts.json"
    names = tmp_path / ".pv-cache" / "pv" / "mutant-names.json"
    index = staticcheck.ModuleIndex(tmp_path, autosave=False)
    assert index.find_function("pkg.m", "check").accepts("a")
    assert index.mutant_names("pkg.mutants") == {"drops_bias"}
    assert not facts.exists() and not names.exists()  # found, not yet written
    index.save()
    assert facts.exists() and names.exists()
    fresh = staticcheck.ModuleIndex(tmp_path)
    assert fresh._remembered_def("pkg.m", "check") == index.find_function("pkg.m", "check")


def test_facts_a_worker_found_are_saved_by_the_index_they_are_handed_to(tmp_path):
    (tmp_path / "m.py").write_text("def check(*, device):\n    pass\n")
    worker = staticcheck.ModuleIndex(tmp_path, autosave=False)
    worker.find_function("m", "check")
    parent = staticcheck.ModuleIndex(tmp_path, autosave=False)
    parent.merge(worker.take_added())
    assert worker.take_added() == ({}, {})  # handed over once
    parent.save()
    assert staticcheck.ModuleIndex(tmp_path)._remembered_def("m", "check") is not None


def test_mutant_defs_name_each_bugs_module_and_function_as_code_units_name_them(tmp_path):
    """The module and `__qualname__` of each `@mutant` function (pv.identity refuses a record
    under a bug whose code did not run), read by the scan, never importing the package."""
    pkg = tmp_path / "pkg" / "mutants"
    pkg.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from pv import mutant\n\n@mutant('top')\ndef top():\n    yield\n")
    (pkg / "loss.py").write_text("import torch_is_never_imported\nfrom pv import mutant\n\n"
                                 "class Bugs:\n    @mutant('nested')\n    def drops(self):\n        yield\n")
    expected = {"top": ("pkg.mutants", "top"), "nested": ("pkg.mutants.loss", "Bugs.drops")}
    assert staticcheck.ModuleIndex(tmp_path).mutant_defs("pkg.mutants") == expected
    assert staticcheck.ModuleIndex(tmp_path).mutant_defs("pkg.mutants") == expected  # read back from pv.cache
    assert staticcheck.ModuleIndex(tmp_path).mutant_defs("pkg.absent") == {}
