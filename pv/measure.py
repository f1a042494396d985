"""`pv measure`: a falsifier's check swept over N seeds, the way a bound is meant to be chosen.

A bound that holds at the one seed a contract runs may be seed-lucky: the minimum over ten
seeds breaks it. `sweep()` calls the falsifier's check once per seed, on one device (and one
subject), exactly as a generated test does (pv.harness.falsify: the same params, tolerance and
subject; nothing is recorded), and judges the prediction at each seed. `Sweep` then says, per
numeric observation, min / max / mean over the seeds; which seed is the worst (the smallest
margin; a FAIL before any PASS when the prediction has no numeric clause) and the margin and
explanation there; and, per simple bound (`obs < c`, `obs <= c`, `obs > c`, `obs >= c`), the
worst value seen and a suggested bound with headroom.

How the seed reaches the check:
- a check with a `seed` parameter (or a falsifier whose `params:` has `seed`) gets
  `seed=<s>` in place of the contract's value;
- any other check can read it with `pv.testing.sweep_seed()` (the `PV_SEED` environment
  variable, which this module sets for each call; default 0 outside a sweep). Python's `random`
  is seeded with it too. A check that uses neither sees the same inputs at every seed:
  `Sweep.seed_reached` is then False and pv measure says so.
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import os
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from pv import explain, expr, harness

SEED_ENV = "PV_SEED"


class MeasureError(Exception):
    """The sweep cannot be made (the check raised, returned no observations, ...): exit 1."""


@dataclass
class SeedResult:
    seed: int
    verdict: str  # PASS | FAIL
    observations: dict[str, Any]
    margin: float | None
    explanation: str = ""


@dataclass
class BoundSuggestion:
    clause: str  # as written, e.g. `max_error < 1e-6`
    observation: str
    direction: str  # "upper" (obs < c) or "lower" (obs > c)
    bound: float  # the contract's c
    worst: float  # the worst value seen over the seeds
    worst_seed: int
    suggested: float  # worst with headroom
    symbol: str = "<"  # the clause's comparison, observation first (`<=` for `obs <= c`)

    @property
    def holds(self) -> bool:
        return self.worst < self.bound if self.direction == "upper" else self.worst > self.bound


@dataclass
class Sweep:
    falsifier: str
    device: str
    subject: str | None
    prediction: str
    mechanism: str  # how the seed reached the check
    results: list[SeedResult] = field(default_factory=list)
    headroom: float = 2.0

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.results]

    @property
    def failing_seeds(self) -> list[int]:
        return [r.seed for r in self.results if r.verdict != "PASS"]

    def stats(self) -> dict[str, dict[str, float]]:
        """Per numeric observation: min, max, mean over the seeds."""
        values: dict[str, list[float]] = {}
        for r in self.results:
            for name, value in r.observations.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value)):
                    values.setdefault(name, []).append(float(value))
        return {name: {"min": min(v), "max": max(v), "mean": sum(v) / len(v), "n": len(v)}
                for name, v in sorted(values.items())}

    @property
    def worst(self) -> SeedResult:
        """The seed closest to (or furthest past) the bound."""
        failing = [r for r in self.results if r.verdict != "PASS"]
        with_margin = [r for r in (failing or self.results) if r.margin is not None]
        if with_margin:
            return min(with_margin, key=lambda r: r.margin)  # type: ignore[arg-type,return-value]
        return (failing or self.results)[0]

    @property
    def seed_reached(self) -> bool:
        """Whether anything the check observed changed with the seed."""
        first = self.results[0].observations if self.results else {}
        return len(self.results) < 2 or any(r.observations != first for r in self.results[1:])

    def suggestions(self) -> list[BoundSuggestion]:
        return _suggest(self)

    def as_dict(self) -> dict[str, Any]:
        worst = self.worst
        return {
            "format": "pv-measure", "falsifier": self.falsifier, "device": self.device, "subject": self.subject,
            "prediction": self.prediction, "seeds": self.seeds, "seed_mechanism": self.mechanism,
            "seed_reached": self.seed_reached, "failing_seeds": self.failing_seeds,
            "observations": self.stats(),
            "worst": {"seed": worst.seed, "verdict": worst.verdict, "margin": worst.margin,
                      "explanation": worst.explanation},
            "bounds": [{"clause": s.clause, "observation": s.observation, "direction": s.direction,
                        "bound": s.bound, "worst": s.worst, "worst_seed": s.worst_seed, "holds": s.holds,
                        "suggested": s.suggested, "headroom": self.headroom} for s in self.suggestions()],
            "per_seed": [{"seed": r.seed, "verdict": r.verdict, "margin": r.margin,
                          "observations": r.observations} for r in self.results],
        }

    def to_json(self) -> str:
        return json.dumps(_json_safe(self.as_dict()), indent=2, allow_nan=False) + "\n"


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def takes_seed(check: Callable[..., Any], params: Mapping[str, Any]) -> bool:
    if "seed" in params:
        return True
    try:
        signature = inspect.signature(check)
    except (TypeError, ValueError):
        return False
    return "seed" in signature.parameters


def sweep(check: Callable[..., Any], *, falsifier: str, prediction: str, params: Mapping[str, Any],
          seeds: list[int], device: str = "cpu", tolerance: Mapping[str, Any] | None = None,
          subject: str | None = None, subject_param: str = "subject", headroom: float = 2.0,
          on_seed: Callable[[SeedResult], None] | None = None) -> Sweep:
    """Run the check once per seed and judge the prediction. Raises MeasureError when a seed
    cannot be measured (the check raised, the device is absent, the prediction cannot be
    evaluated): a sweep with a hole in it would hide exactly the seed that matters."""
    import pytest

    seeded = takes_seed(check, params)
    mechanism = "the check's `seed` parameter" if seeded else f"pv.testing.sweep_seed() ({SEED_ENV}) and random.seed"
    result = Sweep(falsifier, device, subject, prediction, mechanism, headroom=headroom)
    previous = os.environ.get(SEED_ENV)
    try:
        for seed in seeds:
            run_params = dict(params)
            if seeded:
                run_params["seed"] = seed
            os.environ[SEED_ENV] = str(seed)
            random.seed(seed)
            try:
                outcome = harness.falsify(check, run_params, prediction, device, tolerance, falsifier=falsifier,
                                          subject=subject, subject_param=subject_param)
            except harness.Falsified:
                outcome = harness.take_outcome()
            except harness.FalsifierError as exc:
                raise MeasureError(f"seed {seed}: {exc}") from None
            except pytest.skip.Exception as exc:
                raise MeasureError(f"seed {seed}: {exc.msg}; measure on a device this machine has") from None
            assert outcome is not None
            entry = SeedResult(seed, outcome.verdict, dict(outcome.observations), outcome.margin,
                               explain.explanation(prediction, outcome.observations) if outcome.verdict != "PASS"
                               else "")
            result.results.append(entry)
            if on_seed is not None:
                on_seed(entry)
    finally:
        harness.reset()
        if previous is None:
            os.environ.pop(SEED_ENV, None)
        else:
            os.environ[SEED_ENV] = previous
    return result


def _constant(node: ast.AST) -> float | None:
    """The value of an operand that names no observation (`1e-6`, `0.7 * ln(1024)`), else None."""
    sub = expr.Expression(text=ast.unparse(node), tree=ast.Expression(body=node))
    try:
        value = sub.evaluate({})
    except (expr.EvalError, TypeError, ValueError, ArithmeticError):
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _suggest(result: Sweep) -> list[BoundSuggestion]:
    """For each simple bound of the prediction (an observation against a constant), the worst
    value over the seeds and that value with headroom (x headroom for an upper bound on a
    positive quantity, / headroom for a lower one; toward zero and past it by the same factor
    of its magnitude otherwise)."""
    try:
        parsed = expr.parse(result.prediction)
    except expr.ExprError:
        return []
    out = []
    for node in ast.walk(parsed.tree):
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            continue
        op, left, right = type(node.ops[0]), node.left, node.comparators[0]
        flipped = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE}
        if isinstance(left, ast.Name) and _constant(right) is not None:
            name, bound, upper = left.id, _constant(right), op in (ast.Lt, ast.LtE)
        elif isinstance(right, ast.Name) and _constant(left) is not None and op in flipped:
            name, bound, upper = right.id, _constant(left), op in (ast.Gt, ast.GtE)
            op = flipped[op]
        else:
            continue
        if op not in (ast.Lt, ast.LtE, ast.Gt, ast.GtE):
            continue
        seen = [(float(r.observations[name]), r.seed) for r in result.results
                if isinstance(r.observations.get(name), (int, float)) and not isinstance(r.observations[name], bool)]
        if not seen:
            continue
        worst, seed = max(seen) if upper else min(seen)
        grow = upper == (worst >= 0)  # move away from the bound side by `headroom`
        suggested = worst * result.headroom if grow else worst / result.headroom
        out.append(BoundSuggestion(ast.unparse(node), name, "upper" if upper else "lower", float(bound),  # type: ignore[arg-type]
                                   worst, seed, suggested, expr._SYMBOL[op]))  # noqa: SLF001
    return out


def lines(result: Sweep) -> list[str]:
    """The report pv measure prints after the per-seed lines."""
    out = [f"over {len(result.results)} seeds ({result.seeds[0]}..{result.seeds[-1]}), seed through "
           f"{result.mechanism}:"]
    for name, s in result.stats().items():
        out.append(f"  {name}: min {s['min']:.6g}  max {s['max']:.6g}  mean {s['mean']:.6g}")
    worst = result.worst
    margin = "n/a" if worst.margin is None else f"{worst.margin:+.6g}"
    out.append(f"worst seed: {worst.seed} ({worst.verdict}, margin {margin})"
               + (f": {worst.explanation}" if worst.explanation else ""))
    if result.failing_seeds:
        out.append(f"SEED-LUCKY: the prediction is false at seed(s) {', '.join(map(str, result.failing_seeds))} "
                   f"of {len(result.results)}")
    else:
        out.append(f"the prediction holds at all {len(result.results)} seeds")
    for s in result.suggestions():
        sign = s.symbol
        state = "holds" if s.holds else "BREAKS"
        out.append(f"bound `{s.clause}`: worst {s.observation} = {s.worst:.6g} (seed {s.worst_seed}), {state}; "
                   f"suggested: {s.observation} {sign} {s.suggested:.3g} ({result.headroom:g}x headroom over the worst)")
    if not result.seed_reached:
        out.append("warning: every seed observed the same values; the seed does not reach this check (give it a "
                   "`seed` parameter, or read pv.testing.sweep_seed())")
    return out
