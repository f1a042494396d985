"""pv.margins: a cell's margin history (one point per commit, current definition, no planted
bug) and the shrinking rule."""

from __future__ import annotations

from types import SimpleNamespace

from pv import margins


def rec(margin, commit, falsifier="F-1", device="cpu", subject=None, mutant=None, sha="s1", runtime=None,
        test_sha256="t4"):
    return SimpleNamespace(falsifier=falsifier, device=device, subject=subject, mutant=mutant, margin=margin,
                           git_commit=commit, time_utc="t", falsifier_sha256=sha, runtime=runtime,
                           test_sha256=test_sha256)


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


def test_attack_a_runtimes_margins_never_fill_another_runtimes_history():
    """A falsifier run on two runtimes at every commit: the pvlab cell's margin falls 1.0 ... 0.45
    while the transformers cell's holds at 1.0. One history for both (one point per commit: the
    last record of it, here always transformers') showed pvlab's row a steady 1.0, and the
    shrinking flag never rose. Each runtime's cell has its own history (a record naming no
    runtime counts as the first one's, as in pv.lifecycle)."""
    falling = [1.0, 0.9, 0.7, 0.5, 0.45]
    records = []
    for i, m in enumerate(falling):
        records += [rec(m, str(i), runtime="pvlab" if i else None), rec(1.0, str(i), runtime="transformers")]
    runtimes = ["pvlab", "transformers"]
    pvlab = [p.margin for p in margins.history(records, "F-1", "cpu", None, "s1", runtime="pvlab", runtimes=runtimes)]
    assert pvlab == falling and margins.shrinking(pvlab)
    other = margins.history(records, "F-1", "cpu", None, "s1", runtime="transformers", runtimes=runtimes)
    assert [p.margin for p in other] == [1.0] * 5


def test_attack_a_record_that_does_not_count_never_enters_the_history():
    """A margin falling 1.0 ... 0.45, then a record that does not count (pv.identity refuses it:
    a copy relabelled, a test edited) with margin 2.0 at a new commit: it broke the fall, so the
    flag went down, though the cell's deciding record still held by 0.45."""
    records = [rec(m, str(i)) for i, m in enumerate([1.0, 0.9, 0.7, 0.5, 0.45])] + [rec(2.0, "forged")]
    forged = records[-1]
    kept = margins.history(records, "F-1", "cpu", None, "s1", refuses=lambda r: "relabelled" if r is forged else None)
    assert [p.margin for p in kept] == [1.0, 0.9, 0.7, 0.5, 0.45] and margins.shrinking([p.margin for p in kept])


def test_records_made_before_test_identity_are_points_until_one_with_it():
    """Records made before pv recorded what ran never count as evidence, but they are the cell's
    honest past: points of its history, until a record with a test identity. One without it
    after that is not pv's (stripping the identity of a copy must not let it in)."""
    from pv.identity import NO_IDENTITY

    old = [rec(m, f"o{i}", test_sha256=None) for i, m in enumerate([1.0, 0.9, 0.7])]
    new = [rec(m, f"n{i}") for i, m in enumerate([0.5, 0.45])]
    stripped = rec(2.0, "forged", test_sha256=None)
    refuses = lambda r: NO_IDENTITY if r.test_sha256 is None else None  # noqa: E731
    kept = margins.history([*old, *new, stripped], "F-1", "cpu", None, "s1", refuses=refuses)
    assert [p.margin for p in kept] == [1.0, 0.9, 0.7, 0.5, 0.45]
