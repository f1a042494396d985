"""Predictions that cannot fail: found statically, before any check runs.

A falsifier whose prediction holds whatever the check observes proves nothing, and one that
can never hold is always red. `cannot_fail(text)` says why a prediction is one of them:

* it mentions no observation (`1 < 2`, `true`);
* it is true (or false) for every value of the observations: `x == x`, `a <= a`,
  `err < 1 or true`, `not false`, `x < x + 1`, `abs(x) >= 0`, `x < 1 or x >= 1`.

How: each comparison becomes a linear form `D op 0` over the observations (non-linear parts
such as `ln(x)` or `x * y` are opaque atoms with a known range where the function gives one:
abs, sqrt, exp and even powers are >= 0). A form with no atoms left is a constant; one whose
range decides `op` is a constant too. Equal forms (after scaling and sign) are the same atom,
so `x < 1` and `x >= 1` are one atom and its negation. If the prediction is true (or false)
for every truth assignment of its atoms (at most MAX_ATOMS), it cannot fail (or hold). The
test is sound: it only refuses what really cannot fail (for real-valued observations; a NaN
makes any comparison false, and `x == x` is no NaN test worth a falsifier).
"""

from __future__ import annotations

import ast
import itertools
import math
from typing import Any, Union

from pv import expr

MAX_ATOMS = 12
_NONNEGATIVE = {"abs", "sqrt", "exp"}

Linear = tuple[dict[str, float], float]  # atom key -> coefficient, constant
# A boolean formula: ("const", bool) | ("atom", key) | ("not", f) | ("and"|"or", [f, ...])
Formula = tuple[Any, ...]
Interval = tuple[float, float]


class _Opaque(Exception):
    """A part the analysis does not model (infinities, booleans in arithmetic)."""


def cannot_fail(prediction: Union[str, "expr.Expression"]) -> str | None:
    """Why `prediction` can never be falsified (or never hold), or None when it can go either
    way. Text that does not parse gives None: the parser reports it."""
    try:
        parsed = prediction if isinstance(prediction, expr.Expression) else expr.parse(prediction)
    except expr.ExprError:
        return None
    if not parsed.names:
        return "it mentions no observation, so no measurement can make it false"
    analysis = _Analysis()
    formula = analysis.formula(parsed.tree.body)
    atoms = sorted(analysis.atoms)
    if len(atoms) > MAX_ATOMS:
        return None
    values = {_truth(formula, dict(zip(atoms, bits))) for bits in itertools.product((False, True), repeat=len(atoms))}
    if values == {True}:
        return ("it holds for every value of the observations (a tautology, e.g. `x == x`, `a <= a`, "
                "`... or true`); compare an observation with an independent bound")
    if values == {False}:
        return "it is false for every value of the observations (a contradiction), so it can never pass"
    return None


def _truth(formula: Formula, assignment: dict[str, bool]) -> bool:
    kind = formula[0]
    if kind == "const":
        return formula[1]
    if kind == "atom":
        return assignment[formula[1]]
    if kind == "not":
        return not _truth(formula[1], assignment)
    parts = (_truth(f, assignment) for f in formula[1])
    return all(parts) if kind == "and" else any(parts)


class _Analysis:
    def __init__(self) -> None:
        self.atoms: set[str] = set()
        self.ranges: dict[str, Interval] = {}

    def atom(self, key: str) -> Formula:
        self.atoms.add(key)
        return ("atom", key)

    # --- boolean structure -------------------------------------------------------------------

    def formula(self, node: ast.AST) -> Formula:
        if isinstance(node, ast.BoolOp):
            return ("and" if isinstance(node.op, ast.And) else "or", [self.formula(v) for v in node.values])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return ("not", self.formula(node.operand))
        if isinstance(node, ast.Name) and node.id in ("true", "false"):
            return ("const", node.id == "true")
        if isinstance(node, ast.Compare):
            links = []
            left = node.left
            for op, right in zip(node.ops, node.comparators):
                links.append(self.comparison(left, type(op), right))
                left = right
            return links[0] if len(links) == 1 else ("and", links)
        return self.atom("expr:" + ast.dump(node))  # a boolean observation or something opaque

    def comparison(self, left: ast.AST, op: type, right: ast.AST) -> Formula:
        try:
            coefs, const = _minus(self.linear(left), self.linear(right))
        except _Opaque:
            return self.atom("cmp:" + ast.dump(ast.Compare(left, [op()], [right])))
        coefs = {k: c for k, c in coefs.items() if c != 0}
        low, high = const, const
        for key, c in coefs.items():
            lo, hi = self.ranges.get(key, (-math.inf, math.inf))
            low += c * lo if c > 0 else c * hi
            high += c * hi if c > 0 else c * lo
        decided = _decide(op, low, high)
        if decided is not None:
            return ("const", decided)
        # Canonical form: divide by the first coefficient's size and make it positive, so that
        # `x < 1`, `2 * x < 2` and `1 > x` are the same atom and `x >= 1` is its negation.
        first = coefs[min(coefs)]
        scale = abs(first)
        if first < 0:
            op = _FLIP[op]
        sign = 1 if first > 0 else -1
        key = repr(sorted((k, round(sign * c / scale, 12)) for k, c in coefs.items())) + repr(round(sign * const / scale, 12))
        base, negated = _BASE[op]
        formula = self.atom(f"lin:{base}:{key}")
        return ("not", formula) if negated else formula

    # --- arithmetic --------------------------------------------------------------------------

    def linear(self, node: ast.AST) -> Linear:
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - set(expr.CONSTANTS) - set(expr.FUNCTIONS)
        if not names:
            return {}, self.constant(node)
        if isinstance(node, ast.Name):
            return {node.id: 1.0}, 0.0
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            coefs, const = self.linear(node.operand)
            sign = -1.0 if isinstance(node.op, ast.USub) else 1.0
            return {k: sign * c for k, c in coefs.items()}, sign * const
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            left, right = self.linear(node.left), self.linear(node.right)
            return _minus(left, right) if isinstance(node.op, ast.Sub) else _plus(left, right)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
            left, right = self.linear(node.left), self.linear(node.right)
            if not right[0] and (isinstance(node.op, ast.Mult) or right[1] != 0):
                factor = right[1] if isinstance(node.op, ast.Mult) else 1.0 / right[1]
                return {k: c * factor for k, c in left[0].items()}, left[1] * factor
            if not left[0] and isinstance(node.op, ast.Mult):
                return {k: c * left[1] for k, c in right[0].items()}, right[1] * left[1]
        return self.opaque(node)

    def opaque(self, node: ast.AST) -> Linear:
        key = "term:" + ast.dump(node)
        self.ranges[key] = self.range_of(node)
        return {key: 1.0}, 0.0

    def range_of(self, node: ast.AST) -> Interval:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _NONNEGATIVE:
            return (0.0, math.inf)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            exponent = node.right
            if isinstance(exponent, ast.Constant) and isinstance(exponent.value, int) and exponent.value % 2 == 0:
                return (0.0, math.inf)
        return (-math.inf, math.inf)

    def constant(self, node: ast.AST) -> float:
        try:
            value = expr.Expression(text="", tree=ast.Expression(body=node)).evaluate({})
        except (expr.EvalError, TypeError, ValueError, ArithmeticError, RecursionError):
            raise _Opaque from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _Opaque  # `x < inf` is a real test: an overflowing loss is inf
        return float(value)


def _plus(a: Linear, b: Linear) -> Linear:
    coefs = dict(a[0])
    for k, c in b[0].items():
        coefs[k] = coefs.get(k, 0.0) + c
    return coefs, a[1] + b[1]


def _minus(a: Linear, b: Linear) -> Linear:
    return _plus(a, ({k: -c for k, c in b[0].items()}, -b[1]))


_FLIP = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE, ast.Eq: ast.Eq, ast.NotEq: ast.NotEq}
# D op 0 as (base relation, negated): D > 0 is not (D <= 0), D >= 0 is not (D < 0).
_BASE = {ast.Lt: ("<", False), ast.LtE: ("<=", False), ast.Gt: ("<=", True), ast.GtE: ("<", True),
         ast.Eq: ("==", False), ast.NotEq: ("==", True)}


def _decide(op: type, low: float, high: float) -> bool | None:
    """Whether `D op 0` is decided for every D in [low, high]."""
    if op is ast.Lt:
        return True if high < 0 else False if low >= 0 else None
    if op is ast.LtE:
        return True if high <= 0 else False if low > 0 else None
    if op is ast.Gt:
        return True if low > 0 else False if high <= 0 else None
    if op is ast.GtE:
        return True if low >= 0 else False if high < 0 else None
    if op is ast.Eq:
        return True if low == high == 0 else False if (low > 0 or high < 0) else None
    if op is ast.NotEq:
        return False if low == high == 0 else True if (low > 0 or high < 0) else None
    return None
