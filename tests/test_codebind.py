"""pv.codebind: syntax-tree digests and the modules a check's evidence is bound to."""

from __future__ import annotations

from pathlib import Path

from pv import codebind

BASE = b'"""Module doc."""\n\n\ndef f(x):\n    """Doc."""\n    return x + 1  # a comment\n'


def test_docstrings_comments_and_layout_do_not_change_the_digest():
    same = b'"""Another doc."""\ndef f(x):\n\n    return (x +\n            1)\n'
    assert codebind.digest_source(BASE) == codebind.digest_source(same)


def test_any_code_edit_changes_the_digest():
    for edited in (BASE.replace(b"x + 1", b"x + 2"), BASE.replace(b"x + 1", b"1 + x"),
                   BASE + b"Y = 'doc-like string that is not a docstring'\n"):
        assert codebind.digest_source(edited) != codebind.digest_source(BASE)


def test_unparseable_and_absurdly_deep_modules_still_bind_without_a_crash():
    deep = b"x = " + b"(" * 3000 + b"1" + b")" * 3000 + b"\n"
    digest = codebind.digest_source(deep)
    assert digest.startswith("raw-") and digest != codebind.digest_source(deep + b"\n#")
    assert codebind.digest_source(b"def (:\n").startswith("raw-")


def _package(root: Path) -> None:
    pkg = root / "lab"
    (pkg / "runtime").mkdir(parents=True)
    (pkg / "checks").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "runtime" / "__init__.py").write_text("from . import kernels\n")
    (pkg / "runtime" / "kernels.py").write_text("def add(a, b):\n    return a + b\n")
    (pkg / "runtime" / "unused.py").write_text("X = 1\n")
    (pkg / "checks" / "__init__.py").write_text("")
    (pkg / "checks" / "helpers.py").write_text("def norm(x):\n    return abs(x)\n")
    (pkg / "checks" / "add.py").write_text(
        "from lab.runtime import kernels\nfrom .helpers import norm\n\n\ndef check(*, device):\n"
        "    import json  # outside the bound packages\n    return {'x': norm(kernels.add(1, 2))}\n")
    (pkg / "checks" / "other.py").write_text("from lab.runtime import unused\n")


def test_the_closure_is_what_the_check_imports_and_nothing_else(tmp_path):
    _package(tmp_path)
    bound = codebind.bind(["lab.checks.add"], ["lab.checks", "lab.runtime"], [tmp_path], loaded={})
    assert sorted(bound) == ["lab.checks", "lab.checks.add", "lab.checks.helpers", "lab.runtime",
                             "lab.runtime.kernels"]
    tree = codebind.TreeDigests(tmp_path)
    assert tree.changes(bound) == ()
    (tmp_path / "lab" / "runtime" / "unused.py").write_text("X = 2\n")  # never imported by the check
    (tmp_path / "lab" / "checks" / "other.py").write_text("Y = 3\n")
    assert codebind.TreeDigests(tmp_path).changes(bound) == ()
    (tmp_path / "lab" / "runtime" / "kernels.py").write_text("def add(a, b):\n    return a - b\n")
    (tmp_path / "lab" / "checks" / "helpers.py").unlink()
    assert codebind.TreeDigests(tmp_path).changes(bound) == ("lab.checks.helpers (removed)", "lab.runtime.kernels")


def test_records_without_digests_are_stale_with_a_reason(tmp_path):
    tree = codebind.TreeDigests(tmp_path)
    assert tree.changes(None) == ("recorded before code binding",)
    assert tree.changes({}) == ("records no code digest",)


def test_a_module_of_an_editable_install_is_found_through_its_import_hook(tmp_path, monkeypatch):
    """`pip install -e` of a package whose folder is not on sys.path (pv-pack maps `pvpack` to
    its own directory) is found by a meta-path hook: module_file asks for the top-level spec
    (the hook runs, the package is not imported) and finds the module under it."""
    import importlib.abc
    import importlib.util
    import sys

    from pv.codebind import module_file

    package = tmp_path / "somewhere" / "checkout"
    (package / "checks").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('never imported')\n")
    (package / "checks" / "__init__.py").write_text("")
    (package / "checks" / "forward.py").write_text("X = 1\n")
    (package / "direct.py").write_text("Y = 1\n")  # a plain module right under the package

    class EditableFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != "pv_editable_probe":
                return None
            return importlib.util.spec_from_file_location(name, package / "__init__.py",
                                                          submodule_search_locations=[str(package)])

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, EditableFinder()])
    assert module_file("pv_editable_probe.checks.forward", [tmp_path]) == package / "checks" / "forward.py"
    assert module_file("pv_editable_probe", [tmp_path]) == package / "__init__.py"
    assert module_file("pv_editable_probe.direct", [tmp_path]) == package / "direct.py"
    assert module_file("pv_editable_probe.absent", [tmp_path]) is None
    assert "pv_editable_probe" not in sys.modules


def test_the_canonical_text_names_only_fields_that_are_present():
    # absent (None) and empty fields are left out, so the digest does not move with a Python
    # version that adds an optional field to a node
    import ast

    text = codebind._canonical(ast.parse("x = 1\n"))
    assert "type_comment" not in text and "decorator_list" not in text and "=None" not in text
    assert "Assign(" in text and "targets=" in text and "Constant(" in text


def _empty_files(root: Path, *relative: str) -> None:
    for rel in relative:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")


def test_an_import_binds_the_module_and_every_parent_package(tmp_path):
    _empty_files(tmp_path, "pkg/__init__.py", "pkg/sub/__init__.py", "pkg/sub/leaf.py", "pkg/other.py")
    (tmp_path / "main.py").write_text("import pkg.sub.leaf\nfrom . import nothing\nimport pkg.other\n")
    found = codebind.module_imports("main", tmp_path / "main.py", [tmp_path])
    assert {"pkg", "pkg.sub", "pkg.sub.leaf", "pkg.other"} <= set(found)


def test_modules_are_looked_for_in_the_workspace_first_then_on_the_interpreters_path(tmp_path):
    import sys

    roots = codebind.search_roots(tmp_path)
    on_path = [Path(p) for p in sys.path if p and Path(p).is_dir() and Path(p) != tmp_path]
    assert roots[0] == tmp_path and on_path and roots[1:] == on_path


def test_remembered_digests_follow_the_bytes(tmp_path):
    _package(tmp_path)
    bound = codebind.bind(["lab.checks.add"], ["lab.checks", "lab.runtime"], [tmp_path], loaded={})
    tree = codebind.TreeDigests(tmp_path, persist=True)
    assert tree.changes(bound) == ()
    tree.save()
    assert (tmp_path / ".pv-cache" / "pv" / "code-digests.json").exists()
    (tmp_path / "lab" / "runtime" / "kernels.py").write_text("def add(a, b):\n    return a - b\n")
    assert codebind.TreeDigests(tmp_path, persist=True).changes(bound) == ("lab.runtime.kernels",)


def test_a_module_loaded_from_bytecode_is_digested_from_its_source(tmp_path):
    from types import SimpleNamespace

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "m.py").write_text("def f():\n    return 1\n")
    (tmp_path / "pkg" / "m.pyc").write_bytes(b"\x00not the source")
    loaded = {"pkg.m": SimpleNamespace(__file__=str(tmp_path / "pkg" / "m.pyc"))}
    got = codebind.bind(["pkg.m"], ["pkg"], [tmp_path], loaded=loaded)
    assert got["pkg.m"] == codebind.digest_file(tmp_path / "pkg" / "m.py")


def test_a_relative_import_climbs_one_package_per_extra_dot(tmp_path):
    _empty_files(tmp_path, "pkg/__init__.py", "pkg/sub/__init__.py", "pkg/other.py", "pkg/sub/deep/__init__.py")
    (tmp_path / "pkg/sub/deep/leaf.py").write_text("from ...other import x\nfrom .. import deep\n")
    found = codebind.module_imports("pkg.sub.deep.leaf", tmp_path / "pkg/sub/deep/leaf.py", [tmp_path])
    assert "pkg.other" in found and "pkg.sub.deep" in found
    assert "pkg.sub.deep.other" not in found and "pkg.sub.other" not in found


def test_the_bound_packages_may_be_any_iterable(tmp_path):
    _package(tmp_path)
    packages = ["lab.checks", "lab.runtime"]
    as_list = codebind.closure(["lab.checks.add"], packages, [tmp_path])
    assert codebind.closure(["lab.checks.add"], iter(packages), [tmp_path]) == as_list
    assert "lab.runtime.kernels" in as_list


def test_a_modules_parent_packages_are_bound_with_it(tmp_path):
    # importing lab.runtime.kernels runs lab/__init__.py and lab/runtime/__init__.py first
    _package(tmp_path)
    assert codebind.closure(["lab.runtime.kernels"], ["lab"], [tmp_path]) == {"lab", "lab.runtime", "lab.runtime.kernels"}


def test_unparseable_source_has_a_digest_as_wide_as_any_other():
    raw = codebind.digest_source(b"def broken(:\n")
    assert raw.startswith("raw-") and len(raw) == len(codebind.digest_source(b"x = 1\n")) == codebind.DIGEST_CHARS
    assert raw != codebind.digest_source(b"def broken(:\n\n")  # any edit still differs


def _digest_as_defined(data: bytes) -> str:
    """digest_source's definition: its own parse, docstrings removed in place, the stack walk."""
    import ast
    import hashlib

    try:
        tree = ast.parse(data)
        codebind._strip_docstrings(tree)
        text = "ast:" + codebind._canonical_walk(tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "raw-" + hashlib.sha256(data).hexdigest()[: codebind.DIGEST_CHARS - 4]
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[: codebind.DIGEST_CHARS]


def test_a_module_digest_is_its_definition_and_leaves_a_shared_tree_as_it_was():
    """digest_source writes the text without the docstrings instead of removing them from the
    tree first, so it may digest a tree other readers share (pv.sourcetrees): the same digest
    as the definition on pv's, the runtime's and the tests' sources and on docstring-only
    bodies, and the shared tree unchanged."""
    import ast

    import pv
    from pv import sourcetrees

    repo = Path(pv.__file__).resolve().parent.parent
    sources = [p.read_bytes() for d in ("pv", "pvlab", "pvpack", "tests") for p in sorted((repo / d).rglob("*.py"))]
    sources += [b'"""Only a docstring."""\n', b'class A:\n    """Doc."""\n\n\ndef f():\n    """Doc."""\n',
                b'def f():\n    """Doc."""\n    """Second."""\n', b'async def g():\n    "doc"\n    return 1\n',
                b'x = 1\n"""Not a docstring."""\n', b"def f():\n    'doc'\n    def g():\n        'inner'\n"]
    assert len(sources) > 300
    for data in sources:
        assert codebind.digest_source(data) == _digest_as_defined(data), data[:80]
    data = b'"""Doc."""\nclass A:\n    """Doc."""\n    x = 1\n'
    tree = ast.parse(data)
    before = ast.dump(tree)
    sourcetrees.share(data, tree)
    assert codebind.digest_source(data) == _digest_as_defined(data)
    assert ast.dump(tree) == before


def test_a_module_too_deep_to_recurse_is_digested_as_defined(monkeypatch):
    """Where the recursive writer runs out of stack, the definition's stack walk writes it."""
    import sys

    data = b"x = " + b"-" * 400 + b"1\n"
    expected = _digest_as_defined(data)
    walked: list[bytes] = []
    monkeypatch.setattr(codebind, "_stripped_walk", lambda d: walked.append(d) or _digest_text(d))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(250)
    try:
        assert codebind.digest_source(data) == expected
    finally:
        sys.setrecursionlimit(limit)
    assert walked == [data]


def _digest_text(data: bytes) -> str:
    import ast

    tree = ast.parse(data)
    codebind._strip_docstrings(tree)
    return codebind._canonical_walk(tree)
