"""Predictions that cannot fail are refused: statically (pv.vacuity, `pv validate` PV405), by the
parser (comments), by the schema (non-finite tolerances) and again at run time (the harness)."""

from __future__ import annotations

import math

import pytest

from pv import expr, harness, vacuity
from pv_validate_ws import make_vworkspace, parse_output

TAUTOLOGIES = [
    "x == x", "a <= a", "val_loss >= val_loss", "err < 1 or true", "2 * x >= x + x",
    "abs(x) >= 0", "x ** 2 >= 0", "sqrt(x) >= 0", "x < 1 or x >= 1", "2 * x < 2 or x >= 1",
    "flag or not flag", "not (x > 1 and false)", "(x < 1) or (1 < 2)",
    # the forms an attack found the pattern-based check missing
    "x > 0 or x < 1", "x <= inf", "x >= -inf", "x*x >= 0", "x**0 == 1", "max(x, 1) >= 1", "min(x, 1) <= 1",
    "x < 0 or 1", "exp(x) >= 0", "ln(x) > 0 or x <= 1", "min(x, y) <= max(x, y)", "x ** 2 >= 0 or y < 1",
    "x - x == 0 or x == inf or x == -inf", "not (x != x)", "abs(x) == abs(-x)",
    " or ".join(f"x > {i}" for i in range(14)) + " or x <= 0",  # padded past a dozen comparisons
    " and ".join(f"x == x" for _ in range(13)),
]
NO_OBSERVATION = ["not false", "true", "1 < 2", "ln(10) > 2", "pi > 3 and e < 3"]
CONTRADICTIONS = ["x < x", "x != x", "sqrt(x) < -1", "err < 1 and false", "x > inf", "abs(x) < 0",
                  "x < 1 and x > 2", "exp(x) < 0"]
HONEST = [
    "val_loss < 0.7 * ln(vocab_size)", "x < 1", "x < inf", "abs(a - b) <= 1e-5 * abs(b)", "flag",
    "not flag", "x > 0 and x < 1", "0 < x < 1", "max_abs_diff <= atol + rtol * max_abs_ref",
    "x ** 3 >= 0", "exp(x) > 1", "min(a, b) >= 0",
    # can fail in floating point though not over the reals
    "x < x + 1",      # 1e300 + 1 == 1e300, and inf + 1 == inf
    "x - x == 0",     # inf - inf is NaN
    "ln(x) < inf",    # ln(inf) == inf
    "x % 2 == x % 2",  # inf % 2 is NaN
    "x * 10 > x or x <= 0",  # 1e308 * 10 is inf > x, but 5e-324 * 10 ... and inf * 10 == inf
    "a == 0 and b == 2 and c == b",  # passing values only a repair of `name == bound` links finds fast
]
@pytest.mark.parametrize("text", TAUTOLOGIES)
def test_tautologies_are_found(text):
    assert "holds for every value" in vacuity.cannot_fail(text)


@pytest.mark.parametrize("text", NO_OBSERVATION)
def test_predictions_without_observations_are_found(text):
    assert "mentions no observation" in vacuity.cannot_fail(text)


@pytest.mark.parametrize("text", CONTRADICTIONS)
def test_contradictions_are_found(text):
    assert "false for every value" in vacuity.cannot_fail(text)


@pytest.mark.parametrize("text", HONEST)
def test_predictions_that_can_fail_pass(text):
    decision = vacuity.decide(text)
    assert decision.refused is None and decision.undecided is None
    # the witnesses are real: pv.expr itself judges them false and true
    assert expr.judge(text, decision.fails_at).holds is False
    assert expr.judge(text, decision.passes_at).holds is True


def test_never_evaluable_is_its_own_reason():
    assert "cannot be evaluated for any observation" in vacuity.cannot_fail("sqrt(-1 - abs(x)) > 0")


def test_an_open_question_is_undecided_not_accepted(monkeypatch):
    # ln's monotonicity is not a fact pv gives the solver (libm does not promise it bit for bit),
    # so its candidates do not replay and the question stays open: reported, never "can fail".
    decision = vacuity.decide("ln(x) <= ln(y) or x > y")
    assert decision.undecided == "can it fail?" and decision.refused is None and decision.fails_at is None
    monkeypatch.setattr(vacuity, "SOLVER_BUDGET", 1)  # a solver that gives up at once
    vacuity._decide_text.cache_clear()
    try:
        decision = vacuity.decide("x*x >= 0")
        assert decision.undecided == "can it fail?" and decision.refused is None and decision.fails_at is None
    finally:
        vacuity._decide_text.cache_clear()


def test_honest_predictions_are_decided_without_the_solver():
    import subprocess
    import sys

    code = ("import sys; from pv import vacuity; "
            "assert all(vacuity.cannot_fail(t) is None for t in %r); print('z3' in sys.modules)" % (HONEST,))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_nan_observation_is_judged_false_whatever_the_prediction():
    assert expr.judge("x != 1", {"x": float("nan")}).holds is False
    assert expr.judge("not (x > 1)", {"x": float("nan"), "y": 1}).holds is False
    assert expr.judge("x != 1", {"x": 2.0}).holds is True


@pytest.mark.parametrize("text, symbol", [("x < 1 # and x > 100", "#"), ("x < 1 \\\n and x > 0", "\\"),
                                          ("x < 1; x > 100", ";")])
def test_text_outside_the_grammar_is_refused(text, symbol):
    with pytest.raises(expr.ExprError) as info:
        expr.parse(text)
    assert f"({symbol}) is not part of the expression language" in info.value.message
    assert info.value.col == text.index(symbol) + 1


def test_the_comment_attack_no_longer_passes_at_run_time():
    # Before: everything after # was dropped and the falsifier PASSed at x = 0.5.
    with pytest.raises(harness.FalsifierError, match="not part of the expression language"):
        harness.falsify(lambda *, device: {"x": 0.5}, {}, "x < 1 # and x > 100", "cpu")
    assert harness.take_outcome().verdict == "ERROR"


def test_a_tautology_is_an_error_at_run_time_even_without_validate():
    with pytest.raises(harness.FalsifierError, match="cannot fail: it holds for every value"):
        harness.falsify(lambda *, device: {"err": 5.0}, {}, "err < 1 or true", "cpu")
    assert harness.take_outcome().verdict == "ERROR"


@pytest.fixture
def vws(tmp_path, monkeypatch):
    return make_vworkspace(tmp_path, monkeypatch)


PREDICTION = 'prediction: "val_loss < 0.7 * ln(vocab_size)"'


@pytest.mark.parametrize("prediction, code, words", [
    ('"val_loss < 1 # and val_loss > 100"', "PV401", "a comment (#) is not part of the expression language"),
    ('"val_loss == val_loss"', "PV405", "cannot fail: it holds for every value"),
    ('"val_loss < 1 or true"', "PV405", "cannot fail: it holds for every value"),
    ('"val_loss <= inf"', "PV405", "cannot fail: it holds for every value"),
    ('"val_loss < 0 and val_loss > 1"', "PV405", "false for every value"),
    ('"not false"', "PV404", "mentions no observation"),
])
def test_validate_refuses_predictions_that_cannot_fail(vws, prediction, code, words):
    vws.contract((PREDICTION, f"prediction: {prediction}"))
    result = vws.run()
    assert result.exit_code == 1, result.output
    found = [f for f in parse_output(result.output) if f.code == code]
    assert found and words in found[0].message and not found[0].warning, result.output


@pytest.mark.parametrize("value, words", [(".inf", "finite number"), (".nan", "finite number"),
                                          ("-1", "greater than or equal to 0")])
def test_validate_refuses_non_finite_and_negative_tolerances(vws, value, words):
    vws.contract(("    mutants: [drops_bias]\n",
                  f"    mutants: [drops_bias]\n    tolerance:\n      source: attacker\n"
                  f"      float32: {{rtol: {value}, atol: 0}}\n"))
    result = vws.run()
    assert result.exit_code == 1, result.output
    assert words in result.output and "rtol" in result.output, result.output


def test_validate_warns_when_it_cannot_decide(vws):
    vws.contract((PREDICTION, 'prediction: "ln(val_loss) <= ln(vocab_size) or val_loss > vocab_size"'))
    result = vws.run()
    found = [f for f in parse_output(result.output) if f.code == "PV407"]
    assert found and found[0].warning and "could not decide" in found[0].message, result.output
    assert found[0].message.endswith(" can it fail (the solver gave up)")  # the open question, named


def test_validate_refuses_a_disarming_tolerance_naming_dtype_and_cap(vws):
    vws.contract(("    mutants: [drops_bias]\n",
                  "    mutants: [drops_bias]\n    tolerance:\n      source: attacker\n"
                  "      float32: {rtol: 1.0e+300, atol: 0}\n"))
    result = vws.run()
    assert result.exit_code == 1, result.output
    found = [f for f in parse_output(result.output) if f.code == "PV408"]
    assert found and "float32 cap of 0.013" in found[0].message and not found[0].warning, result.output


def test_a_solver_candidate_counts_only_if_pv_expr_judges_it_so():
    flag = expr.parse("flag")
    assert vacuity.replay(flag, {"flag": 1.0}, True) == {"flag": True}  # a bare name is a boolean observation
    assert vacuity.replay(flag, {"flag": 0.0}, False) == {"flag": False}
    assert vacuity.replay(flag, {"flag": 2.0}, True) is None             # 2.0 is no boolean: an error
    assert vacuity.replay(expr.parse("x < 1"), {"x": 5.0}, True) is None
    assert vacuity.replay(expr.parse("x < 1"), {"x": 5.0}, False) == {"x": 5.0}
    assert vacuity.outcome(expr.parse("ln(x) > 0"), {"x": -1.0}) is None


def test_a_prediction_that_holds_or_raises_says_so_when_evaluability_is_open(monkeypatch):
    from pv import fpmodel

    monkeypatch.setattr(vacuity, "_evaluable", lambda query, budget: "unknown")
    assert vacuity._unfailing_reason(None, None) == vacuity.NEVER_FALSE
    monkeypatch.setattr(vacuity, "_evaluable", lambda query, budget: "unsat")
    assert vacuity._unfailing_reason(None, None) == vacuity.NEVER_DEFINED
    monkeypatch.setattr(vacuity, "_evaluable", lambda query, budget: "sat")
    assert vacuity._unfailing_reason(None, None) == vacuity.TAUTOLOGY
    assert fpmodel  # imported: the module loads


def test_a_failing_value_only_the_solver_finds_is_replayed_and_kept():
    # the concrete search never tries 3 * 0.123456789, the one value that makes this false
    decision = vacuity.decide("x != 0.123456789 * 3")
    assert decision.refused is None and decision.undecided is None
    assert decision.fails_at == {"x": 0.123456789 * 3} and expr.judge("x != 0.123456789 * 3", decision.fails_at).holds is False


@pytest.mark.parametrize("text, side", [("x * 3 == 1", "passes_at"), ("x * 3 != 1", "fails_at")])
def test_a_witness_only_the_solver_finds_decides_the_question(text, side):
    # no special double, number of the prediction or neighbour of one makes x * 3 == 1 true:
    # the solver's candidate, replayed through pv.expr, settles it
    decision = vacuity.decide(text)
    assert decision.refused is None and decision.undecided is None
    witness = getattr(decision, side)
    assert expr.judge(text, witness).holds is (side == "passes_at")


@pytest.mark.parametrize("text", [
    "a == 0 and b == 2 and c == b",  # the repair step satisfies `name <op> bound` links
    "x < -3 and x > -5",
    "x > -inf", "x < inf",  # the special doubles include both infinities
    "x > 4 and x * x == 36", "x < -4 and x * x == 36", "x != 4 and x * x == 36",  # only the repaired value passes
    # x * x == N is beyond the solver's budget (nonlinear floating point): the witness is one of
    # the prediction's own numbers moved (halved, doubled, one down)
    "x * x == 324 and x != 36", "x * x + 0 * 36 == 5184", "x * x + 0 * 36 == 1225",
])
def test_honest_predictions_are_decided_without_the_solver(text, monkeypatch):
    from pv import fpmodel

    monkeypatch.setattr(fpmodel, "Query", lambda parsed: pytest.fail(f"the solver was asked about {parsed.text}"))
    decision = vacuity._decide_parsed(expr.parse(text))  # uncached
    assert decision.refused is None and decision.undecided is None
    assert expr.judge(text, decision.passes_at).holds and not expr.judge(text, decision.fails_at).holds


def test_the_concrete_search_tries_both_neighbours_of_each_number_of_the_prediction():
    # documented step 1: "the prediction's own numbers and their neighbours"
    pool = vacuity._value_pool(expr.parse("x > 0.1"))
    assert math.nextafter(0.1, math.inf) in pool and math.nextafter(0.1, -math.inf) in pool
# --- one solver budget per prediction ----------------------------------------------------------------

OVERSHOOT = 10_000  # z3 checks its resource limit between steps: a call may end a few units past it
SLOW = "e >= max(7 / 0.5, 1e-300 ** y) != sqrt(z / 3)"  # 18 s of CPU in the fuzz run (one call of 3M units)


def test_the_slowest_fuzzed_prediction_stays_within_one_budget(monkeypatch):
    # e < 14 <= max(14, ...): it can never pass, which the solver does not prove within its budget
    # (about 5 us of CPU a unit here, bit-blasting / and sqrt: a smaller budget keeps the test fast).
    # Whatever it answers, the whole prediction spends one budget and is never accepted.
    monkeypatch.setattr(vacuity, "SOLVER_BUDGET", 200_000)
    decision = vacuity._decide_parsed(expr.parse(SLOW))  # uncached
    assert decision.refused == vacuity.CONTRADICTION or decision.undecided == "can it pass?", decision
    assert decision.fails_at is not None and decision.passes_at is None
    assert 1 <= decision.solver_calls and decision.solver_units <= 200_000 + OVERSHOOT


def test_the_budget_is_shared_by_every_question_and_candidate(monkeypatch):
    # ln(x) <= ln(y) or x > y: four candidates for "can it fail?", none replays (the model does not
    # know ln is monotonic). Each call draws on the same budget: together they stay within it.
    vacuity._decide_text.cache_clear()
    decision = vacuity._decide_parsed(expr.parse("ln(x) <= ln(y) or x > y"))
    assert decision.undecided == "can it fail?" and decision.solver_calls == vacuity.MAX_CANDIDATES
    full = decision.solver_units
    assert 0 < full <= vacuity.SOLVER_BUDGET
    monkeypatch.setattr(vacuity, "SOLVER_BUDGET", full // 3)  # room for one or two candidates, not four
    decision = vacuity._decide_parsed(expr.parse("ln(x) <= ln(y) or x > y"))
    assert decision.undecided == "can it fail?" and decision.fails_at is None
    assert decision.solver_calls < vacuity.MAX_CANDIDATES and decision.solver_units <= full // 3 + OVERSHOOT


@pytest.mark.parametrize("budget", [1, 20_000, 200_000])
@pytest.mark.parametrize("text", TAUTOLOGIES + CONTRADICTIONS + ["sqrt(-1 - abs(x)) > 0"])
def test_a_spent_budget_never_accepts_a_prediction_that_cannot_fail(text, budget, monkeypatch):
    # Out of budget is an open question (PV407), never "can fail": a refusal or undecided, whatever the budget.
    monkeypatch.setattr(vacuity, "SOLVER_BUDGET", budget)
    decision = vacuity._decide_parsed(expr.parse(text))  # uncached
    assert decision.refused is not None or decision.undecided is not None, decision
    assert decision.solver_units <= budget + OVERSHOOT


def test_predictions_settled_without_the_solver_spend_nothing():
    decision = vacuity._decide_parsed(expr.parse("x < 1"))
    assert decision.solver_calls == 0 and decision.solver_units == 0


def test_a_decision_spends_the_same_units_whatever_was_decided_before_it():
    # z3's step counter depends on what its context holds; each decision runs in a context of its
    # own, so a verdict near the budget cannot depend on the order predictions are judged in.
    text = "sqrt(-1 - abs(x)) > 0"
    vacuity._decide_text.cache_clear()
    try:
        alone = vacuity.decide(text)
        for other in ("2 * x >= x + x", "ln(x) <= ln(y) or x > y", "x*x >= 0"):
            vacuity._decide_text.cache_clear()
            vacuity.decide(other)
        vacuity._decide_text.cache_clear()
        after = vacuity.decide(text)
    finally:
        vacuity._decide_text.cache_clear()
    assert alone.solver_units == after.solver_units and alone.solver_calls == after.solver_calls
    assert alone.refused == after.refused and "cannot be evaluated for any observation" in after.refused


def _witnesses_as_before(parsed: expr.Expression) -> tuple:
    """concrete_witnesses as it was written before its two shortcuts (the generator seeded up
    front; a repaired set judged even where it equals the set just judged): the reference."""
    import ast
    import random
    import zlib

    names = sorted(parsed.names)
    pool: list[float] = []
    rng = random.Random(zlib.crc32(parsed.text.encode()))
    found: dict = {False: None, True: None}
    body = parsed.tree.body
    boolean_names = {body.id} if isinstance(body, ast.Name) else set()

    def judge(env):
        variants = [env]
        if boolean_names:
            variants.append({k: bool(v) if k in boolean_names and v in (0.0, 1.0) else v for k, v in env.items()})
        for candidate in variants:
            verdict = vacuity.outcome(parsed, candidate)
            if verdict is not None and found[verdict] is None:
                found[verdict] = dict(candidate)
        return found[False] is not None and found[True] is not None

    links = vacuity._bound_links(parsed.tree.body)
    for i in range(vacuity.CONCRETE_BUDGET):
        if i < len(vacuity.SPECIALS):
            env = {n: vacuity.SPECIALS[i] for n in names}
        else:
            pool = pool or vacuity._value_pool(parsed)
            env = {n: rng.choice(pool) for n in names}
        if judge(env):
            break
        if links and judge(vacuity._repair(env, links)):
            break
    return found[False], found[True]


def _same_witnesses(a, b) -> bool:
    """Equal observation sets, value by value and sign of zero by sign of zero."""
    def key(found):
        return None if found is None else sorted((k, type(v).__name__, repr(v)) for k, v in found.items())
    return all(key(x) == key(y) for x, y in zip(a, b))


def test_the_concrete_search_finds_what_it_found_before_its_shortcuts():
    """The random generator is seeded only when the specials run out, and a repaired set equal
    to the set just judged (no bound could be evaluated) is not judged again: the witnesses,
    and so every decision, are those of the search without either shortcut."""
    import random

    rng = random.Random(29)
    texts = TAUTOLOGIES + CONTRADICTIONS + HONEST + [
        "val_loss < 0.67 * ln(vocab_size)", "abs(val_loss - train_loss) < 0.6 and val_loss > 0.01",
        "max_abs_diff <= 6e-5 and argmax_agree", "x == -y and y < 1", "x == y - y", "ln(x) < 1 and x > -0.0",
        "x < 1e308 * 10 and x > 5e-324", "sqrt(x) <= y and ln(y) > 0", "x ** y == 1 and y != 0",
        "1 / x > 0 and x == -y", "x % 2 == 1", "max(x, y, z) < 1 and z == x - y",
    ]
    ops, atoms = ["+", "-", "*", "/", "**", "%"], ["x", "y", "0", "1", "-1", "0.5", "1e-300", "1e300", "inf"]
    for _ in range(300):  # random predictions: comparisons of random terms, joined by and/or
        terms = [f"{rng.choice(atoms)} {rng.choice(ops)} {rng.choice(atoms)}" for _ in range(3)]
        cmp = [rng.choice(["<", "<=", ">", ">=", "==", "!="]) for _ in range(2)]
        texts.append(f"{terms[0]} {cmp[0]} {terms[1]} {rng.choice(['and', 'or'])} y {cmp[1]} {terms[2]}")
    compared = 0
    for text in texts:
        try:
            parsed = expr.parse(text)
        except expr.ExprError:
            continue
        compared += 1
        assert _same_witnesses(vacuity.concrete_witnesses(parsed), _witnesses_as_before(parsed)), text
    assert compared > 250


def test_observation_sets_are_the_same_only_value_for_value_and_zero_sign_for_zero_sign():
    nan = math.nan
    assert vacuity._same({"x": 1.0, "y": 2.0}, {"y": 2.0, "x": 1.0})
    assert vacuity._same({"x": nan}, {"x": nan})  # the very same object
    assert not vacuity._same({"x": float("nan")}, {"x": float("nan")})
    assert not vacuity._same({"x": 0.0}, {"x": -0.0})
    assert not vacuity._same({"x": 1.0}, {"x": 1.0, "y": 1.0})
    assert not vacuity._same({"x": 1.0}, {"x": True})
    assert not vacuity._same({"x": 1.0}, {"x": 1.5})


def test_an_outcome_is_the_verdict_judge_gives():
    """vacuity.outcome evaluates as expr.judge does without making a Judgement: the same verdict,
    or None where judge raises, on numbers, booleans, NaN, infinities, huge integers, text and
    predictions whose margin raises (a chain cut short, an integer past a float's range)."""
    import random

    def by_judge(parsed, observations):
        try:
            return expr.judge(parsed, observations).holds
        except (expr.ExprError, expr.EvalError, TypeError, ArithmeticError, ValueError, RecursionError):
            return None

    rng = random.Random(7)
    texts = HONEST + TAUTOLOGIES + CONTRADICTIONS + [
        "x < y < 1 / z", "x < (2 ** 64) ** 64", "x == (2 ** 64) ** 64 and y < 1", "flag", "not flag and x > 1",
        "x", "x + 1", "x > 1 and flag", "abs(x - y) <= 1e-3 * max(1, abs(y))", "ln(x) < y", "x % y == 0",
    ]
    values = [0.0, -0.0, 1.0, -1.0, 0.5, 1e308, -1e308, math.inf, -math.inf, math.nan, 5e-324, True, False, 0, 1,
              -3, 10 ** 400, 2 ** 64, "text", None]
    compared = 0
    for text in texts:
        parsed = expr.parse(text)
        names = sorted(parsed.names)
        for _ in range(40):
            observations = {n: rng.choice(values) for n in names if rng.random() > 0.05}
            assert vacuity.outcome(parsed, observations) == by_judge(parsed, observations), (text, observations)
            compared += 1
    assert compared > 2500
