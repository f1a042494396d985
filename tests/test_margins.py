"""pv.margins: a cell's margin history (one point per commit, current definition, no planted
bug) and the shrinking rule."""

from __future__ import annotations

from types import SimpleNamespace

from pv import margins


def rec(margin, commit, falsifier="F-1", device="cpu", subject=None, mutant=None, sha="s1"):
    return SimpleNamespace(falsifier=falsifier, device=device, subject=subject, mutant=mutant, margin=margin,
                           git_commit=commit, time_utc="t", falsifier_sha256=sha)


def test_shrinking_rule():
    assert margins.shrinking([1.0, 0.9, 0.7, 0.5, 0.45])
    assert margins.shrinking([3.0, 2.0, 1.0, 0.9, 0.7, 0.5, 0.45])  # only the last five count
    assert not margins.shrinking([1.0, 0.9, 0.95, 0.8, 0.4])  # rose once
    assert not margins.shrinking([1.0, 0.99, 0.98, 0.97, 0.96])  # a 4 % drift, not a trend to zero
    assert not margins.shrinking([0.9, 0.7, 0.5, 0.45])  # too short
    assert not margins.shrinking([-0.1, -0.2, -0.3, -0.4, -0.5])  # never held with room


def test_history_one_point_per_commit_of_the_current_definition():
    records = [rec(1.0, "a"), rec(0.9, "a"), rec(5.0, "b", sha="old"), rec(0.8, "b"), rec(None, "c"),
               rec(-3.0, "c", mutant="bug"), rec(0.7, "d", device="cuda"), rec(0.6, None), rec(0.5, None)]
    points = margins.history(records, "F-1", "cpu", None, "s1")
    assert [p.margin for p in points] == [0.9, 0.8, 0.6, 0.5]


def test_sparkline_is_inline_svg_without_script():
    svg = margins.sparkline([1.0, 0.5, -0.2], flagged=True)
    assert svg.startswith("<svg") and "<script" not in svg and "polyline" in svg and "#d9480f" in svg
    assert 'aria-label="no margin history"' in margins.sparkline([])
