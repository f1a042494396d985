"""The canonical text of a syntax tree, written out recursively: the hot path of every digest.

pv.codebind (module digests, test digests through pv.testdigest) and pv.codeunits (unit digests)
define the text with an explicit work stack, which no nesting depth can break. Walking the
stack (a tuple pushed and popped for every field and node, `ast.iter_fields` generators) cost
twice what the same walk costs as plain recursion, and a cold `pv validate` digests every
function of every module its evidence executed. So the text is written here recursively, and a
tree deeper than the interpreter's recursion limit falls back to the caller's stack walk: the
two give the same text for every tree (tests/test_codeunits.py and tests/test_codebind.py
compare them), so which one ran never shows.

The text: `Type(` then, for each field in `_fields` order that is present, not None and not
an empty list, `name=` and the value (a list as `[` items `]`), then `)`; any other value
(a str, a number, a constant) as its repr and a comma.
"""

from __future__ import annotations

import ast
from typing import Callable

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_NAME, _CONSTANT = ast.Name, ast.Constant
_MISSING = object()
_HAS_DOCSTRING = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_PASS = ast.Pass()

# per node class: its opening text, (field, "field=", "field=[") for each field, and whether
# its body may start with a docstring; built on first sight of the class
_FORMS: dict[type, tuple[str, tuple[tuple[str, str, str], ...], bool]] = {}


def _form(cls: type) -> tuple[str, tuple[tuple[str, str, str], ...], bool]:
    form = _FORMS[cls] = (cls.__name__ + "(", tuple((name, name + "=", name + "=[") for name in cls._fields),
                          issubclass(cls, _HAS_DOCSTRING))
    return form


def _is_docstring(node: object) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str))


# The whole text of a node of a class without fields (a context such as Load, an operator): the
# same on every node, written without a call for it.
_LEAVES: dict[type, str] = {cls: cls.__name__ + "()" for cls in vars(ast).values()
                            if isinstance(cls, type) and issubclass(cls, ast.AST) and cls._fields == ()}
_PLAIN = frozenset({str, int, float, complex, bool, bytes, type(None), type(...)})  # never a list, an AST, or == []


def _emit(node: ast.AST, out: list[str], drop_functions: bool, strip_docstrings: bool) -> None:
    cls = node.__class__
    # The two commonest nodes, written at once where the general loop below would write the same
    # text: a name (`Name(id=<repr>,ctx=Load())`) and a constant (its value and kind, each left
    # out where None). Anything else about them (a field missing, a value of another type) takes
    # the loop.
    if cls is _NAME:
        ident, ctx = getattr(node, "id", None), getattr(node, "ctx", None)
        if ident.__class__ is str and ctx.__class__ in _LEAVES:
            out.append(f"Name(id={ident!r},ctx={_LEAVES[ctx.__class__]})")
            return
    elif cls is _CONSTANT:
        value, kind = getattr(node, "value", _MISSING), getattr(node, "kind", _MISSING)
        if value.__class__ in _PLAIN and (kind is None or kind.__class__ is str):
            out.append("Constant(" + ("" if value is None else f"value={value!r},")
                       + ("" if kind is None else f"kind={kind!r},") + ")")
            return
    head, fields, has_docstring = _FORMS.get(cls) or _form(cls)
    out.append(head)
    for name, named, named_list in fields:
        try:
            value = getattr(node, name)
        except AttributeError:  # a field this node was built without (as ast.iter_fields skips it)
            continue
        if value is None:
            continue
        if value.__class__ is list:
            if drop_functions and any(isinstance(v, _DEFS) for v in value):
                value = [v for v in value if not isinstance(v, _DEFS)]
                if not value and name == "body":
                    value = [_PASS]
            if strip_docstrings and has_docstring and name == "body" and value and _is_docstring(value[0]):
                value = value[1:] or [_PASS]
            if not value:
                continue
            out.append(named_list)
            for item in value:
                leaf = _LEAVES.get(item.__class__)
                if leaf is not None:
                    out.append(leaf)
                elif isinstance(item, ast.AST):
                    _emit(item, out, drop_functions, strip_docstrings)
                else:
                    out.append(repr(item) + ",")
            out.append("]")
        elif isinstance(value, ast.AST):
            out.append(named)
            leaf = _LEAVES.get(value.__class__)
            if leaf is not None:
                out.append(leaf)
            else:
                _emit(value, out, drop_functions, strip_docstrings)
        elif value != []:  # (what the stack walk tests; no non-list field value equals [])
            out.append(named)
            out.append(repr(value) + ",")
    out.append(")")


def canonical_text(tree: ast.AST, fallback: Callable[[], str], *, drop_functions: bool = False,
                   strip_docstrings: bool = False) -> str:
    """The canonical text of `tree`; `fallback()` (the stack walk) where it nests too deep to
    recurse. `drop_functions`: every function definition removed from the statement lists it
    sits in (an emptied `body` becomes `pass`); `strip_docstrings`: the docstring of a module,
    class or function left out (a body left empty becomes `pass`) — pv.codeunits' unit texts."""
    out: list[str] = []
    try:
        _emit(tree, out, drop_functions, strip_docstrings)
    except RecursionError:
        return fallback()
    return "".join(out)
