"""pv.explain: a false prediction names the clauses that broke it (numeric or boolean), with
their observed values; a mixed prediction's margin is that of its worst numeric clause."""

from __future__ import annotations

import pytest

from pv import explain, expr, harness


def test_a_false_boolean_is_named_even_when_every_numeric_bound_holds():
    with pytest.raises(harness.Falsified) as info:
        harness.falsify(lambda *, device: {"a": 0.5, "b": 1.0, "finite": False}, {},
                        "a < 1 and b < 2 and finite", "cpu", falsifier="FALSIFY-X-001")
    text = str(info.value)
    assert "because:  `finite` is false: finite=False" in text
    assert "because:  `a < 1`" not in text and "because:  `b < 2`" not in text
    assert "bound:    a < 1  ->  0.5 < 1  held (margin 0.5)" in text
    assert "bound:    finite  ->  finite=False  BROKEN" in text
    assert "margin:   0.5 (worst numeric clause" in text and "boolean clauses: finite broken" in text
    assert harness.take_outcome().margin == pytest.approx(0.5)


def test_a_false_numeric_clause_is_named_with_its_values_and_margin():
    found = explain.clauses("a < 1 and b < 2", {"a": 1.5, "b": 1.0})
    assert [(c.text, c.holds, c.culprit) for c in found] == [("a < 1", False, True), ("b < 2", True, False)]
    assert found[0].evaluated == "1.5 < 1" and found[0].margin == pytest.approx(-0.5)
    assert explain.explanation("a < 1 and b < 2", {"a": 1.5, "b": 1.0}) == "`a < 1` is false: 1.5 < 1"


def test_culprits_follow_and_or_structure():
    obs = {"a": 0.0, "b": 1.0, "c": 0.0}
    # the `or` is false: both its clauses are to blame; `a < 1` held and is not
    found = explain.clauses("a < 1 and (b > 2 or c > 0)", obs)
    assert [c.text for c in found if c.culprit] == ["b > 2", "c > 0"]
    # a false clause inside a part that held is not to blame
    found = explain.clauses("(b > 2 or c < 1) and a > 0", obs)
    assert [c.text for c in found if c.culprit] == ["a > 0"]
    assert explain.clauses("a < 1", obs)[0].culprit is False  # it holds: nothing to blame
    assert explain.explanation("not flag", {"flag": True}) == "`not flag` is false: flag=True"


def test_mixed_prediction_margin_is_the_worst_numeric_clause():
    assert expr.judge("a < 1 and b < 2 and flag", {"a": 0.5, "b": 1.0, "flag": True}).margin == pytest.approx(0.5)
    assert expr.judge("a < 1 and flag", {"a": 1.5, "flag": False}).margin == pytest.approx(-0.5)
    assert expr.judge("flag and not other", {"flag": True, "other": False}).margin is None
    assert expr.judge("a < 1 or flag", {"a": 0.25, "flag": False}).margin == pytest.approx(0.75)


def test_unparsable_prediction_explains_nothing():
    assert explain.clauses("a <", {"a": 1}) == []
