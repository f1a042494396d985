"""pv.diagnostics: the one "did you mean" rule that validate's checks share."""

from __future__ import annotations

import difflib

from pv.diagnostics import did_you_mean


def test_suggests_the_closest_candidate():
    assert did_you_mean("predicton", ["rule", "prediction", "params"], "see the docs") == "did you mean 'prediction'?"


def test_falls_back_when_nothing_is_close():
    assert did_you_mean("zzz", ["rule", "prediction"], "see the docs") == "see the docs"
    assert did_you_mean("rule", [], "see the docs") == "see the docs"


def test_cutoff_decides_how_close_is_close_enough():
    # "abcde" against "abcdxy": 4 of 11 characters paired, similarity 8/11 = 0.727
    assert round(difflib.SequenceMatcher(None, "abcde", "abcdxy").ratio(), 3) == 0.727
    assert did_you_mean("abcde", ["abcdxy"], "none") == "did you mean 'abcdxy'?"
    assert did_you_mean("abcde", ["abcdxy"], "none", cutoff=0.75) == "none"
