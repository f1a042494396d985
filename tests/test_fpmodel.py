"""pv.fpmodel: a prediction as a query over IEEE doubles. Each fact the module documents for an
over-approximated function (exp, ln, **) is what lets the solver prove a prediction that needs
it can never fail; without the fact the solver finds a (spurious) failing observation.

The oracle is the documented model itself (pv/fpmodel.py's docstring) and the math library's
behaviour it states (exp(0) = 1, ln(1) = 0, NaN in gives NaN out); the concrete search of
pv.vacuity is bypassed, so each answer here is the solver's alone."""

from __future__ import annotations

import pytest

from pv import expr, vacuity

fpmodel = pytest.importorskip("pv.fpmodel")  # z3 is pv's dependency; the import fails loudly if it is gone


def can(text: str, want: bool) -> str:
    """'sat' | 'unsat' | 'unknown': can the solver make `text` defined and judged `want`?

    In a z3 context of its own, as pv decides (fpmodel.fresh_context): in the shared default
    context the units a query spends depend on every term built before it in the process, so an
    answer near the budget depended on which tests ran first on the worker (seen in CI:
    `x > 0 and 0 != sqrt(x)` was 'sat' after other tests, 'unknown' in a fresh process)."""
    with fpmodel.fresh_context():
        query = fpmodel.Query(expr.parse(text))
        return fpmodel.Search(query, query.holds if want else query.fails,
                              fpmodel.Budget(vacuity.SOLVER_BUDGET)).next()[0]


@pytest.mark.parametrize("text", [
    "exp(x) >= 0",                      # never NaN, never negative for a number
    "exp(x) >= 1 or x < 0",             # exp(x) >= 1 for x >= 0
    "exp(x) <= 1 or x > 0",             # exp(x) <= 1 for x <= 0
    "exp(x) == inf or x != inf",        # exp(inf) = inf
    "exp(x) == 0 or x != -inf",         # exp(-inf) = 0
    "ln(x) == 0 or x != 1",             # ln(1) = 0
    "ln(x) > 0 or x <= 1",              # above 1: positive
    "ln(x) < 0 or x <= 0 or x >= 1",    # between 0 and 1: negative
    "ln(x) == inf or x != inf",         # ln(inf) = inf
    "not (ln(x - x) == ln(x - x))",     # defined only at x = ±inf, where x - x is NaN and so is ln of it
    "not (exp(x - x) == exp(x - x)) or (x != inf and x != -inf)",  # exp of NaN is NaN
    "x ** 2 >= 0",                      # an even literal power is never negative
    "x ** 0 == 1",
])
def test_a_prediction_the_documented_facts_prove_can_never_fail(text):
    assert can(text, want=False) == "unsat"


@pytest.mark.parametrize("text", [
    "x ** y >= 0",        # an observed exponent: no even-power fact ((-2) ** 3 < 0)
    "x ** 3 >= 0",        # an odd literal power can be negative
])
def test_a_power_without_an_even_literal_exponent_can_fail(text):
    assert can(text, want=False) == "sat"


def test_a_complex_power_is_never_defined():
    # (-8) ** 0.5 is complex in Python: pv.expr reports an error, so no observation is judged
    assert can("x ** 0.5 == x ** 0.5 and x < 0 and x > -inf", want=True) == "unsat"


def test_a_negated_comparison_is_a_number():
    # -(x < 1) is -1 or 0 in Python (a boolean is 0 or 1 in arithmetic): never positive
    assert can("-(x < 1) <= 0", want=False) == "unsat"
    assert can("-(x < 1) == -1", want=True) == "sat"


def test_ln_of_a_finite_positive_number_is_finite():
    assert can("ln(x) < inf or x == inf", want=False) == "unsat"
    assert can("ln(x) == ln(x) or x == inf", want=False) == "unsat"  # and never NaN


def test_a_tree_outside_the_expression_language_is_refused():
    import ast

    outside = expr.Expression(text="x[0] > 1", tree=ast.parse("x[0] > 1", mode="eval"))  # parse() refuses it
    with pytest.raises(ValueError, match="not in the expression language: Subscript"):
        fpmodel.Query(outside)


# --- facts each part of the translation must keep (found by pv's own mutation score) ------------


def first_answer(query, goal) -> str:
    """The solver's first answer ('sat' | 'unsat' | 'unknown') for a goal built on `query`."""
    return fpmodel.Search(query, goal, fpmodel.Budget(vacuity.SOLVER_BUDGET)).next()[0]


def test_a_bare_observation_passes_only_as_the_boolean_true():
    # judge() wants true/false for a prediction that is one name: 1 (True) passes, 0 fails, and
    # no other number is a boolean observation, so none passes
    import z3

    query = fpmodel.Query(expr.parse("flag"))
    flag = query.variables["flag"]
    assert first_answer(query, query.holds) == "sat"
    assert first_answer(query, z3.And(query.holds, z3.Not(z3.fpEQ(flag, fpmodel.ONE)))) == "unsat"
    assert first_answer(query, z3.And(query.fails, z3.Not(z3.fpIsZero(flag)))) == "unsat"


def test_a_comparison_chain_compares_each_operand_with_the_one_before_it():
    # 0 < x < 1 is 0 < x and x < 1 (Python's chain): never true with x >= 1
    assert can("0 < x < 1 and x >= 1", want=True) == "unsat"
    assert can("0 < x < 1", want=True) == "sat"


def test_a_comparison_is_a_number_in_arithmetic():
    # (x < 1) + (x < 2) is 0, 1 or 2 (True counts 1), so it is never above 2
    assert can("(x < 1) + (x < 2) <= 2", want=False) == "unsat"
    assert can("(x < 1) + (x < 2) == 2", want=True) == "sat"


def test_a_remainder_by_zero_is_never_defined():
    # x % 0 raises ZeroDivisionError in Python: pv.expr reports an error, never a verdict
    assert can("x % y == x % y and y == 0", want=True) == "unsat"
    assert can("x % y < inf or y == 0", want=True) == "sat"


def test_a_compared_operand_that_raises_makes_the_comparison_undefined():
    # sqrt of a negative number raises in Python: `0 != sqrt(x)` is never judged for x < 0.
    # The satisfiable half is pinned to [1, 2]: over every positive double, z3's square root
    # needs more than the budget in a fresh context (an honest 'unknown', not a 'sat').
    assert can("x < 0 and 0 != sqrt(x)", want=True) == "unsat"
    assert can("x >= 1 and x <= 2 and 0 != sqrt(x)", want=True) == "sat"
    assert can("x > 0 and 0 != ln(x)", want=True) == "sat"
    assert can("x < 0 and 0 != ln(x)", want=True) == "unsat"


def test_an_integer_no_double_equals_is_any_number_to_the_solver():
    # 2**53 + 1: Python compares it exactly with a double; the model leaves it unconstrained
    assert can("x < 9007199254740993", want=True) == "sat"
    assert can("x < 9007199254740993", want=False) == "sat"


def test_exp_past_709_overflows_and_is_never_judged():
    # math.exp raises OverflowError from 710 on (a finite argument): no verdict there
    assert can("exp(x) == exp(x) and x >= 710 and x < inf", want=True) == "unsat"
    assert can("exp(x) == exp(x) and x >= 700 and x <= 709", want=True) == "sat"


def test_a_first_power_is_the_number_itself():
    # x ** 1 == x exactly (IEEE pow(x, 1) is x): where it is defined it never fails
    assert can("x ** 1 == x", want=False) == "unsat"
# --- one budget per prediction ---------------------------------------------------------------------

OVERSHOOT = 10_000  # z3 checks its limit between steps, so a call may end a few units past it


def test_every_call_is_granted_only_what_the_budget_has_left():
    budget = fpmodel.Budget(150_000)
    easy = fpmodel.Query(expr.parse("x < x"))
    assert fpmodel.Search(easy, easy.holds, budget).next()[0] == "unsat"
    spent_on_easy = budget.spent
    assert 0 < spent_on_easy < 150_000 and budget.left == 150_000 - spent_on_easy
    # proving `sqrt(x) >= 0` takes far more than 150,000 units (bit-blasting the square root):
    # granted only what is left, the second call gives up with the budget spent, not a fresh one
    hard = fpmodel.Query(expr.parse("sqrt(x) >= 0"))
    assert fpmodel.Search(hard, hard.fails, budget).next()[0] == "unknown"
    assert 150_000 <= budget.spent <= 150_000 + OVERSHOOT and budget.calls == 2 and budget.left == 0


def test_a_spent_budget_makes_no_solver_call_and_answers_unknown():
    budget = fpmodel.Budget(0)  # an rlimit of 0 would mean no limit to z3: it is never granted
    query = fpmodel.Query(expr.parse("x < x"))
    assert fpmodel.Search(query, query.holds, budget).next() == ("unknown", {})
    assert budget.calls == 0 and budget.spent == 0
