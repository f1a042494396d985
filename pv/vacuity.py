"""Predictions that cannot fail (or cannot pass), decided before any check runs (PV405).

A falsifier whose prediction holds whatever the check observes proves nothing, and one that
can never hold is always red. `decide(text)` answers two questions about a prediction over
every possible observation — every double, ±inf and ±0 included (pv.fpmodel says why NaN is
not one of them and how integers and booleans are read):

* can it fail? — is there an observation for which pv.expr judges it false;
* can it pass? — is there one for which it is judged true.

Two steps, each sound on its own:

1. **Witnesses, concretely.** A few dozen observation sets (special doubles — 0, -0, ±1, tiny,
   huge, ±inf — the prediction's own numbers and their neighbours, and a repair step that
   satisfies `name <op> bound` links) are judged by pv.expr itself, the evaluator the harness
   uses. A failing and a passing set found there settle both questions with proof, and z3 is
   never imported: this is how every honest prediction of a repository is decided, fast.
2. **A solver, for the rest.** The question still open goes to z3's floating-point theory
   (pv.fpmodel). Unsatisfiable — no observation can make it false (true) — is a proof: the
   prediction is refused as a tautology (contradiction). A satisfying observation is replayed
   through pv.expr before it counts (the model over-approximates ln, exp, ** and %); a
   replay that disagrees is blocked and the solver asked again, at most MAX_CANDIDATES times.

The solver's effort is one budget per prediction, SOLVER_BUDGET z3 resource units (a
deterministic count of the solver's steps, not a clock), shared by every call made for it:
"can it fail?", "can it pass?", each replayed candidate and the "can it be evaluated at all?"
that words a refusal. Each call gets what is left. What neither step settles within it is
**undecided**: never a silent accept and never a refusal — `pv validate` reports it as a
warning (PV407) naming the question it could not answer, and the harness runs the falsifier.
Decisions are cached in memory by the prediction's normalized text.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import math
import random
import zlib
from dataclasses import dataclass
from typing import Any, Union

from pv import expr

CONCRETE_BUDGET = 64     # observation sets judged before the solver is asked
MAX_CANDIDATES = 4       # solver candidates replayed per question before giving up
SOLVER_BUDGET = 3_000_000  # z3 resource units per prediction, all its solver calls together (see docs/internals.md)

SPECIALS: tuple[float, ...] = (0.0, 1.0, -1.0, 0.5, 2.0, -2.0, 10.0, 1e-3, 1e300, -1e300, math.inf,
                               -math.inf, 1e-300, -0.0, 3.0, 100.0, 1e6, -0.5, 5e-324, 1.7976931348623157e308)

TAUTOLOGY = ("it holds for every value of the observations (a tautology, e.g. `x == x`, `a <= a`, "
             "`... or true`, `x <= inf`); compare an observation with an independent bound")
CONTRADICTION = "it is false for every value of the observations (a contradiction), so it can never pass"
NEVER_DEFINED = "it cannot be evaluated for any observation (every value raises an error), so it can never pass"
NEVER_FALSE = ("no observation makes it false: it holds, or raises an error, for every value of the "
               "observations; compare an observation with an independent bound")
NO_OBSERVATION = "it mentions no observation, so no measurement can make it false"


@dataclass(frozen=True)
class Decision:
    """`refused`: the reason it cannot fail (or cannot pass), or None. `undecided`: the question
    the analysis could not answer ("can it fail?" / "can it pass?"), or None.
    `fails_at` / `passes_at`: observations that prove it can (None where not found).
    `solver_calls` / `solver_units`: the z3 calls made and the resource units they spent."""

    refused: str | None = None
    undecided: str | None = None
    fails_at: dict[str, Any] | None = None
    passes_at: dict[str, Any] | None = None
    solver_calls: int = 0
    solver_units: int = 0


def cannot_fail(prediction: Union[str, "expr.Expression"]) -> str | None:
    """Why `prediction` can never be falsified (or never hold), or None when it can go either
    way or the question is undecided. Text that does not parse gives None: the parser reports it."""
    return decide(prediction).refused


def decide(prediction: Union[str, "expr.Expression"]) -> Decision:
    try:
        parsed = prediction if isinstance(prediction, expr.Expression) else expr.parse(prediction)
    except expr.ExprError:
        return Decision()
    if not expr.is_boolean(parsed):
        return Decision()  # not a prediction at all: PV402, and an error at run time
    return _decide_text(parsed.text)


@functools.lru_cache(maxsize=4096)  # keyed by the parser's normalized text
def _decide_text(text: str) -> Decision:
    return _decide_parsed(expr.parse(text))


def _decide_parsed(parsed: expr.Expression) -> Decision:
    if not parsed.names:
        return Decision(refused=NO_OBSERVATION)
    fails_at, passes_at = concrete_witnesses(parsed)
    if fails_at is not None and passes_at is not None:
        return Decision(fails_at=fails_at, passes_at=passes_at)
    from pv import fpmodel  # z3: only for what the concrete search left open

    budget = fpmodel.Budget(SOLVER_BUDGET)
    with fpmodel.fresh_context():  # the units spent depend on the prediction alone, not on what ran before
        decision = _solve(parsed, fpmodel.Query(parsed), budget, fails_at, passes_at)
    return dataclasses.replace(decision, solver_calls=budget.calls, solver_units=budget.spent)


def _solve(parsed: expr.Expression, query: Any, budget: Any, fails_at: dict[str, Any] | None,
           passes_at: dict[str, Any] | None) -> Decision:
    """The questions the concrete search left open, asked of the solver within one budget."""
    if fails_at is None:
        answer, fails_at = _ask(parsed, query, budget, want=False)
        if answer == "no":
            return Decision(refused=TAUTOLOGY if passes_at is not None else _unfailing_reason(query, budget))
        if answer == "unknown":
            return Decision(undecided="can it fail?", passes_at=passes_at)
    if passes_at is None:
        answer, passes_at = _ask(parsed, query, budget, want=True)
        if answer == "no":
            return Decision(refused=CONTRADICTION)  # it can fail (fails_at is known by now): it evaluates
        if answer == "unknown":
            return Decision(undecided="can it pass?", fails_at=fails_at)
    return Decision(fails_at=fails_at, passes_at=passes_at)


def _ask(parsed: expr.Expression, query: Any, budget: Any, want: bool) -> tuple[str, dict[str, Any] | None]:
    """('yes', observations) | ('no', None) | ('unknown', None): can the prediction be judged `want`?
    Unknown when the budget runs out first: an open question, never a yes or a no."""
    from pv import fpmodel

    search = fpmodel.Search(query, query.holds if want else query.fails, budget)
    for _ in range(MAX_CANDIDATES):
        status, candidate = search.next()
        if status == "unsat":
            return "no", None
        if status == "unknown":
            return "unknown", None
        confirmed = replay(parsed, candidate, want)
        if confirmed is not None:
            return "yes", confirmed
        search.block(candidate)  # an artefact of the over-approximation: ask for another
    return "unknown", None


def _evaluable(query: Any, budget: Any) -> str:
    """'sat' | 'unsat' | 'unknown': can some observation be evaluated without an error?"""
    import z3

    from pv import fpmodel

    return fpmodel.Search(query, z3.Or(query.holds, query.fails), budget).next()[0]


def _unfailing_reason(query: Any, budget: Any) -> str:
    """Why a prediction no observation makes false is refused; with the budget spent the
    refusal stands (that is proven) and only its wording is the cautious one, NEVER_FALSE."""
    evaluable = _evaluable(query, budget)
    return TAUTOLOGY if evaluable == "sat" else NEVER_DEFINED if evaluable == "unsat" else NEVER_FALSE


# --- the concrete search ---------------------------------------------------------------------------


def outcome(parsed: expr.Expression, observations: dict[str, Any]) -> bool | None:
    """The verdict pv.expr gives these observations: True (holds), False, None (an error).

    `expr.judge(parsed, observations).holds`, without the Judgement: the same evaluation, the
    same NaN rule and the same margin computed (where it raises, so did judge), in judge's order
    (tests/test_vacuity.py compares the two)."""
    try:
        evaluator = expr._Evaluator(observations)
        body = parsed.tree.body
        holds = evaluator.value(body)
        if not isinstance(holds, bool):
            return None  # judge: "gives ..., not true/false"
        for name in parsed.names:  # judge's `observed`, in its order: a NaN measurement never holds
            if name in observations:
                value = expr._number(name, observations[name])
                if isinstance(value, float) and math.isnan(value):
                    return False
        evaluator.margin(body)
        return holds
    except (expr.ExprError, expr.EvalError, TypeError, ArithmeticError, ValueError, RecursionError):
        return None


def replay(parsed: expr.Expression, observations: dict[str, float], want: bool) -> dict[str, Any] | None:
    """The observations (with 0/1 read as booleans where that is what makes them judgeable)
    if pv.expr judges the prediction `want` on them, else None."""
    as_bools = {k: bool(v) if v in (0.0, 1.0) else v for k, v in observations.items()}
    for candidate in (observations, as_bools):
        if outcome(parsed, candidate) is want:
            return dict(candidate)
    return None


def concrete_witnesses(parsed: expr.Expression) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(observations judged false, observations judged true), each None if not found."""
    names = sorted(parsed.names)
    pool: list[float] = []  # built when the specials run out (most predictions are settled by them)
    rng: random.Random | None = None  # seeded then too: the same draws, and most predictions need none
    found: dict[bool, dict[str, Any] | None] = {False: None, True: None}

    # Only a bare name at the top level must be a boolean observation (judge() wants true/false
    # there); everywhere else Python reads 0.0/1.0 exactly as False/True.
    body = parsed.tree.body
    boolean_names = {body.id} if isinstance(body, ast.Name) else set()

    def judge(env: dict[str, Any]) -> bool:
        variants = [env]
        if boolean_names:  # a name read as true/false may need to be a boolean observation
            variants.append({k: bool(v) if k in boolean_names and v in (0.0, 1.0) else v for k, v in env.items()})
        for candidate in variants:
            verdict = outcome(parsed, candidate)
            if verdict is not None and found[verdict] is None:
                found[verdict] = dict(candidate)
        return found[False] is not None and found[True] is not None

    links = _bound_links(parsed.tree.body)
    for i in range(CONCRETE_BUDGET):
        if i < len(SPECIALS):
            env = {n: SPECIALS[i] for n in names}
        else:
            pool = pool or _value_pool(parsed)
            rng = rng or random.Random(zlib.crc32(parsed.text.encode()))
            env = {n: rng.choice(pool) for n in names}
        if judge(env):
            break
        if links:
            repaired = _repair(env, links)
            # the same observations judged again would find nothing new (no bound could be evaluated)
            if not _same(repaired, env) and judge(repaired):
                break
    return found[False], found[True]


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two observation sets are the same values: equal floats of the same sign (0.0 and
    -0.0 are judged apart), or the very same objects. A NaN is never the same as anything."""
    if a.keys() != b.keys():
        return False
    for key, x in a.items():
        y = b[key]
        if x is y:
            continue
        if not (type(x) is float and type(y) is float and x == y and math.copysign(1.0, x) == math.copysign(1.0, y)):
            return False
    return True


def _value_pool(parsed: expr.Expression) -> list[float]:
    pool = list(SPECIALS)
    for node in ast.walk(parsed.tree):
        if isinstance(node, ast.Constant):  # parse() admits numbers only
            try:
                c = float(node.value)
            except OverflowError:
                continue
            pool += [c, -c, c + 1, c - 1, 2 * c, c / 2, math.nextafter(c, math.inf), math.nextafter(c, -math.inf)]
    return pool


def _bound_links(body: ast.AST) -> list[tuple[str, type, ast.AST]]:
    """`name <op> bound` links of the prediction's top-level conjunction (either side)."""
    out: list[tuple[str, type, ast.AST]] = []
    stack = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            stack.extend(node.values)
        elif isinstance(node, ast.Compare):
            left = node.left
            for op, right in zip(node.ops, node.comparators):
                if isinstance(left, ast.Name) and left.id not in expr.CONSTANTS:
                    out.append((left.id, type(op), right))
                if isinstance(right, ast.Name) and right.id not in expr.CONSTANTS:
                    out.append((right.id, _MIRROR[type(op)], left))
                left = right
    return out


_MIRROR = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE, ast.Eq: ast.Eq, ast.NotEq: ast.NotEq}


def _repair(env: dict[str, Any], links: list[tuple[str, type, ast.AST]]) -> dict[str, Any]:
    """Move each `name <op> bound` toward holding, twice over (a heuristic: its result is judged)."""
    env = dict(env)
    for _ in range(2):
        for name, op, bound_node in links:
            try:  # what expr.Expression(..., tree=ast.Expression(body=bound_node)).evaluate(env) computes
                bound = float(expr._Evaluator(env).value(bound_node))
            except (expr.EvalError, TypeError, ValueError, ArithmeticError, RecursionError):
                continue
            if not math.isfinite(bound):
                continue
            step = max(1.0, abs(bound)) * 0.5
            env[name] = {ast.Lt: bound - step, ast.Gt: bound + step, ast.NotEq: bound + step}.get(op, bound)
    return env
