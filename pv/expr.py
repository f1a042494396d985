"""pv's safe expression language for `prediction` and `formula`.

Numbers, names, true/false, + - * / ** % (and unary -), comparisons (chains allowed),
and/or/not, and a few math functions: ln, log, log2, log10, exp, sqrt, abs, min, max.
The text is parsed with `ast` and walked; it is never `eval`ed. Attribute access,
subscripts, other calls, lambdas, comprehensions, strings and dunder names are rejected.

`judge(prediction, observations)` evaluates a prediction and computes its **margin**: how far
the observed values are from the bound, positive when the prediction holds. For `a < b` the
margin is `b - a`; for `a > b` it is `a - b`; for a chain it is the smallest link's margin;
`and` takes the minimum, `or` the maximum; `==` gives `-|a - b|` (zero when equal). A boolean
clause has no distance: the margin of `a < 1 and flag` is that of `a < 1` (the worst numeric
clause), and pv.explain shows `flag` as held or broken beside it.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable

MAX_LENGTH = 2000
MAX_NODES = 500

FUNCTIONS: dict[str, tuple[Callable[..., float], int, int | None]] = {
    # name: (implementation, min args, max args)
    "ln": (math.log, 1, 1),
    "log": (math.log, 1, 1),
    "log2": (math.log2, 1, 1),
    "log10": (math.log10, 1, 1),
    "exp": (math.exp, 1, 1),
    "sqrt": (math.sqrt, 1, 1),
    "abs": (abs, 1, 1),
    "min": (min, 2, None),
    "max": (max, 2, None),
}
CONSTANTS: dict[str, Any] = {"true": True, "false": False, "pi": math.pi, "e": math.e, "inf": math.inf}

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
}
_COMPARE = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_SYMBOL = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


class ExprError(ValueError):
    """The text is not in the language. `col` is 1-based within the expression text."""

    def __init__(self, message: str, col: int = 0, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.col = col
        self.hint = hint


class EvalError(ValueError):
    """The expression is valid but cannot be evaluated on these observations."""


@dataclass(frozen=True)
class Expression:
    text: str
    tree: ast.expression
    names: frozenset[str] = frozenset()

    def evaluate(self, env: dict[str, Any]) -> Any:
        return _Evaluator(env).value(self.tree.body)


def parse(text: str) -> Expression:
    """Parse and validate an expression; raises ExprError with a column and a hint."""
    if not isinstance(text, str):
        raise ExprError(f"expected text, got {type(text).__name__}")
    return _parse(text)


@functools.lru_cache(maxsize=2048)  # a formula is often repeated as its falsifier's prediction
def _parse(text: str) -> Expression:
    source = " ".join(text.split("\n")).strip()
    if not source:
        raise ExprError("empty expression")
    if len(source) > MAX_LENGTH:
        raise ExprError(f"expression longer than {MAX_LENGTH} characters")
    for symbol, what in (("#", "a comment"), ("\\", "a backslash"), (";", "a semicolon")):
        if symbol in source:
            # Python's parser would drop a comment silently: `x < 1 # and x > 100` is `x < 1`.
            raise ExprError(f"{what} ({symbol}) is not part of the expression language",
                            col=source.index(symbol) + 1,
                            hint="a prediction is one expression; put explanations in `rule:` or `if_fails:`")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"syntax error: {exc.msg}", col=exc.offset or 0, hint=_syntax_hint(source)) from None
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes; absurd nesting
        raise ExprError(f"cannot parse: {type(exc).__name__}") from None
    names: set[str] = set()
    stack: list[ast.AST] = [tree.body]
    count = 0
    while stack:  # depth-first, iterative: `- - - ... x` cannot exhaust the Python stack
        node = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise ExprError(f"expression has more than {MAX_NODES} parts")
        _check_node(node, names)
        stack.extend(_children(node))
    return Expression(text=source, tree=tree, names=frozenset(names))


def _children(node: ast.AST) -> list[ast.AST] | tuple[ast.AST, ...]:
    """Sub-expressions of an accepted node (operators and the callee's name are checked by
    _check_node itself). Listed right to left so the stack visits them left to right."""
    kind = type(node)
    if kind is ast.BinOp:
        return (node.right, node.left)  # type: ignore[attr-defined]
    if kind is ast.UnaryOp:
        return (node.operand,)  # type: ignore[attr-defined]
    if kind is ast.BoolOp:
        return node.values[::-1]  # type: ignore[attr-defined]
    if kind is ast.Compare:
        return [node.left, *node.comparators][::-1]  # type: ignore[attr-defined]
    if kind is ast.Call:
        return node.args[::-1]  # type: ignore[attr-defined]
    return ()


_UNICODE_OPERATORS = {"≤": "<=", "≥": ">=", "≠": "!=", "≈": "a tolerance, e.g. abs(a - b) <= tol",
                      "×": "*", "·": "*", "√": "sqrt(...)", "∧": "and", "∨": "or", "¬": "not", "−": "-"}


def _syntax_hint(source: str) -> str:
    for symbol, replacement in _UNICODE_OPERATORS.items():
        if symbol in source:
            return f"pv expressions are ASCII: write {replacement} instead of {symbol}"
    if any(ord(ch) > 127 for ch in source):
        return "pv expressions are ASCII: names, numbers and + - * / ** % < <= > >= == != and/or/not"
    if re.search(r"(?<![<>!=])=(?!=)", source):
        return "use == for equality"
    if "&&" in source or "||" in source:
        return "write and / or"
    return ""


def _reject(node: ast.AST, what: str, hint: str = "") -> ExprError:
    col = getattr(node, "col_offset", -1) + 1
    return ExprError(f"{what} is not allowed in pv expressions", col=col, hint=hint)


_ALLOWED_HINT = "allowed: numbers, names, + - * / ** %, comparisons, and/or/not, " + ", ".join(FUNCTIONS)


def _fits_float(value: int) -> bool:
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _check_node(node: ast.AST, names: set[str]) -> None:
    kind = type(node)
    if kind is ast.Name:
        if node.id.startswith("_"):  # type: ignore[attr-defined]
            raise _reject(node, f"the name {node.id!r} (leading underscore)",  # type: ignore[attr-defined]
                          "observation names start with a letter")
        if node.id in FUNCTIONS:  # type: ignore[attr-defined]
            raise _reject(node, f"the function {node.id!r} without a call")  # type: ignore[attr-defined]
        if node.id in ("True", "False", "None"):  # type: ignore[attr-defined]
            raise _reject(node, f"{node.id!r}", "write true/false")  # type: ignore[attr-defined]
        if node.id not in CONSTANTS:  # type: ignore[attr-defined]
            names.add(node.id)  # type: ignore[attr-defined]
        return
    if isinstance(node, (ast.Expression, ast.Load)):
        return
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise _reject(node, f"the literal {node.value!r}", "only numbers are literals; use true/false for booleans")
        if isinstance(node.value, int) and node.value.bit_length() > 1000 and not _fits_float(node.value):
            raise _reject(node, "an integer literal past a float's range (1.8e308)", "write a float such as 1e308")
        return
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINARY:
            raise _reject(node, f"the operator {type(node.op).__name__}", _ALLOWED_HINT)
        return
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
            raise _reject(node, f"the operator {type(node.op).__name__}", _ALLOWED_HINT)
        return
    if isinstance(node, ast.BoolOp) or isinstance(node, (ast.And, ast.Or)):
        return
    if isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in _COMPARE:
                raise _reject(node, f"the comparison {type(op).__name__}", "use < <= > >= == !=")
        return
    if isinstance(node, tuple(_COMPARE)) or isinstance(node, tuple(_BINARY)) or isinstance(
        node, (ast.USub, ast.UAdd, ast.Not)
    ):
        return
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name):
            raise _reject(node, "calling an attribute or expression", _ALLOWED_HINT)
        name = node.func.id
        if name not in FUNCTIONS:
            raise _reject(node, f"the function {name!r}", _ALLOWED_HINT)
        if node.keywords:
            raise _reject(node, "a keyword argument")
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise _reject(node, "a star argument")
        _, lo, hi = FUNCTIONS[name]
        if len(node.args) < lo or (hi is not None and len(node.args) > hi):
            want = f"{lo}" if lo == hi else f"at least {lo}"
            raise ExprError(f"{name}() takes {want} argument(s), got {len(node.args)}", col=node.col_offset + 1)
        return
    if isinstance(node, ast.Attribute):
        raise _reject(node, f"attribute access (.{node.attr})", "observations are plain names")
    if isinstance(node, ast.Subscript):
        raise _reject(node, "subscripting ([...])", "observations are plain names")
    kind = _NODE_WORDS.get(type(node).__name__, f"a {type(node).__name__} expression")
    raise _reject(node, kind, _ALLOWED_HINT)


_NODE_WORDS = {
    "IfExp": "a conditional (x if c else y)", "Lambda": "a lambda", "NamedExpr": "an assignment (:=)",
    "List": "a list", "Tuple": "a tuple", "Dict": "a mapping", "Set": "a set", "ListComp": "a comprehension",
    "SetComp": "a comprehension", "DictComp": "a comprehension", "GeneratorExp": "a comprehension",
    "JoinedStr": "an f-string", "Starred": "a star expression", "Await": "await", "Yield": "yield",
    "YieldFrom": "yield", "Slice": "a slice",
}


class _Evaluator:
    def __init__(self, env: dict[str, Any]):
        self.env = env

    def value(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in CONSTANTS:
                return CONSTANTS[node.id]
            if node.id not in self.env:
                known = ", ".join(sorted(self.env)) or "none"
                raise EvalError(f"no observation named {node.id!r} (observed: {known})")
            return _number(node.id, self.env[node.id])
        if isinstance(node, ast.BinOp):
            left, right = self.value(node.left), self.value(node.right)
            try:
                if isinstance(node.op, ast.Pow) and not (abs(right) <= 64 and abs(left) <= 2**64):
                    left, right = float(left), float(right)  # no unbounded integer powers: 9**9**9
                result = _BINARY[type(node.op)](left, right)
            except OverflowError:  # the bare message is "(34, 'Numerical result out of range')"
                raise EvalError(f"arithmetic error: `{ast.unparse(node)}` overflows (past a float's "
                                "1.8e308)") from None
            except ZeroDivisionError:
                raise EvalError(f"arithmetic error: `{ast.unparse(node)}` divides by zero") from None
            except (ValueError, TypeError) as exc:
                raise EvalError(f"arithmetic error: {exc}") from None
            if isinstance(result, complex):
                raise EvalError(f"arithmetic error: {left!r} ** {right!r} is not a real number")
            return result
        if isinstance(node, ast.UnaryOp):
            operand = self.value(node.operand)
            if isinstance(node.op, ast.Not):
                return not operand
            return -operand if isinstance(node.op, ast.USub) else +operand
        if isinstance(node, ast.BoolOp):
            values = [self.value(v) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.Compare):
            left = self.value(node.left)
            for op, comparator in zip(node.ops, node.comparators):
                right = self.value(comparator)
                try:
                    if not _COMPARE[type(op)](left, right):
                        return False
                except TypeError as exc:
                    raise EvalError(f"cannot compare: {exc}") from None
                left = right
            return True
        if isinstance(node, ast.Call):
            fn = FUNCTIONS[node.func.id][0]  # type: ignore[union-attr]
            args = [self.value(a) for a in node.args]
            try:
                return fn(*args)
            except (ValueError, OverflowError) as exc:
                raise EvalError(f"{node.func.id}{tuple(args)}: {exc}") from None  # type: ignore[union-attr]
        raise EvalError(f"cannot evaluate {type(node).__name__}")  # unreachable after parse()

    def margin(self, node: ast.AST) -> float | None:
        """Distance from the bound (positive = holds); None where no distance is defined."""
        if isinstance(node, ast.Compare):
            margins = []
            left = self.value(node.left)
            for op, comparator in zip(node.ops, node.comparators):
                right = self.value(comparator)
                m = _link_margin(type(op), left, right)
                if m is None:
                    return None
                margins.append(m)
                left = right
            return min(margins)
        if isinstance(node, ast.BoolOp):
            # A boolean clause (`flag`, `not x`) has no distance: a mixed prediction's margin is
            # its numeric clauses' (pv.explain shows the booleans as held/broken beside it).
            parts = [p for p in (self.margin(v) for v in node.values) if p is not None]
            if not parts:
                return None
            return min(parts) if isinstance(node.op, ast.And) else max(parts)
        return None


def _number(name: str, value: Any) -> Any:
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return value
    # numpy / torch scalars expose item(); anything else is not an observation we can judge.
    item = getattr(value, "item", None)
    if callable(item):
        return _number(name, item())
    raise EvalError(f"observation {name!r} is {type(value).__name__}, not a number or boolean")


def to_float(value: Any) -> float:
    """A difference as a float; an integer past float's range (an observation of 10**400) is
    that far past any bound, so ±inf, not an OverflowError that would turn a FAIL into an ERROR."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _link_margin(op: type, left: Any, right: Any) -> float | None:
    if isinstance(left, bool) or isinstance(right, bool):
        return None
    if op in (ast.Lt, ast.LtE):
        return to_float(right - left)
    if op in (ast.Gt, ast.GtE):
        return to_float(left - right)
    if op is ast.Eq:
        return -abs(to_float(left - right))
    return None


@dataclass(frozen=True)
class Judgement:
    """The outcome of a prediction on a check's observations."""

    holds: bool
    margin: float | None
    prediction: str
    observed: dict[str, Any]  # the observations the prediction mentions

    def describe(self) -> str:
        shown = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(self.observed.items()))
        margin = "n/a" if self.margin is None else _fmt(self.margin)
        verdict = "holds" if self.holds else "FALSIFIED"
        return f"{verdict}: {self.prediction}  [observed {shown}; margin {margin}]"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def judge(prediction: str | Expression, observations: dict[str, Any]) -> Judgement:
    """Evaluate a prediction on observations. Raises ExprError / EvalError when it cannot."""
    expr = prediction if isinstance(prediction, Expression) else parse(prediction)
    evaluator = _Evaluator(observations)
    holds = evaluator.value(expr.tree.body)
    if not isinstance(holds, bool):
        raise EvalError(f"prediction {expr.text!r} gives {holds!r}, not true/false")
    observed = {n: observations[n] for n in expr.names if n in observations}
    if any(isinstance(v := _number(n, x), float) and math.isnan(v) for n, x in observed.items()):
        # A NaN measurement is broken whatever the prediction says (`x != 1` would hold on it);
        # pv.vacuity decides "can it fail" over non-NaN observations because of this rule.
        return Judgement(holds=False, margin=None, prediction=expr.text, observed=observed)
    margin = evaluator.margin(expr.tree.body)
    return Judgement(holds=holds, margin=margin, prediction=expr.text, observed=observed)


def is_boolean(expr: Expression) -> bool:
    """Whether the expression's top level yields true/false (a prediction must)."""
    body = expr.tree.body
    if isinstance(body, (ast.Compare, ast.BoolOp)):
        return True
    if isinstance(body, ast.UnaryOp) and isinstance(body.op, ast.Not):
        return True
    return isinstance(body, ast.Name)  # a boolean observation, e.g. `argmax_in_range`
