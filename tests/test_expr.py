"""pv.expr: the safe expression language of `prediction` and `formula`."""

from __future__ import annotations

import math

import pytest

from pv import expr
from pv.expr import EvalError, ExprError, is_boolean, judge, parse


@pytest.mark.parametrize("text, names", [
    ("val_loss < 0.7 * ln(vocab_size)", {"val_loss", "vocab_size"}),
    ("abs(a - b) <= 1e-3 * max(1, abs(a))", {"a", "b"}),
    ("0 < x <= 1", {"x"}),
    ("not finite or x > 2 ** 10 % 7", {"finite", "x"}),
    ("argmax_in_range", {"argmax_in_range"}),
    ("x == true and pi < e ** 2", {"x"}),
    ("sqrt(log2(x) + log10(y) + exp(z) + log(w)) >= min(a, b, c)", {"x", "y", "z", "w", "a", "b", "c"}),
    ("a < b\n  and c > d", {"a", "b", "c", "d"}),
])
def test_accepted(text, names):
    assert set(parse(text).names) == names


@pytest.mark.parametrize("text, fragment", [
    ("__import__('os').system('id')", "attribute"),
    ("__import__('os')", "__import__"),
    ("x.__class__ < 1", "attribute access"),
    ("x[0] < 1", "subscripting"),
    ("eval('1') < 2", "'eval'"),
    ("lambda: 1", "lambda"),
    ("[c for c in x] < 1", "comprehension"),
    ("'text' == x", "literal"),
    ("f'{x}' == y", "f-string"),
    ("(x := 1) > 0", ":="),
    ("x if y else z", "conditional"),
    ("x @ y > 1", "MatMult"),
    ("x in y", "In"),
    ("x is y", "Is"),
    ("x << 2 > 1", "LShift"),
    ("~x > 1", "Invert"),
    ("abs(x, y) > 1", "argument"),
    ("abs(x=1) > 1", "keyword"),
    ("max(*xs) > 1", "star"),
    ("abs > 1", "without a call"),
    ("_private > 1", "underscore"),
    ("True", "use true/false"),
    ("None == x", "None"),
    ("1j > x", "literal"),
    ("", "empty"),
    ("a = b", "syntax"),
    ("a ≤ b", "syntax"),
    ("x" * (expr.MAX_LENGTH + 1), "longer"),
    (" + ".join(["x"] * 400) + " > 0", "parts"),
    ("-" * 1900 + "x < 1", "parts"),
])
def test_rejected(text, fragment):
    with pytest.raises(ExprError) as info:
        parse(text)
    if fragment:
        assert fragment in info.value.message + info.value.hint


def test_open_is_just_a_name():
    """Names are observations, not Python builtins: `open` is looked up in the observations."""
    assert parse("open < 1").names == frozenset({"open"})
    with pytest.raises(EvalError):
        judge("open < 1", {})


def test_error_columns_point_into_the_text():
    with pytest.raises(ExprError) as info:
        parse("a < 1 and b.c > 2")
    assert info.value.col == len("a < 1 and ") + 1
    with pytest.raises(ExprError) as info:
        parse("a < 1 and __import__('os')")
    assert info.value.col == len("a < 1 and ") + 1


@pytest.mark.parametrize("text, hint", [
    ("a ≤ b", "write <= instead of ≤"),
    ("a ≈ b", "tolerance"),
    ("a = b", "use == for equality"),
    ("a && b", "write and / or"),
])
def test_hints(text, hint):
    with pytest.raises(ExprError) as info:
        parse(text)
    assert hint in info.value.hint


def test_non_text_is_rejected():
    with pytest.raises(ExprError):
        parse(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("text, boolean", [
    ("a < b", True), ("a and b", True), ("not a", True), ("flag", True),
    ("a * 2", False), ("ln(a)", False), ("-a", False), ("1", False),
])
def test_is_boolean(text, boolean):
    assert is_boolean(parse(text)) is boolean


def test_judge_margins():
    j = judge("val_loss < 0.7 * ln(vocab_size)", {"val_loss": 2.0, "vocab_size": 1024, "unused": 1})
    assert j.holds and j.margin == pytest.approx(0.7 * math.log(1024) - 2.0)
    assert j.observed == {"val_loss": 2.0, "vocab_size": 1024}
    assert judge("a > 1", {"a": 0.5}).margin == pytest.approx(-0.5)
    assert judge("0 < a < 1", {"a": 0.9}).margin == pytest.approx(0.1)
    assert judge("a < 1 and b < 1", {"a": 0.2, "b": 0.9}).margin == pytest.approx(0.1)
    assert judge("a < 1 or b < 1", {"a": 0.2, "b": 0.9}).margin == pytest.approx(0.8)
    assert judge("a == 1", {"a": 1}).margin == 0
    assert judge("flag", {"flag": True}).margin is None
    assert not judge("not flag", {"flag": True}).holds


def test_judge_accepts_scalar_objects_with_item():
    class Scalar:
        def item(self):
            return 0.5

    assert judge("x < 1", {"x": Scalar()}).holds


@pytest.mark.parametrize("text, observations, fragment", [
    ("x < 1", {}, "no observation named 'x'"),
    ("x < 1", {"x": "text"}, "not a number"),
    ("x / y < 1", {"x": 1, "y": 0}, "arithmetic"),
    ("ln(x) < 1", {"x": -1}, "ln"),
    ("9 ** 9 ** 9 > x", {"x": 1}, "arithmetic"),
    ("x ** 0.5 > 1", {"x": -8}, "not a real number"),
    ("x * 2", {"x": 1}, "not true/false"),
])
def test_judge_errors(text, observations, fragment):
    with pytest.raises(EvalError) as info:
        judge(text, observations)
    assert fragment in str(info.value)


def test_huge_power_is_bounded_in_time():
    import time

    start = time.perf_counter()
    with pytest.raises(EvalError):
        judge("2 ** 2 ** 2 ** 2 ** 2 ** 2 > x", {"x": 1})
    assert time.perf_counter() - start < 0.5


def test_parse_is_cached_but_results_are_equal():
    assert parse("a < 1") is parse("a < 1")
    assert parse("a < 1") == parse("a  <  1".replace("  ", " "))


def test_margin_of_an_integer_past_float_range_is_infinite_not_an_error():
    assert judge("x < 2", {"x": 10**400}).margin == -math.inf
    assert judge("x > 2", {"x": 10**400}).margin == math.inf
    assert judge("x == 2", {"x": -10**400}).margin == -math.inf


@pytest.mark.parametrize("prediction, observations, message", [
    ("10 ** 10 ** 10 < x", {"x": 1}, "`10 ** 10 ** 10` overflows"),
    ("x ** 2 < 1", {"x": 10**400}, "`x ** 2` overflows"),
    ("1 / x > 1", {"x": 0}, "`1 / x` divides by zero"),
    ("1 % x > 1", {"x": 0}, "`1 % x` divides by zero"),
])
def test_arithmetic_errors_name_the_part_that_failed(prediction, observations, message):
    with pytest.raises(EvalError, match=message.replace("*", r"\*")):
        judge(prediction, observations)


@pytest.mark.parametrize("text, observations, holds", [
    # constants: `false` is false (a survivor of the mutation score: nothing evaluated it)
    ("x > 0 and false", {"x": 1}, False), ("x > 0 and true", {"x": 1}, True), ("x > 5 or true", {"x": 1}, True),
    ("x > 5 or false", {"x": 1}, False), ("not false and x > 0", {"x": 1}, True),
    ("x < inf", {"x": 1e308}, True), ("x < inf", {"x": math.inf}, False),
    ("3.14159 < pi < 3.1416 and 2.71828 < e < 2.71829 and x", {"x": True}, True),
    # every operator, both ways
    ("x + 2 == 5", {"x": 3}, True), ("x - 2 == 1", {"x": 3}, True), ("x * 2 == 6", {"x": 3}, True),
    ("x / 2 == 1.5", {"x": 3}, True), ("x ** 2 == 9", {"x": 3}, True), ("x % 2 == 1", {"x": 3}, True),
    ("-x == -3 and +x == 3", {"x": 3}, True), ("not x", {"x": False}, True), ("not x", {"x": True}, False),
    ("x < 3", {"x": 3}, False), ("x <= 3", {"x": 3}, True), ("x > 3", {"x": 3}, False), ("x >= 3", {"x": 3}, True),
    ("x == 3", {"x": 3}, True), ("x != 3", {"x": 3}, False), ("1 < x < 3", {"x": 3}, False), ("1 < x <= 3", {"x": 3}, True),
    ("x < 1 or x > 2", {"x": 1.5}, False), ("x > 1 and x < 2", {"x": 1.5}, True),
    # every function
    ("ln(x) == 0 and log(x) == 0 and log2(2 * x) == 1 and log10(10 * x) == 1", {"x": 1}, True),
    ("exp(x) == 1 and sqrt(4 * x + 9) == 3 and abs(-x) == 1", {"x": 0}, False),
    ("exp(x) == 1 and sqrt(4 * x + 9) == 3 and abs(-x) == 0", {"x": 0}, True),
    ("min(x, 2, 3) == 1 and max(x, 2, 3) == 3", {"x": 1}, True), ("min(x, 0) == 0", {"x": 1}, True),
    # a NaN observation is false whatever the prediction
    ("x != 1", {"x": math.nan}, False), ("not (x < 1)", {"x": math.nan}, False),
])
def test_every_operator_constant_and_function_evaluates_as_python_does(text, observations, holds):
    assert judge(text, observations).holds is holds


@pytest.mark.parametrize("text, observations, margin", [
    ("x < 3", {"x": 1}, 2.0), ("x <= 3", {"x": 4}, -1.0), ("x > 3", {"x": 5}, 2.0), ("x >= 3", {"x": 1}, -2.0),
    ("x == 3", {"x": 1}, -2.0), ("x == 3", {"x": 3}, 0.0), ("x != 3", {"x": 1}, None),
    ("1 < x < 10", {"x": 3}, 2.0), ("x < 1 and y < 10", {"x": 0, "y": 4}, 1.0), ("x < 1 or y < 10", {"x": 0, "y": 4}, 6.0),
    ("flag", {"flag": True}, None), ("x < 1 and flag", {"x": 0, "flag": True}, 1.0), ("flag == x", {"flag": True, "x": 1}, None),
    ("x > 1e308 * 10", {"x": 1}, -math.inf),
])
def test_margins_of_each_form(text, observations, margin):
    assert judge(text, observations).margin == margin


def test_a_judgement_lists_only_the_observations_it_names_and_describes_itself():
    judgement = judge("x < 1", {"x": 2, "unused": 5})
    assert judgement.observed == {"x": 2} and judgement.prediction == "x < 1"
    assert judgement.describe() == "FALSIFIED: x < 1  [observed x=2; margin -1]"
    assert judge("x < 1.5", {"x": 0.25}).describe() == "holds: x < 1.5  [observed x=0.25; margin 1.25]"
    assert judge("flag", {"flag": True}).describe() == "holds: flag  [observed flag=True; margin n/a]"


def test_to_float_saturates_huge_integers_both_ways():
    assert expr.to_float(10 ** 400) == math.inf and expr.to_float(-(10 ** 400)) == -math.inf
    assert expr.to_float(3) == 3.0


def test_a_syntax_error_points_at_pythons_column_and_a_nul_byte_is_refused():
    with pytest.raises(ExprError) as info:
        parse("x < < 1")
    assert info.value.col == 5 and "syntax error" in info.value.message
    with pytest.raises(ExprError, match="null bytes") as info:
        parse("x <\x00 1")
    assert info.value.col == 0  # Python gives no offset: 0, not None


@pytest.mark.parametrize("text", ["log(x, 10)", "ln(x, 2)", "log2(x, 2)", "log10(x, 2)", "exp(x, 1)", "sqrt(x, 1)",
                                  "abs(x, 1)", "min(x)", "max(x)"])
def test_each_function_takes_exactly_its_arguments(text):
    with pytest.raises(ExprError, match=r"takes (1|at least 2) argument"):
        parse(text)


def test_the_delete_character_is_ascii_and_gets_no_ascii_hint():
    with pytest.raises(ExprError) as info:
        parse("x <\x7f 1")
    assert "ASCII" not in info.value.hint


def test_an_arity_error_points_at_the_call():
    with pytest.raises(ExprError) as info:
        parse("x < log(x, 2)")
    assert info.value.col == 5


def test_an_expression_of_exactly_max_nodes_parts_parses_and_one_more_does_not():
    parse("-" * (expr.MAX_NODES - 1) + "x")  # 499 minus signs and a name: 500 parts
    with pytest.raises(ExprError, match="more than"):
        parse("-" * expr.MAX_NODES + "x")


def test_an_integer_power_up_to_the_64th_is_exact_like_python():
    # an observed count raised to a small integer power is computed as Python computes it (an
    # exact integer), so an exact comparison holds; only bigger powers fall back to floats
    assert judge("n ** 64 == 3433683820292512484657849089281", {"n": 3}).holds
    assert judge("n ** -64 == 1 / 3433683820292512484657849089281", {"n": 3}).holds


def test_a_prediction_may_be_exactly_max_length_characters_long():
    def of_length(n: int) -> str:
        return "x < 1." + "0" * (n - 7) + "1"

    assert len(of_length(expr.MAX_LENGTH)) == expr.MAX_LENGTH
    assert judge(of_length(expr.MAX_LENGTH), {"x": 0.0}).holds
    with pytest.raises(ExprError, match="longer than"):
        parse(of_length(expr.MAX_LENGTH + 1))


def test_a_big_integer_literal_that_a_double_holds_is_a_number():
    assert judge(f"x < {2 ** 1020}", {"x": 1.0}).holds  # 1021 bits, about 1.1e307: a float holds it
    with pytest.raises(ExprError, match="past a float's range"):
        parse(f"x < {2 ** 1030}")


def test_a_power_past_the_64th_is_computed_in_floats():
    # the documented bound of exact integer powers: 3 ** 65 is the double nearest it, not the integer
    assert judge("n ** 65 == 10301051460877537453973547267843", {"n": 3}).holds is False
    assert judge("n ** 65 == 1.0301051460877538e31", {"n": 3}).holds


def test_c_style_or_gets_the_and_or_hint_and_a_plain_error_gets_none():
    with pytest.raises(ExprError) as info:
        parse("a > 1 || b > 2")
    assert info.value.hint == "write and / or"
    with pytest.raises(ExprError) as info:
        parse("a > (1")
    assert info.value.hint == ""


def test_a_name_python_folds_into_true_is_refused_at_its_column():
    # Python folds names by NFKC: the mathematical bold T makes the *name* True, not the constant
    with pytest.raises(ExprError) as info:
        parse("x > 1 and \U0001d413rue")
    assert info.value.message.startswith("'True' is not allowed")
    assert (info.value.col, info.value.hint) == (len("x > 1 and ") + 1, "write true/false")


def test_an_expression_error_reads_as_its_message():
    with pytest.raises(ExprError) as info:
        parse("   ")
    assert str(info.value) == info.value.message == "empty expression"
    positional = ExprError("a bad part", 7, "a hint")  # col and hint given in order, as the signature allows
    assert (str(positional), positional.col, positional.hint) == ("a bad part", 7, "a hint")
