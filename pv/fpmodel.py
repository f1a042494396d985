"""A prediction as a satisfiability query over IEEE-754 doubles (z3's floating-point theory).

`pv.vacuity` asks two questions of a prediction: is there an observation that makes it false
(can it fail?) and one that makes it true (can it pass?). This module builds those queries.
z3 is imported only here, and only when the fast concrete search of pv.vacuity left a question
open: `pv validate` on a healthy repository never loads it.

The model follows pv.expr's evaluator — the code that judges a prediction at run time:

* An observation is a double, never NaN; ±inf and ±0 included. The harness judges a NaN
  observation FAIL whatever the prediction says (pv.harness), so "it fails only when an
  observation is NaN" is no ability to fail. A boolean observation is the double 0 or 1 (Python
  computes with True as 1); an integer is the double it becomes (observations are measurements).
* Each sub-expression has a value and a *defined* condition: where Python raises (division by
  zero, ln of a negative number, an overflowing exp or power, a complex power), pv.expr
  reports an error and the falsifier is an ERROR, neither a pass nor a FAIL. A prediction *can
  fail* when some observation makes it defined and false; it *can pass* when some observation
  makes it defined and true. Comparison chains stop at the first false link, as Python's do;
  `and`/`or` evaluate every operand (pv.expr builds a list first), so any operand's error is
  the whole prediction's error.
* Exact where IEEE defines the operation and Python performs it: + - * / (round to nearest
  even; a float overflow is inf, no error), sqrt (correctly rounded; -0 gives -0; below zero an
  error), abs, unary minus, comparisons (NaN compares false, +0 == -0), min/max as Python's
  builtins (the first operand wins unless a later one is strictly smaller/larger), the truth of
  a number (NaN is true, ±0 false).
* Over-approximated where libm is not specified bit for bit (ln, log2, log10, exp, **, %): an
  uninterpreted function (the same input gives the same output, nothing else assumed) plus
  only facts that hold for any faithfully rounded implementation — ln(1) = 0, ln of a number
  above 1 is positive, below 1 negative, exp(x) >= 1 for x >= 0, x ** 0 == 1 for every x,
  1 ** y == 1, an even integer power is >= 0, NaN in gives NaN out, and where Python raises.
  Over-approximation gives the solver *more* possible results than the machine has, so an
  unsatisfiable query (no failing observation) is a proof; a satisfying one is only a
  candidate, which pv.vacuity replays through pv.expr itself before believing it.
"""

from __future__ import annotations

import ast
import contextlib
import math
import struct
from typing import Any, Iterator

import z3

from pv import expr

DOUBLE = z3.Float64()
RNE = z3.RNE()


def fp_const(value: float) -> z3.FPRef:
    """The double `value` exactly (bits, not decimal text: -0.0, inf and subnormals survive)."""
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    return z3.fpBVToFP(z3.BitVecVal(bits, 64), DOUBLE)


def fp_value(model: z3.ModelRef, term: z3.FPRef) -> float:
    bits = model.eval(z3.fpToIEEEBV(term), model_completion=True).as_long()
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


ZERO, ONE = fp_const(0.0), fp_const(1.0)
INF = fp_const(math.inf)


@contextlib.contextmanager
def fresh_context() -> Iterator[None]:
    """Build and solve one decision's terms in a z3 context of its own.

    z3's step counter (the unit of Budget) depends on what the context already holds: the same
    query spent 1.95M units in a fresh process and 2.27M after other predictions had been decided,
    so in a shared context a verdict near the budget would depend on which contracts were judged
    before it in the process (test order, file order, the replay cache). A fresh context makes the
    units, and so every verdict, a function of the prediction alone. Not thread-safe: z3's default
    context and this module's constants are swapped for the duration (pv decides in one thread)."""
    global DOUBLE, RNE, ZERO, ONE, INF
    core = z3.z3  # the module that holds z3's default context, used by every constructor here
    saved = (core._main_ctx, DOUBLE, RNE, ZERO, ONE, INF)
    core._main_ctx = z3.Context()
    try:
        DOUBLE, RNE = z3.Float64(), z3.RNE()
        ZERO, ONE, INF = fp_const(0.0), fp_const(1.0), fp_const(math.inf)
        yield
    finally:
        core._main_ctx, DOUBLE, RNE, ZERO, ONE, INF = saved


class Query:
    """The prediction's truth and definedness as z3 terms over one variable per observation."""

    def __init__(self, parsed: expr.Expression):
        self.facts: list[z3.BoolRef] = []
        self.variables: dict[str, z3.FPRef] = {}
        self._functions: dict[str, z3.FuncDeclRef] = {}
        self._fresh = 0
        body = parsed.tree.body
        value, defined = self.term(body)
        truth = self.truthy(value)
        if isinstance(body, ast.Name):  # judge() wants a boolean here: only a boolean observation passes
            var = self.variables[body.id]
            defined = z3.And(defined, z3.Or(z3.fpEQ(var, ZERO), z3.fpEQ(var, ONE)))
        self.holds = z3.And(defined, truth)
        self.fails = z3.And(defined, z3.Not(truth))

    # --- helpers ---------------------------------------------------------------------------------

    def variable(self, name: str) -> z3.FPRef:
        if name not in self.variables:
            var = z3.FP(f"obs_{name}", DOUBLE)
            self.variables[name] = var
            self.facts.append(z3.Not(z3.fpIsNaN(var)))
        return self.variables[name]

    def fresh(self, what: str) -> z3.FPRef:
        self._fresh += 1
        return z3.FP(f"{what}_{self._fresh}", DOUBLE)

    def function(self, name: str, arity: int, result: Any = None) -> z3.FuncDeclRef:
        key = f"{name}/{arity}"
        if key not in self._functions:
            self._functions[key] = z3.Function(f"f_{name}_{arity}", *([DOUBLE] * arity), DOUBLE if result is None else result)
        return self._functions[key]

    @staticmethod
    def as_fp(value: Any) -> z3.FPRef:
        return z3.If(value, ONE, ZERO) if z3.is_bool(value) else value

    @staticmethod
    def truthy(value: Any) -> z3.BoolRef:
        return value if z3.is_bool(value) else z3.Not(z3.fpIsZero(value))

    # --- translation -------------------------------------------------------------------------------

    def term(self, node: ast.AST) -> tuple[Any, z3.BoolRef]:
        """(value, defined): value is a z3 Bool for true/false results, a double otherwise."""
        if not any(isinstance(n, ast.Name) and n.id not in expr.CONSTANTS for n in ast.walk(node)):
            return self.constant(node)
        if isinstance(node, ast.Name):
            return self.variable(node.id), z3.BoolVal(True)
        if isinstance(node, ast.UnaryOp):
            value, defined = self.term(node.operand)
            if isinstance(node.op, ast.Not):
                return z3.Not(self.truthy(value)), defined
            value = self.as_fp(value)
            return (z3.fpNeg(value) if isinstance(node.op, ast.USub) else value), defined
        if isinstance(node, ast.BoolOp):
            parts = [self.term(v) for v in node.values]
            truths = [self.truthy(v) for v, _ in parts]
            combined = z3.And(*truths) if isinstance(node.op, ast.And) else z3.Or(*truths)
            return combined, z3.And(*[d for _, d in parts])
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.BinOp):
            return self.binary(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        raise ValueError(f"not in the expression language: {type(node).__name__}")  # parse() refused it

    def constant(self, node: ast.AST) -> tuple[Any, z3.BoolRef]:
        """A part without observations is computed by pv.expr itself, exactly as at run time."""
        try:
            value = expr.Expression(text="", tree=ast.Expression(body=node)).evaluate({})
        except (expr.EvalError, TypeError, ValueError, ArithmeticError):
            return ZERO, z3.BoolVal(False)  # raises whenever it is evaluated
        if isinstance(value, bool):
            return z3.BoolVal(value), z3.BoolVal(True)
        as_float = float(value) if isinstance(value, float) else None
        if isinstance(value, int):
            try:
                as_float = float(value) if int(float(value)) == value else None
            except OverflowError:
                as_float = None
        if as_float is None:
            # An integer no double equals: Python compares it exactly and rounds it (or raises)
            # in arithmetic. An unconstrained number covers every behaviour it can have.
            return self.fresh("integer"), z3.Bool(f"integer_ok_{self._fresh}")
        return fp_const(as_float), z3.BoolVal(True)

    def compare(self, node: ast.Compare) -> tuple[Any, z3.BoolRef]:
        left, defined = self.term(node.left)
        links: list[z3.BoolRef] = []
        conditions: list[tuple[z3.BoolRef, z3.BoolRef]] = []  # (links so far hold, this operand defined)
        for op, comparator in zip(node.ops, node.comparators):
            right, right_defined = self.term(comparator)
            conditions.append((z3.And(*links) if links else z3.BoolVal(True), right_defined))
            links.append(_COMPARE[type(op)](self.as_fp(left), self.as_fp(right)))
            left = right
        # A later operand is only evaluated when every earlier link held (Python's chain).
        defined = z3.And(defined, *[z3.Implies(reached, ok) for reached, ok in conditions])
        return z3.And(*links), defined

    def binary(self, node: ast.BinOp) -> tuple[Any, z3.BoolRef]:
        (a, da), (b, db) = self.term(node.left), self.term(node.right)
        a, b = self.as_fp(a), self.as_fp(b)
        defined = z3.And(da, db)
        op = type(node.op)
        if op is ast.Add:
            return z3.fpAdd(RNE, a, b), defined
        if op is ast.Sub:
            return z3.fpSub(RNE, a, b), defined
        if op is ast.Mult:
            return z3.fpMul(RNE, a, b), defined
        if op is ast.Div:
            return z3.fpDiv(RNE, a, b), z3.And(defined, z3.Not(z3.fpIsZero(b)))
        if op is ast.Mod:
            return self.function("mod", 2)(a, b), z3.And(defined, z3.Not(z3.fpIsZero(b)))  # ZeroDivisionError
        return self.power(node, a, b, defined)

    def power(self, node: ast.BinOp, a: z3.FPRef, b: z3.FPRef, defined: z3.BoolRef) -> tuple[Any, z3.BoolRef]:
        result = self.function("pow", 2)(a, b)
        ok = self.function("pow_ok", 2, z3.BoolSort())(a, b)
        integral = z3.fpEQ(z3.fpRoundToIntegral(RNE, b), b)
        self.facts += [
            z3.Implies(z3.fpIsZero(b), z3.And(ok, z3.fpEQ(result, ONE))),       # x ** 0 == 1, even NaN ** 0
            z3.Implies(z3.fpEQ(a, ONE), z3.And(ok, z3.fpEQ(result, ONE))),      # 1 ** y == 1, even 1 ** NaN
            # ZeroDivisionError (0 ** -inf is inf: float_pow tests an infinite exponent first)
            z3.Implies(z3.And(z3.fpIsZero(a), z3.fpLT(b, ZERO), z3.Not(z3.fpIsInf(b))), z3.Not(ok)),
            # a complex result (-inf ** 0.5 is inf: an infinite base is tested first)
            z3.Implies(z3.And(z3.fpLT(a, ZERO), z3.Not(z3.fpIsInf(a)), z3.fpIsNormal(b), z3.Not(integral)),
                       z3.Not(ok)),
            z3.Implies(z3.fpEQ(b, ONE), z3.Or(z3.Not(ok), result == a)),       # exact: x ** 1 == x
            z3.Implies(z3.And(ok, z3.Not(z3.fpIsNaN(a)), z3.Not(z3.fpIsNaN(b))), z3.Not(z3.fpIsNaN(result))),
        ]
        exponent = _literal(node.right)
        if exponent is not None and math.isfinite(exponent) and exponent % 2 == 0:
            self.facts.append(z3.Implies(z3.Not(z3.fpIsNaN(a)), z3.fpGEQ(result, ZERO)))  # even powers
        return result, z3.And(defined, ok)

    def call(self, node: ast.Call) -> tuple[Any, z3.BoolRef]:
        name = node.func.id  # type: ignore[attr-defined]
        parts = [self.term(a) for a in node.args]
        values = [self.as_fp(v) for v, _ in parts]
        defined = z3.And(*[d for _, d in parts])
        if name in ("min", "max"):
            current = values[0]
            better = z3.fpLT if name == "min" else z3.fpGT
            for item in values[1:]:  # builtins.min: a later item replaces the current only if strictly better
                current = z3.If(better(item, current), item, current)
            return current, defined
        (a,) = values
        if name == "abs":
            return z3.fpAbs(a), defined
        if name == "sqrt":  # correctly rounded (IEEE); sqrt(-0.0) is -0.0; below zero math raises
            return z3.fpSqrt(RNE, a), z3.And(defined, z3.Not(z3.fpLT(a, ZERO)))
        result = self.function(name, 1)(a)
        nan_in = z3.fpIsNaN(a)
        if name == "exp":
            ok = self.function("exp_ok", 1, z3.BoolSort())(a)
            self.facts += [
                z3.Implies(z3.fpLEQ(a, fp_const(709.0)), ok),
                z3.Implies(z3.And(z3.fpGEQ(a, fp_const(710.0)), z3.Not(z3.fpIsInf(a))), z3.Not(ok)),  # OverflowError
                z3.Implies(nan_in, z3.fpIsNaN(result)),
                z3.Implies(z3.Not(nan_in), z3.And(z3.Not(z3.fpIsNaN(result)), z3.fpGEQ(result, ZERO))),
                z3.Implies(z3.fpGEQ(a, ZERO), z3.fpGEQ(result, ONE)),
                z3.Implies(z3.fpLEQ(a, ZERO), z3.fpLEQ(result, ONE)),
                z3.Implies(z3.fpEQ(a, INF), z3.fpEQ(result, INF)),
                z3.Implies(z3.fpEQ(a, -INF), z3.fpIsZero(result)),
                z3.Implies(z3.And(ok, z3.Not(z3.fpIsInf(a)), z3.Not(nan_in)), z3.Not(z3.fpIsInf(result))),
            ]
            return result, z3.And(defined, ok)
        # ln, log, log2, log10: math raises for x <= 0 (-0.0 and -inf included); log(inf) = inf.
        self.facts += [
            z3.Implies(nan_in, z3.fpIsNaN(result)),
            z3.Implies(z3.fpEQ(a, ONE), z3.fpIsZero(result)),
            z3.Implies(z3.fpGT(a, ONE), z3.fpGT(result, ZERO)),
            z3.Implies(z3.And(z3.fpGT(a, ZERO), z3.fpLT(a, ONE)), z3.fpLT(result, ZERO)),
            z3.Implies(z3.fpEQ(a, INF), z3.fpEQ(result, INF)),
            z3.Implies(z3.And(z3.fpGT(a, ZERO), z3.Not(z3.fpIsInf(a))),
                       z3.And(z3.Not(z3.fpIsInf(result)), z3.Not(z3.fpIsNaN(result)))),
        ]
        return result, z3.And(defined, z3.Not(z3.fpLEQ(a, ZERO)))


_COMPARE = {
    ast.Lt: z3.fpLT, ast.LtE: z3.fpLEQ, ast.Gt: z3.fpGT, ast.GtE: z3.fpGEQ, ast.Eq: z3.fpEQ,
    ast.NotEq: lambda a, b: z3.Not(z3.fpEQ(a, b)),
}


def _literal(node: ast.AST) -> float | None:
    """The value of a constant exponent (`2`, `-2`, `2.0`), else None."""
    if any(isinstance(n, ast.Name) and n.id not in expr.CONSTANTS for n in ast.walk(node)):
        return None
    try:
        value = expr.Expression(text="", tree=ast.Expression(body=node)).evaluate({})
    except (expr.EvalError, TypeError, ValueError, ArithmeticError):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


class Budget:
    """The z3 resource units one prediction may spend, shared by every solver call made for it.

    z3's `rlimit` counts the solver's own steps, not seconds: the same query spends the same
    units on any machine, so a verdict never depends on how fast or busy the machine is. A
    limit per call let one prediction make up to nine calls of a full limit each; one budget
    per prediction bounds its whole cost. Each call is granted what is left and charged what
    it spent (z3's own counter); once nothing is left no call is made, and the question is
    open (unknown), never answered."""

    def __init__(self, units: int):
        self.units = units
        self.spent = 0
        self.calls = 0

    @property
    def left(self) -> int:
        return max(0, self.units - self.spent)

    def check(self, solver: z3.Solver) -> z3.CheckSatResult | None:
        """The solver's answer within what is left, or None (no call) when the budget is spent."""
        grant = self.left
        if grant <= 0:
            return None  # z3 reads an rlimit of 0 as no limit at all: never granted
        solver.set("rlimit", grant)
        before = _units_counted(solver)
        result = solver.check()
        after = _units_counted(solver)
        # z3 may overshoot its limit by a few units; a counter it does not report costs the whole grant
        self.spent += grant if before is None or after is None else after - before
        self.calls += 1
        return result


def _units_counted(solver: z3.Solver) -> int | None:
    """z3's running count of resource units (it counts for the whole context, every solver)."""
    stats = solver.statistics()
    return int(stats.get_key_value("rlimit count")) if "rlimit count" in stats.keys() else None


class Search:
    """Observations that make `goal` true, one candidate at a time; a refuted candidate is
    blocked and the solver asked again. Every call spends from `budget` (z3 resource units,
    not a wall-clock timeout), so the answer does not depend on how busy the machine is."""

    def __init__(self, query: Query, goal: z3.BoolRef, budget: Budget):
        self.query = query
        self.budget = budget
        self.solver = z3.Solver()
        self.solver.add(*query.facts, goal)

    def next(self) -> tuple[str, dict[str, float]]:
        """('sat', observations) | ('unsat', {}) | ('unknown', {}): unknown also when the budget is spent."""
        result = self.budget.check(self.solver)
        if result is None:
            return "unknown", {}
        if result == z3.unsat:
            return "unsat", {}
        if result != z3.sat:
            return "unknown", {}
        model = self.solver.model()
        return "sat", {name: fp_value(model, var) for name, var in self.query.variables.items()}

    def block(self, observations: dict[str, float]) -> None:
        self.solver.add(z3.Or([z3.Not(self.query.variables[n] == fp_const(v)) for n, v in observations.items()]))
