"""Mutation operators: one small, syntactically valid change at one site of a module's source.

A *site* is one place where one operator applies: the `<` of `if n < limit`, the literal `1`
of `range(1, n)`, the statement `x = clamp(x)`. `sites(source)` lists them in source order;
`apply(source, site)` rewrites that one and nothing else. Rewriting goes through libcst (a
concrete syntax tree), so the rest of the file, comments and formatting included, is
byte-for-byte the original.

Operators (the `operator` field of a site):

    compare       a < b -> a <= b, <= -> <, > -> >=, >= -> >, == <-> !=, is <-> is not, in <-> not in
    boolean       and <-> or, not x -> x, True <-> False
    constant      an integer literal n -> n + 1 (off by one)
    statement     an expression statement, assignment, raise or assert -> pass (dropped)
    arguments     the first two positional arguments of a call swapped
    dtype         torch.float32 <-> torch.bfloat16, float16 -> float32, float64 -> float32
    device        "cuda" <-> "cpu"
    return        return <value> -> return None
    arithmetic    + <-> -, * <-> /, // -> /, % -> //, ** -> *, unary -x -> x; the same for +=, -=, ...

Not mutated: docstrings, annotations, imports, `__all__`, the body of `if TYPE_CHECKING:` and
`if __name__ == "__main__":`, and any line carrying the comment `# pragma: no mutate`.

A site's id is stable across unrelated edits: a digest of the module, the qualified name of
the function (or class) it sits in, the operator, the original and replacement code, and its
rank among the identical changes in that same function. Line numbers are reported, never
hashed, so inserting a line elsewhere keeps every id.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

OPERATORS = ("compare", "boolean", "constant", "statement", "arguments", "dtype", "device", "return", "arithmetic")
NO_MUTATE = "pragma: no mutate"


class MutationSourceError(Exception):
    """The module's source cannot be parsed (says where)."""


@dataclass(frozen=True)
class Site:
    id: str
    module: str
    operator: str
    scope: str  # qualified name of the enclosing function or class, "<module>" at top level
    line: int
    col: int
    original: str  # the code before (one node, as written)
    replacement: str  # the code after
    index: int  # position in sites() order (for apply on the same source)

    def label(self) -> str:
        return f"{self.operator}: {self.original} -> {self.replacement}"


_COMPARE = {cst.LessThan: cst.LessThanEqual, cst.LessThanEqual: cst.LessThan, cst.GreaterThan: cst.GreaterThanEqual,
            cst.GreaterThanEqual: cst.GreaterThan, cst.Equal: cst.NotEqual, cst.NotEqual: cst.Equal,
            cst.Is: cst.IsNot, cst.IsNot: cst.Is, cst.In: cst.NotIn, cst.NotIn: cst.In}
_ARITH = {cst.Add: cst.Subtract, cst.Subtract: cst.Add, cst.Multiply: cst.Divide, cst.Divide: cst.Multiply,
          cst.FloorDivide: cst.Divide, cst.Modulo: cst.FloorDivide, cst.Power: cst.Multiply}
_AUG = {cst.AddAssign: cst.SubtractAssign, cst.SubtractAssign: cst.AddAssign, cst.MultiplyAssign: cst.DivideAssign,
        cst.DivideAssign: cst.MultiplyAssign, cst.FloorDivideAssign: cst.DivideAssign}
_DTYPES = {"float32": "bfloat16", "bfloat16": "float32", "float16": "float32", "float64": "float32",
           "float": "bfloat16", "half": "float"}
_DEVICES = {"cuda": "cpu", "cpu": "cuda"}
_MODULE = cst.Module(body=[])


def _code(node: cst.CSTNode) -> str:
    return _MODULE.code_for_node(node)


def _with_spaces(op: type, like: Any) -> Any:
    """An operator node of type `op` with the whitespace of `like` (so `a<b` stays `a<=b`)."""
    kwargs = {}
    for attr in ("whitespace_before", "whitespace_after"):
        if hasattr(like, attr):
            kwargs[attr] = getattr(like, attr)
    if op in (cst.IsNot, cst.NotIn):
        kwargs["whitespace_between"] = cst.SimpleWhitespace(" ")
    try:
        return op(**kwargs)
    except TypeError:
        return op()


def _is_docstring(node: cst.SimpleStatementLine) -> bool:
    return (len(node.body) == 1 and isinstance(node.body[0], cst.Expr)
            and isinstance(node.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


def _guard_name(test: cst.BaseExpression) -> str | None:
    """'TYPE_CHECKING' for `if TYPE_CHECKING:`, '__main__' for `if __name__ == "__main__":`."""
    if isinstance(test, cst.Name) and test.value == "TYPE_CHECKING":
        return "TYPE_CHECKING"
    if isinstance(test, cst.Attribute) and test.attr.value == "TYPE_CHECKING":
        return "TYPE_CHECKING"
    if isinstance(test, cst.Comparison) and isinstance(test.left, cst.Name) and test.left.value == "__name__":
        return "__main__"
    return None


class _Walker(cst.CSTTransformer):
    """Lists every site (target None), or rewrites the one at position `target` in that order."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, module: str, skip_lines: set[int], target: int | None = None):
        super().__init__()
        self.module = module
        self.skip_lines = skip_lines
        self.target = target
        self.found: list[tuple[str, str, int, int, str, str]] = []  # operator, scope, line, col, before, after
        self.scopes: list[str] = []
        self.frozen = 0  # > 0 inside code that is never mutated
        self.applied: str | None = None

    # --- where we are -------------------------------------------------------------------
    def _scope(self) -> str:
        return ".".join(self.scopes) or "<module>"

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.append(node.name.value)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self.scopes.pop()
        return updated

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scopes.append(node.name.value)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self.scopes.pop()
        return updated

    def _freeze(self, _node: Any) -> None:
        self.frozen += 1

    def _thaw(self, _original: Any, updated: Any) -> Any:
        self.frozen -= 1
        return updated

    visit_Annotation = visit_Import = visit_ImportFrom = visit_Decorator = _freeze  # type: ignore[assignment]
    leave_Annotation = leave_Import = leave_ImportFrom = leave_Decorator = _thaw  # type: ignore[assignment]

    def visit_If(self, node: cst.If) -> None:
        self.frozen += 1 if _guard_name(node.test) else 0

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        self.frozen -= 1 if _guard_name(original.test) else 0
        return updated

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        frozen = _is_docstring(node) or any(
            isinstance(s, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value == "__all__"
                                              for t in s.targets) for s in node.body)
        self.frozen += 1 if frozen else 0

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine,
                                  updated: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
        frozen = _is_docstring(original) or any(
            isinstance(s, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value == "__all__"
                                              for t in s.targets) for s in original.body)
        self.frozen -= 1 if frozen else 0
        return updated

    # --- one candidate ------------------------------------------------------------------
    def _offer(self, operator: str, original: cst.CSTNode, updated: Any, make: Callable[[], Any],
               before: cst.CSTNode | None = None) -> Any:
        """Record a site at `original`; in apply mode return `make()` when it is the target."""
        if self.frozen:
            return updated
        pos = self.get_metadata(PositionProvider, original).start
        if pos.line in self.skip_lines:
            return updated
        index = len(self.found)
        replaced = make()
        self.found.append((operator, self._scope(), pos.line, pos.column + 1,
                           _code(before if before is not None else original), _code(replaced)))
        if self.target == index:
            self.applied = operator
            return replaced
        return updated

    # --- operators ----------------------------------------------------------------------
    def leave_Comparison(self, original: cst.Comparison, updated: cst.Comparison) -> cst.Comparison:
        for i, target in enumerate(original.comparisons):
            flipped = _COMPARE.get(type(target.operator))
            if flipped is None:
                continue

            def make(i: int = i, flipped: type = flipped, base: cst.Comparison = updated) -> cst.Comparison:
                parts = list(base.comparisons)
                parts[i] = parts[i].with_changes(operator=_with_spaces(flipped, parts[i].operator))
                return base.with_changes(comparisons=parts)

            updated = self._offer("compare", original, updated, make)
        return updated

    def leave_BooleanOperation(self, original: cst.BooleanOperation, updated: cst.BooleanOperation) -> Any:
        swap = cst.Or if isinstance(original.operator, cst.And) else cst.And
        return self._offer("boolean", original, updated,
                           lambda: updated.with_changes(operator=_with_spaces(swap, updated.operator)))

    def leave_UnaryOperation(self, original: cst.UnaryOperation, updated: cst.UnaryOperation) -> Any:
        if isinstance(original.operator, cst.Not):
            return self._offer("boolean", original, updated,
                               lambda: cst.ensure_type(updated.expression, cst.BaseExpression))
        if isinstance(original.operator, cst.Minus) and not isinstance(original.expression, (cst.Integer, cst.Float)):
            return self._offer("arithmetic", original, updated, lambda: updated.expression)
        return updated

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> Any:
        if original.value in ("True", "False"):
            other = "False" if original.value == "True" else "True"
            return self._offer("boolean", original, updated, lambda: updated.with_changes(value=other))
        return updated

    def leave_Integer(self, original: cst.Integer, updated: cst.Integer) -> Any:
        try:
            value = int(original.value.replace("_", ""), 0)
        except ValueError:
            return updated
        return self._offer("constant", original, updated, lambda: cst.Integer(str(value + 1)))

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> Any:
        try:
            value = original.evaluated_value
        except Exception:  # noqa: BLE001 - bytes or odd prefixes: not a device literal
            return updated
        if isinstance(value, str) and value in _DEVICES:
            quote = original.quote
            return self._offer("device", original, updated,
                               lambda: updated.with_changes(value=f"{original.prefix}{quote}{_DEVICES[value]}{quote}"))
        return updated

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> Any:
        if (isinstance(original.value, cst.Name) and original.value.value == "torch"
                and original.attr.value in _DTYPES):
            other = _DTYPES[original.attr.value]
            return self._offer("dtype", original, updated,
                               lambda: updated.with_changes(attr=cst.Name(other)))
        return updated

    def leave_BinaryOperation(self, original: cst.BinaryOperation, updated: cst.BinaryOperation) -> Any:
        swap = _ARITH.get(type(original.operator))
        if swap is None or _is_string_format(original):
            return updated
        return self._offer("arithmetic", original, updated,
                           lambda: updated.with_changes(operator=_with_spaces(swap, updated.operator)))

    def leave_AugAssign(self, original: cst.AugAssign, updated: cst.AugAssign) -> Any:
        swap = _AUG.get(type(original.operator))
        if swap is None:
            return updated
        return self._offer("arithmetic", original, updated,
                           lambda: updated.with_changes(operator=_with_spaces(swap, updated.operator)))

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> Any:
        positional = [i for i, a in enumerate(original.args) if a.keyword is None and not a.star]
        if len(positional) < 2:
            return updated
        a, b = positional[:2]
        if _code(original.args[a].value) == _code(original.args[b].value):
            return updated  # swapping equal arguments changes nothing

        def make() -> cst.Call:
            args = list(updated.args)
            args[a] = updated.args[a].with_changes(value=updated.args[b].value)
            args[b] = updated.args[b].with_changes(value=updated.args[a].value)
            return updated.with_changes(args=args)

        return self._offer("arguments", original, updated, make)

    def leave_Return(self, original: cst.Return, updated: cst.Return) -> Any:
        if original.value is None or (isinstance(original.value, cst.Name) and original.value.value == "None"):
            return updated
        return self._offer("return", original, updated, lambda: updated.with_changes(value=cst.Name("None")))

    def on_leave(self, original: cst.CSTNode, updated: Any) -> Any:
        result = super().on_leave(original, updated)
        if isinstance(original, (cst.Expr, cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Raise, cst.Assert)):
            if isinstance(original, cst.AnnAssign) and original.value is None:
                return result
            if isinstance(original, cst.Expr) and isinstance(original.value, (cst.SimpleString, cst.Ellipsis,
                                                                              cst.ConcatenatedString)):
                return result
            return self._offer("statement", original, result, lambda: cst.Pass(), before=original)
        return result


def _is_string_format(node: cst.BinaryOperation) -> bool:
    """`"..." % args` and `"a" + "b"`: string building, not arithmetic."""
    return any(isinstance(side, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString))
               for side in (node.left, node.right))


def _parse(source: str, where: str) -> MetadataWrapper:
    try:  # Python's own parser first: its line and column are the ones an editor shows
        ast.parse(source)
    except SyntaxError as exc:
        raise MutationSourceError(f"{where}:{exc.lineno or 0}:{exc.offset or 0}: cannot parse: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise MutationSourceError(f"{where}: cannot parse: {type(exc).__name__}: {exc}") from None
    try:
        return MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError as exc:
        raise MutationSourceError(f"{where}:{exc.raw_line}:{exc.raw_column + 1}: cannot parse: "
                                  f"{exc.message}") from None
    except (RecursionError, MemoryError) as exc:
        raise MutationSourceError(f"{where}: cannot parse: {type(exc).__name__}") from None


def _skip_lines(source: str) -> set[int]:
    return {i for i, line in enumerate(source.splitlines(), start=1) if NO_MUTATE in line}


def _site_id(module: str, scope: str, operator: str, before: str, after: str, rank: int) -> str:
    text = "\0".join([module, scope, operator, before, after, str(rank)])
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def sites(source: str, module: str, where: str | None = None, operators: Sequence[str] = OPERATORS) -> list[Site]:
    """Every mutation site of one module's source, in source order. Raises MutationSourceError."""
    walker = _Walker(module, _skip_lines(source))
    _parse(source, where or module).visit(walker)
    ranks: dict[tuple[str, str, str, str], int] = {}
    out = []
    for index, (operator, scope, line, col, before, after) in enumerate(walker.found):
        key = (scope, operator, before, after)
        ranks[key] = ranks.get(key, -1) + 1
        if operator in operators:
            out.append(Site(_site_id(module, scope, operator, before, after, ranks[key]), module, operator, scope,
                            line, col, _one_line(before), _one_line(after), index))
    return out


def _one_line(code: str, limit: int = 80) -> str:
    text = " ".join(code.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def apply(source: str, site: Site, where: str | None = None) -> str:
    """The source with `site` (from sites() of this same source) rewritten, nothing else."""
    walker = _Walker(site.module, _skip_lines(source), target=site.index)
    mutated = _parse(source, where or site.module).visit(walker)
    if walker.applied != site.operator:
        raise MutationSourceError(f"{where or site.module}: site {site.id} not found at index {site.index}")
    return mutated.code


def find(source: str, module: str, site_id: str, where: str | None = None) -> Site | None:
    """The site with this id in today's source, or None (the code it mutated is gone)."""
    return next((s for s in sites(source, module, where) if s.id == site_id), None)


def unified_diff(before: str, after: str, path: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile=f"a/{path}", tofile=f"b/{path}", n=1))
