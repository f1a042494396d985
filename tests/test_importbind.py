"""pv.importbind at unit level: which file a module's code really came from. (The end-to-end
attacks, through a recorded check, are in tests/test_execution.py.)"""

from __future__ import annotations

import importlib.util
import json
import marshal
import sys
from pathlib import Path

import pytest

from pv import importbind

SOURCE = "LIMIT = 1\n\n\ndef used(x):\n    return x + LIMIT\n\n\nclass Box:\n    def size(self):\n        return 1\n"


@pytest.fixture
def module(tmp_path: Path, request: pytest.FixtureRequest):
    """A module loaded from tmp_path, with the path its bytecode would be cached at."""
    name = f"ib_{abs(hash(request.node.nodeid)) % 10**8}"
    path = tmp_path / f"{name}.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location(name, path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    sys.modules[name] = loaded
    yield loaded
    sys.modules.pop(name, None)


def _write_pyc(module, body: bytes, flags: int = 0, mtime_shift: int = 0) -> None:
    """A cached bytecode file: timestamp-based (flags 0) and current unless `mtime_shift`."""
    source = Path(module.__spec__.origin)
    stat = source.stat()
    header = importlib.util.MAGIC_NUMBER + flags.to_bytes(4, "little") + \
        ((int(stat.st_mtime) + mtime_shift) & 0xFFFFFFFF).to_bytes(4, "little") + \
        (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    cached = Path(module.__spec__.cached)
    cached.parent.mkdir(exist_ok=True)
    cached.write_bytes(header + body)


def test_bytecode_that_is_the_source_compiled_is_no_mismatch(module):
    _write_pyc(module, marshal.dumps(compile(SOURCE, module.__spec__.origin, "exec", dont_inherit=True)))
    assert importbind.bytecode_mismatch(module) is None


def test_bytecode_cut_to_its_header_is_not_the_source_compiled(module):
    _write_pyc(module, b"")
    assert importbind.bytecode_mismatch(module) == \
        f"{module.__name__} ran from bytecode {Path(module.__spec__.cached).name} that is not {module.__name__}.py compiled"


def test_a_function_replaced_by_installed_code_is_not_flagged_but_one_from_a_project_file_is(module, tmp_path,
                                                                                          monkeypatch):
    monkeypatch.setattr(module, "used", json.dumps)  # the standard library: a decorator's wrapper, say
    assert importbind.patched(module, set()) == []
    (tmp_path / "other.py").write_text("def used(x):\n    return 0\n")
    spec = importlib.util.spec_from_file_location("other_ib", tmp_path / "other.py")
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    monkeypatch.setattr(module, "used", other.used)
    assert importbind.patched(module, set()) == \
        [f"{module.__name__}.used is replaced by code from {tmp_path / 'other.py'}"]


def _forged(module) -> bytes:
    return marshal.dumps(compile(SOURCE.replace("x + LIMIT", "x"), module.__spec__.origin, "exec"))


def test_stale_timestamp_bytecode_is_no_mismatch_python_compiled_the_source_instead(module):
    _write_pyc(module, _forged(module), mtime_shift=-100)
    assert importbind.bytecode_mismatch(module) is None


def test_unchecked_hash_based_bytecode_is_compared_checked_is_trusted_to_python(module):
    _write_pyc(module, _forged(module), flags=0b01)  # hash-based, unchecked: Python runs it as is
    assert "ran from bytecode" in importbind.bytecode_mismatch(module)
    _write_pyc(module, _forged(module), flags=0b11)  # checked: Python compared the source's hash
    assert importbind.bytecode_mismatch(module) is None


def test_a_replaced_method_of_a_top_level_class_is_flagged(module, tmp_path, monkeypatch):
    (tmp_path / "other2.py").write_text("def size(self):\n    return 2\n")
    spec = importlib.util.spec_from_file_location("other2_ib", tmp_path / "other2.py")
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    monkeypatch.setattr(module.Box, "size", other.size)
    assert importbind.patched(module, set()) == \
        [f"{module.__name__}.Box.size is replaced by code from {tmp_path / 'other2.py'}"]


def test_a_compiled_module_beside_the_source_shadows_it(tmp_path):
    (tmp_path / "m.py").write_text(SOURCE)
    compiled = tmp_path / ("m" + importbind.EXTENSION_SUFFIXES[0])
    assert importbind.shadowing("pkg.m", compiled) == f"{compiled.name} shadows m.py"
    assert importbind.shadowing("pkg.m", tmp_path / "m.py") is None


def test_resolve_follows_the_path_finder(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for entry in (first, second):
        (entry / "ns").mkdir(parents=True)  # a namespace portion in each entry
    (first / "plain.py").write_text("")
    (first / "sibling.py").write_text("")
    (first / "pkg").mkdir()
    (first / "pkg" / "__init__.py").write_text("")
    (first / "pkg" / "sub.py").write_text("")
    entries = [first, second]
    assert importbind.resolve("ns", entries) == first / "ns"  # a namespace package: its first directory
    assert importbind.resolve("ns", [second]) == second / "ns"
    assert importbind.resolve("pkg.sub", entries) == first / "pkg" / "sub.py"
    assert importbind.resolve("pkg.sibling", entries) is None  # a package's submodules are in its directory
    assert importbind.resolve("plain.sibling", entries) is None  # a plain module has no submodules
    assert importbind.resolve("plain", entries) == first / "plain.py"


def test_a_function_replaced_by_a_builtin_has_no_file_to_blame(module, monkeypatch):
    monkeypatch.setattr(module, "used", len)  # C code: no Python file it came from
    assert importbind.patched(module, set()) == []
