"""Predictions that cannot fail are refused: statically (pv.vacuity, `pv validate` PV405), by the
parser (comments), by the schema (non-finite tolerances) and again at run time (the harness)."""

from __future__ import annotations

import pytest

from pv import expr, harness, vacuity
from pv_validate_ws import make_vworkspace, parse_output

TAUTOLOGIES = [
    "x == x", "a <= a", "val_loss >= val_loss", "err < 1 or true", "x < x + 1", "2 * x >= x + x",
    "abs(x) >= 0", "x ** 2 >= 0", "sqrt(x) >= 0", "x < 1 or x >= 1", "2 * x < 2 or x >= 1",
    "flag or not flag", "not (x > 1 and false)", "(x < 1) or (1 < 2)",
]
NO_OBSERVATION = ["not false", "true", "1 < 2", "ln(10) > 2", "pi > 3 and e < 3"]
CONTRADICTIONS = ["x < x", "x != x", "sqrt(x) < -1", "err < 1 and false"]
HONEST = [
    "val_loss < 0.7 * ln(vocab_size)", "x < 1", "x < inf", "abs(a - b) <= 1e-5 * abs(b)", "flag",
    "not flag", "x > 0 and x < 1", "0 < x < 1", "max_abs_diff <= atol + rtol * max_abs_ref",
    "x ** 3 >= 0", "exp(x) > 1", "min(a, b) >= 0",
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
    assert vacuity.cannot_fail(text) is None


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
