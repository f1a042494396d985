"""pv.codeunits: a unit's digest is the canonical text of its syntax tree without docstrings
(and, for `<module>`, without functions), computed without copying the tree. The oracle here
is the obvious slow way: deep-copy the tree, prune it, strip docstrings, then pv.codebind's
canonical text."""

from __future__ import annotations

import ast
import copy
import os
import textwrap
from pathlib import Path

import pytest

from pv import codebind, codeunits

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)

TRICKY = textwrap.dedent('''\
    """Module docstring."""
    import os
    from . import sibling


    class OnlyMethods:
        """Its docstring and its methods are all it has."""

        def a(self):
            """doc"""

        async def b(self):
            return 1


    class Empty:
        """doc only"""


    if os.name == "nt":
        def branch():
            return 1
    else:
        def branch():
            return 2
        X = 1
    try:
        def guarded():
            def inner():
                """inner doc"""
                return [lambda: 3]
            return inner
    finally:
        pass


    def decorated(x=(1, 2), *a, k: int = 3, **kw) -> "str":
        """Docstring."""
        "a second string is code"
        return f"{x!r}"
    ''')


def _reference(tree: ast.Module) -> dict[str, str]:
    digests: dict[str, list[str]] = {}
    for qualname, node in codeunits.named_functions(tree):
        clean = copy.deepcopy(node)
        codebind._strip_docstrings(clean)
        digests.setdefault(qualname, []).append(codebind._canonical(clean))
    out = {q: codeunits._digest_text("def:" + "|".join(parts)) for q, parts in digests.items()}
    module = copy.deepcopy(tree)
    todo: list[ast.AST] = [module]
    while todo:
        node = todo.pop()
        for name, value in ast.iter_fields(node):
            if isinstance(value, list) and any(isinstance(v, _DEFS) for v in value):
                value = [v for v in value if not isinstance(v, _DEFS)] or ([ast.Pass()] if name == "body" else [])
                setattr(node, name, value)
            if isinstance(value, list):
                todo += [v for v in value if isinstance(v, ast.AST)]
            elif isinstance(value, ast.AST):
                todo.append(value)
    codebind._strip_docstrings(module)
    out[codeunits.MODULE_UNIT] = codeunits._digest_text("mod:" + codebind._canonical(module))
    return out


def _sources() -> list[tuple[str, bytes]]:
    root = Path(__file__).resolve().parents[1]
    files = [root / "pvlab" / "runtime" / f for f in ("kernels.py", "model.py", "trainer.py")] + [root / "pv" / "execution.py"]
    return [("tricky", TRICKY.encode())] + [(f.name, f.read_bytes()) for f in files]


@pytest.mark.parametrize("name, source", _sources(), ids=[n for n, _ in _sources()])
def test_digests_equal_the_copy_prune_and_strip_definition(name, source):
    assert codeunits.parse_units(source).digests == _reference(ast.parse(source))


@pytest.mark.parametrize("name, source", _sources() + [("unparsable", b"def (:\n")],
                         ids=[n for n, _ in _sources()] + ["unparsable"])
def test_digests_computed_when_asked_are_those_of_all_the_units(name, source):
    """UnitTree digests only the units a record names where nothing is remembered (UnitDigests):
    each is the digest parse_units gives it, and a unit the module lacks is None."""
    whole = codeunits.parse_units(source).digests
    for qualname in [*whole, "absent", "OnlyMethods.absent"]:
        assert codeunits.UnitDigests(source).digest(qualname) == whole.get(qualname), qualname
    asked_in_turn = codeunits.UnitDigests(source)
    assert {q: asked_in_turn.digest(q) for q in reversed(list(whole))} == whole


def test_the_tricky_module_has_the_units_expected():
    units = codeunits.parse_units(TRICKY.encode())
    assert set(units.digests) == {"<module>", "OnlyMethods.a", "OnlyMethods.b", "branch", "guarded",
                                  "guarded.<locals>.inner", "decorated"}
    # an executed line maps to the innermost function around it, else to the module
    source = TRICKY.splitlines()
    line = next(i for i, text in enumerate(source, 1) if "lambda: 3" in text)
    assert units.unit_of_line(line) == "guarded.<locals>.inner"
    assert units.unit_of_line(line + 1) == "guarded"
    assert units.unit_of_line(2) == codeunits.MODULE_UNIT
    assert units.unit_of_line(10_000) == codeunits.MODULE_UNIT


def test_the_import_statements_are_kept_for_the_binding():
    units = codeunits.parse_units(TRICKY.encode())
    assert (-1, "", ("os",)) in units.imports and (1, "", ("sibling",)) in units.imports


def test_docstrings_and_added_functions_leave_module_code_unchanged():
    base = codeunits.parse_units(TRICKY.encode()).digests
    edited = TRICKY.replace('"""Module docstring."""', '"""Other."""') + "\n\ndef added():\n    return 0\n"
    now = codeunits.parse_units(edited.encode()).digests
    assert now[codeunits.MODULE_UNIT] == base[codeunits.MODULE_UNIT]
    assert {k: v for k, v in now.items() if k != "added"} == base
    changed = codeunits.parse_units(TRICKY.replace('"a second string is code"', '"other"').encode()).digests
    assert changed["decorated"] != base["decorated"]


def test_units_kept_in_the_cache_read_back_equal_and_a_bad_entry_is_a_miss(tmp_path):
    from pv.cache import Cache, key_of
    from pv.codeunits import stored_units, units_of_source

    source = b"import os\nfrom . import sib\n\n\ndef f(x):\n    def g():\n        return x\n    return g()\n\n\nclass C:\n    def m(self):\n        return 1\n"
    first = Cache(tmp_path, "code-units", "v")
    computed = stored_units(source, first)
    first.save()
    again = stored_units(source, Cache(tmp_path, "code-units", "v"))  # read back from disk
    assert again == computed == units_of_source(source)
    assert again.imports == computed.imports and again.unit_of_line(7) == "f.<locals>.g"
    broken = Cache(tmp_path, "code-units", "v")
    broken.put(key_of(source), {"digests": {"f": 3}, "spans": [], "imports": []})
    assert stored_units(source, broken) == computed  # recomputed, never the broken entry


def _functions_walking_every_child(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """The walk named_functions replaced: every child node but expressions (the oracle of its order)."""
    found: list[tuple[str, ast.AST]] = []
    todo: list[tuple[str, ast.AST]] = [("", tree)]
    while todo:
        prefix, node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _DEFS):
                found.append((prefix + child.name, child))
                todo.append((prefix + child.name + ".<locals>.", child))
            elif isinstance(child, ast.ClassDef):
                todo.append((prefix + child.name + ".", child))
            elif not isinstance(child, ast.expr):
                todo.append((prefix, child))
    return found


BLOCKS = textwrap.dedent('''\
    match x:
        case 1:
            def in_case(): pass
        case _:
            class K:
                def m(self): pass
    try:
        pass
    except* E:
        def in_star(): pass
    else:
        def in_else(): pass
    finally:
        def in_finally(): pass
    for x in y:
        def in_for(): pass
    else:
        async def in_for_else():
            def inner(): pass
    while w:
        pass
    else:
        def in_while_else(): pass
    with a as b:
        def in_with(): pass
    if a:
        pass
    elif b:
        def in_elif(): pass
    f = lambda: [lambda: 1 for _ in y]
    ''')


@pytest.mark.parametrize("name, source", _sources() + [("blocks", BLOCKS.encode())],
                         ids=[n for n, _ in _sources()] + ["blocks"])
def test_functions_are_found_in_the_order_walking_every_child_finds_them(name, source):
    tree = ast.parse(source)
    assert [(q, id(n)) for q, n in codeunits.named_functions(tree)] == [
        (q, id(n)) for q, n in _functions_walking_every_child(tree)]


@pytest.mark.parametrize("store", [None, "units"], ids=["digested-when-asked", "whole-units"])
def test_a_tree_judges_each_record_alike_whatever_it_judged_before(tmp_path, store):
    """UnitTree.changes tells a record whose units all match from the digests it computed for
    earlier records (`known`): a record judged after others gets the reasons it gets alone."""
    (tmp_path / "mod.py").write_text(TRICKY)
    whole = codeunits.parse_units(TRICKY.encode()).digests
    assert len(whole) > 3
    wrong = {q: "0" * len(d) for q, d in whole.items()}
    records = [dict(whole), {q: wrong[q] if i % 2 else d for i, (q, d) in enumerate(whole.items())},
               {**whole, "absent": "1" * 16}, dict(list(whole.items())[:2]), wrong, {}, dict(whole)]

    class Store:  # remembers nothing: UnitTree then keeps whole ModuleUnits (as pv.cache does)
        active = True

        def get(self, *args):
            return None

        def put(self, *args):
            pass

    def tree():
        return codeunits.UnitTree(tmp_path, store=Store() if store else None)

    alone = [tree().changes({"mod": units}, {"mod": "mod.py"}, ()) for units in records]
    shared = tree()
    assert [shared.changes({"mod": units}, {"mod": "mod.py"}, ()) for units in records] == alone
    assert alone[0] == [] and alone[1] and alone[2] == ["mod:absent (removed)"] and alone[5] == []


def test_a_recorded_run_resolves_a_module_once_and_every_tree_records_what_it_asked(tmp_path, monkeypatch):
    from pv import importbind, readlog

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    resolved: list[str] = []
    real = importbind.resolve
    monkeypatch.setattr(importbind, "resolve", lambda name, entries: (resolved.append(name), real(name, entries))[1])
    run = readlog.start(tmp_path, [])
    parts = []
    try:
        for _ in range(2):  # two contracts' evidence, each judged with its own tree and recording
            part = readlog.start(tmp_path, [])
            try:
                found = codeunits.UnitTree(tmp_path).file_of("pkg.mod", None)
            finally:
                readlog.stop(part)
            parts.append(part)
            assert found == tmp_path / "pkg" / "mod.py"
    finally:
        readlog.stop(run)
    assert resolved == ["pkg.mod"]  # the second tree asked nothing
    kinds = [{where: value for what, where, value in p.inputs() if what == "kind"} for p in parts]
    assert kinds[0] == kinds[1] and kinds[0][f"stat:{tmp_path / 'pkg' / 'mod.py'}"] == "file"
    # a new run forgets it: the file system may have changed since
    (tmp_path / "pkg" / "mod.py").unlink()
    (tmp_path / "pkg" / "mod").mkdir()
    (tmp_path / "pkg" / "mod" / "__init__.py").write_text("")
    run = readlog.start(tmp_path, [])
    try:
        assert codeunits.UnitTree(tmp_path).file_of("pkg.mod", None) == tmp_path / "pkg" / "mod" / "__init__.py"
    finally:
        readlog.stop(run)
    assert resolved == ["pkg.mod", "pkg.mod"]
    # nothing recorded: each tree asks (nothing would replay what it asked)
    codeunits.UnitTree(tmp_path).file_of("pkg.mod", None)
    assert resolved == ["pkg.mod"] * 3


def test_a_recorded_run_finds_a_files_real_path_once_and_every_tree_records_what_it_asked(tmp_path, monkeypatch):
    from pv import readlog

    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "mod.py").write_text("x = 1\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    asked: list[str] = []
    real = os.path.realpath
    monkeypatch.setattr(os.path, "realpath", lambda p, *a, **k: (asked.append(str(p)), real(p, *a, **k))[1])
    run = readlog.start(tmp_path, [])
    parts = []
    try:
        for _ in range(2):
            part = readlog.start(tmp_path, [])
            try:
                shown = codeunits.UnitTree(tmp_path)._shown(tmp_path / "link" / "mod.py")
            finally:
                readlog.stop(part)
            parts.append(part)
            assert shown == "real/mod.py"
    finally:
        readlog.stop(run)
    assert asked.count(str(tmp_path / "link" / "mod.py")) == 1
    kinds = [{where: value for what, where, value in p.inputs() if what == "kind"} for p in parts]
    assert kinds[0] == kinds[1] and kinds[0][f"lstat:{tmp_path / 'link'}"] == "link"


def test_units_read_back_from_a_store_are_decoded_once_per_source(tmp_path, monkeypatch):
    from pv import cache

    data = TRICKY.encode() + b"\n# decoded once\n"
    store = cache.Cache(tmp_path, "code-units", "test")
    codeunits.stored_units(data, store)
    store.save()
    decoded: list[int] = []
    real = codeunits._from_json
    monkeypatch.setattr(codeunits, "_from_json", lambda d: (decoded.append(1), real(d))[1])
    monkeypatch.setattr(codeunits, "_DECODED", {})
    again = cache.Cache(tmp_path, "code-units", "test")
    first, second = codeunits.stored_units(data, again), codeunits.stored_units(data, again)
    assert first is second and decoded == [1]
    assert first.digests == codeunits.parse_units(data).digests
