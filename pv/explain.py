"""Why a prediction is false: its clauses, each evaluated, and the ones that broke it.

A prediction such as `max_error < 1e-6 and finite and steps >= 10` is a tree of and/or over
**clauses** (the leaves: a comparison, a boolean observation, a `not ...`). `clauses()` lists
every leaf with its evaluated operands, whether it held, and its own margin (numeric clauses) or
held/broken (boolean ones). The **culprits** are the leaves that make the whole false: every
false leaf under a false `and`, every leaf under a false `or` (all of them are false there), and
nothing under a part that held. A failure message names the culprits first, so a prediction
whose numeric bounds all hold but whose boolean flag is false says so.

The margin of a mixed prediction is that of its numeric clauses (pv.expr: a boolean clause has
no distance; `and` takes the worst numeric clause); the boolean clauses are shown beside it as
held or broken.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Mapping

from pv import expr


@dataclass(frozen=True)
class Clause:
    text: str  # the clause as written, e.g. `val_loss < 0.7 * ln(vocab_size)`
    holds: bool | None  # None: it could not be evaluated on these observations
    evaluated: str  # its operands evaluated, e.g. `18.55 < 4.852`, or `flag=False`
    margin: float | None  # numeric clauses only
    culprit: bool = False  # one of the clauses that make the prediction false

    @property
    def numeric(self) -> bool:
        return self.margin is not None

    def state(self) -> str:
        if self.holds is None:
            return "not evaluated"
        if self.numeric:
            return f"{'held' if self.holds else 'FALSE'} (margin {_fmt(self.margin)})"
        return "held" if self.holds else "BROKEN"


def _fmt(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 1000:
        value = expr.to_float(value)  # 10**5000 cannot even be printed (Python's 4,300-digit cap)
    if isinstance(value, float):
        return f"{value:.6g}"
    return repr(value) if isinstance(value, str) else str(value)


def _sub(node: ast.AST) -> expr.Expression:
    return expr.Expression(text=ast.unparse(node), tree=ast.Expression(body=node))


def _value(node: ast.AST, env: dict[str, Any]) -> Any:
    try:
        return _sub(node).evaluate(env)
    except (expr.EvalError, TypeError, ValueError, ArithmeticError):
        return None


def _leaf(node: ast.AST, env: dict[str, Any]) -> Clause:
    held = _value(node, env)
    holds = held if isinstance(held, bool) else None
    margin = None
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        values = [_value(o, env) for o in operands]
        symbols = [expr._SYMBOL[type(op)] for op in node.ops]  # noqa: SLF001 - same package
        shown = ["?" if v is None else _fmt(v) for v in values]
        evaluated = shown[0] + "".join(f" {s} {v}" for s, v in zip(symbols, shown[1:]))
        try:
            margin = expr._Evaluator(env).margin(node)  # noqa: SLF001 - same package
        except (expr.EvalError, TypeError, ValueError, ArithmeticError):
            margin = None
    else:
        names = sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id not in expr.CONSTANTS})
        evaluated = ", ".join(f"{n}={_fmt(env[n]) if n in env else '?'}" for n in names) or _fmt(held)
    return Clause(text=ast.unparse(node), holds=holds, evaluated=evaluated, margin=margin)


def _walk(node: ast.AST, env: dict[str, Any], out: list[Clause], blame: bool) -> None:
    """Append the leaves under `node`; `blame`: this part is false and decides the verdict."""
    if isinstance(node, ast.BoolOp):
        is_and = isinstance(node.op, ast.And)
        for child in node.values:
            # under a false `and`, only the false children are to blame; under a false `or`, all
            child_false = _value(child, env) is False
            _walk(child, env, out, blame and (child_false if is_and else True))
        return
    leaf = _leaf(node, env)
    out.append(Clause(leaf.text, leaf.holds, leaf.evaluated, leaf.margin, culprit=blame and leaf.holds is False))


def clauses(prediction: str, observations: Mapping[str, Any]) -> list[Clause]:
    """Every clause of the prediction, left to right, evaluated on the observations (culprits
    marked when the prediction is false). Empty when the prediction does not parse."""
    try:
        parsed = expr.parse(prediction)
    except expr.ExprError:
        return []
    env = dict(observations)
    out: list[Clause] = []
    _walk(parsed.tree.body, env, out, blame=_value(parsed.tree.body, env) is False)
    return out


def failure_lines(prediction: str, observations: Mapping[str, Any], margin: float | None) -> list[str]:
    """The lines of a FAIL message after `observed:`: the culprits (`because:`), every clause
    (`bound:`), and the margin with the boolean clauses' states."""
    found = clauses(prediction, observations)
    lines = [f"  because:  `{c.text}` is false: {c.evaluated}" for c in found if c.culprit]
    lines += [f"  bound:    {c.text}  ->  {c.evaluated}  {c.state()}" for c in found]
    booleans = [c for c in found if not c.numeric and c.holds is not None]
    shown = "n/a (no numeric clause)" if margin is None else _fmt(margin)
    note = "worst numeric clause; negative = how far past the bound" if margin is not None else ""
    if booleans:
        states = ", ".join(f"{c.text} {'held' if c.holds else 'broken'}" for c in booleans)
        note = f"{note}; " if note else ""
        note += f"boolean clauses: {states}"
    lines.append(f"  margin:   {shown}" + (f" ({note})" if note else ""))
    return lines


def explanation(prediction: str, observations: Mapping[str, Any]) -> str:
    """One line naming the clauses that make the prediction false ('' when it holds)."""
    culprits = [c for c in clauses(prediction, observations) if c.culprit]
    return "; ".join(f"`{c.text}` is false: {c.evaluated}" for c in culprits)
