"""pv.astcanon writes the canonical text of a tree by recursion: it must equal, character for
character, the stack walks of pv.codebind and pv.codeunits that define it (ledger records carry
digests of that text), on every tree, and fall back to them where a tree nests too deep."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest

from pv import astcanon, codebind, codeunits

ROOT = Path(__file__).resolve().parents[1]


def _sources() -> list[Path]:
    own = sorted((ROOT / "pv").rglob("*.py")) + sorted((ROOT / "pvlab").rglob("*.py"))
    stdlib = [Path(m.__file__) for m in (ast, json, textwrap, pytest)]  # other authors' shapes
    return own + stdlib


def test_the_recursive_text_equals_the_stack_walk_on_every_tree_and_unit():
    compared = 0
    for path in _sources():
        tree = ast.parse(path.read_bytes())
        assert codebind._canonical(tree) == codebind._canonical_walk(tree), path
        for drop in (True, False):
            assert (codeunits._canonical_unit(tree, drop_functions=drop)
                    == codeunits._canonical_unit_walk(tree, drop_functions=drop)), path
        for qualname, node in codeunits.named_functions(tree):
            assert (codeunits._canonical_unit(node, drop_functions=False)
                    == codeunits._canonical_unit_walk(node, drop_functions=False)), (path, qualname)
            compared += 1
        codebind._strip_docstrings(tree)  # as codebind.digest_source digests it
        assert codebind._canonical(tree) == codebind._canonical_walk(tree), path
    assert compared > 1000


def test_hand_built_trees_with_absent_fields_and_docstring_only_bodies():
    # built without the optional fields a parse sets (ast.iter_fields skips what is absent)
    tree = ast.Module(body=[
        ast.Expr(ast.Constant("module doc")),
        ast.FunctionDef(name="f", args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                                     defaults=[]),
                        body=[ast.Expr(ast.Constant("only a docstring"))], decorator_list=[]),
        ast.ClassDef(name="C", bases=[], keywords=[], body=[ast.Pass()], decorator_list=[]),
    ], type_ignores=[])
    assert codebind._canonical(tree) == codebind._canonical_walk(tree)
    for drop in (True, False):
        assert codeunits._canonical_unit(tree, drop_functions=drop) == codeunits._canonical_unit_walk(
            tree, drop_functions=drop)


def test_a_tree_too_deep_to_recurse_gets_the_stack_walks_text():
    tree = ast.parse("x = " + "1 + " * 2000 + "1")  # a BinOp chain 2,000 deep: over the recursion limit
    with pytest.raises(RecursionError):
        astcanon._emit(tree, [], False, False)
    assert codebind._canonical(tree) == codebind._canonical_walk(tree)
    assert codeunits._canonical_unit(tree, drop_functions=True) == codeunits._canonical_unit_walk(
        tree, drop_functions=True)


def test_the_quick_texts_of_names_constants_and_fieldless_nodes_fall_back_where_they_would_differ():
    """pv.astcanon writes a Name, a Constant and a node without fields (Load, an operator) at once;
    every other shape of them (a field missing, a value that is a list, a tuple, a tree, a kind
    that is not text) goes the general way: the same text as the stack walk either way."""
    x = ast.Name(id="x", ctx=ast.Load())
    odd = [
        x, ast.Name(id="x"), ast.Name(ctx=ast.Store()), ast.Name(id=None, ctx=ast.Load()), ast.Name(id="x", ctx=x),
        ast.Constant(value=1), ast.Constant(value=None), ast.Constant(value="s", kind="u"), ast.Constant(value=None, kind="u"),
        ast.Constant(), ast.Constant(value=[1, [2]]), ast.Constant(value=[]), ast.Constant(value=(1, "a")),
        ast.Constant(value=x), ast.Constant(value=1.5, kind=7), ast.Constant(value=b"\x00", kind=None),
        ast.Constant(value=...), ast.Constant(value=True), ast.Constant(value=2j), ast.Constant(value=frozenset({1})),
        ast.Compare(left=x, ops=[ast.Eq(), ast.NotIn()], comparators=[x, ast.Constant(3)]),
        ast.BinOp(left=x, op=ast.Add(), right=ast.UnaryOp(op=ast.USub(), operand=ast.Constant(1))),
        ast.BoolOp(op=ast.And(), values=[x, ast.Pass()]),
    ]
    for node in odd:
        tree = ast.Module(body=[ast.Pass(), ast.Expr(node)], type_ignores=[])  # (not in a docstring's place)
        assert codebind._canonical(tree) == codebind._canonical_walk(tree), ast.dump(node)
        assert codeunits._canonical_unit(tree, drop_functions=True) == codeunits._canonical_unit_walk(
            tree, drop_functions=True), ast.dump(node)
