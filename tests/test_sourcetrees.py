"""pv.sourcetrees: a tree pv.staticcheck parsed is read again by PV501's unit digests (same bytes,
same tree, same digests), and only while the index that parsed it holds it."""

from __future__ import annotations

import gc

import pytest

from pv import codeunits, sourcetrees
from pv.staticcheck import ModuleIndex

SOURCE = (b'"""Checks."""\n\n\ndef check(*, device):\n    """doc"""\n    return {"x": 1}\n\n\n'
          b"class C:\n    def m(self):\n        return 2\n")


def test_a_tree_the_index_parsed_is_shared_while_the_index_holds_it(tmp_path):
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "__init__.py").write_text("")
    (tmp_path / "lab" / "checks.py").write_bytes(SOURCE)
    index = ModuleIndex(tmp_path)
    module = index.module("lab.checks")
    assert module is not None and sourcetrees.shared(SOURCE) is module.tree
    shared = codeunits.UnitDigests(SOURCE)
    assert shared._tree is module.tree  # not parsed again
    whole = codeunits.parse_units(SOURCE).digests
    assert {q: shared.digest(q) for q in whole} == whole
    with pytest.MonkeyPatch.context() as patch:  # the whole units (kept where pv.cache is on) too
        patch.setattr(codeunits.ast, "parse", None)
        assert codeunits.parse_units(SOURCE).digests == whole
    assert ast_dump(module.tree) == ast_dump(codeunits.ast.parse(SOURCE))  # digesting changed nothing
    del index, module, shared
    gc.collect()
    assert sourcetrees.shared(SOURCE) is None  # never kept for the process


def test_the_mutants_files_scanned_are_shared_too(tmp_path):
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "__init__.py").write_text("")
    # bytes of this test alone: a file this process scanned before is answered without a parse
    source = (f"# {tmp_path}\nfrom pv.mutation import mutant\n\n\n"
              "@mutant('drops_bias')\ndef drops_bias():\n    yield\n").encode()
    (tmp_path / "lab" / "mutants.py").write_bytes(source)
    index = ModuleIndex(tmp_path)
    assert index.mutant_names("lab.mutants") == frozenset({"drops_bias"})
    tree = sourcetrees.shared(source)
    assert tree is not None and codeunits.UnitDigests(source)._tree is tree


def ast_dump(tree: object) -> str:
    return codeunits.ast.dump(tree, include_attributes=True)  # type: ignore[arg-type]
