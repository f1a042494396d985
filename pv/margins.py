"""Each falsifier cell's margin over its history, and the rule that flags a margin shrinking
toward zero: the early warning of the next silent bug (the bound still holds, by less each
commit).

A cell is (falsifier, subject, device, runtime). Its **history** is the margins of its records
that count (pv.identity) without a planted bug, in ledger (append) order, of the falsifier's
current definition (the `falsifier_sha256` of the deciding record: a changed prediction
measures something else), with
a number for the margin (a boolean-only prediction has none). Consecutive records of the same
commit are one point (the last of them): a `pv run --repeat 3` is not a trend.

**The shrinking rule** (`shrinking()`), with K = 5 and FRACTION = 0.5: a cell is flagged when
its last K points
- fall strictly, each below the one before,
- start above zero (it held with room), and
- end below FRACTION of where they started (not a wobble of a few percent).
So a margin going 1.0, 0.9, 0.7, 0.5, 0.45 is flagged; 1.0, 0.9, 0.95, 0.8, 0.4 is not (it rose
once); 1.0, 0.99, 0.98, 0.97, 0.96 is not (it lost 4 %). A cell that already FAILs is shown as
failing, not as drifting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable

K = 5
FRACTION = 0.5


@dataclass(frozen=True)
class Point:
    margin: float
    commit: str | None
    time_utc: str | None


def history(records: Iterable[Any], falsifier: str, device: str, subject: str | None,
            sha256: str | None, runtime: str | None = None, runtimes: list[str] | None = None,
            refuses: Callable[[Any], str | None] | None = None) -> list[Point]:
    """The margin points of one cell (see the module doc); `records` in ledger order. `runtime`:
    the cell's, of the falsifier's `runtimes` (a record naming none is the first one's, as in
    pv.lifecycle): another runtime's margins are another cell's history. `refuses`: why a record
    does not count as evidence (pv.identity.EvidenceCheck.refuses; None: it does): one that
    does not (a copy relabelled, a test edited) is no point of the history, or it could break a
    fall and keep the shrinking flag down. A record made before pv recorded what ran (no test
    identity) is a point while no record of the cell that has one comes before it: pv has
    written one on every record since, so such a record after it is not pv's."""
    from pv.identity import NO_IDENTITY
    from pv.runtimes import cell_runtime

    points: list[Point] = []
    identified = False  # a record of the cell with a test identity came before
    for r in records:
        if (r.falsifier, r.device, r.subject) != (falsifier, device, subject) or r.mutant is not None:
            continue
        if sha256 is not None and r.falsifier_sha256 != sha256:
            continue
        if runtimes and cell_runtime(r.runtime, runtimes) != runtime:
            continue
        if refuses is not None:
            why = refuses(r)
            if why is not None and (why != NO_IDENTITY or identified):
                continue
            identified = identified or r.test_sha256 is not None
        if r.margin is None or not math.isfinite(float(r.margin)):
            continue
        point = Point(float(r.margin), r.git_commit, r.time_utc)
        if points and point.commit is not None and points[-1].commit == point.commit:
            points[-1] = point  # one point per commit: the latest record of a run of them
        else:
            points.append(point)
    return points


def shrinking(margins: list[float], k: int = K, fraction: float = FRACTION) -> bool:
    """The shrinking rule of the module doc."""
    if len(margins) < k:
        return False
    window = margins[-k:]
    falling = all(later < earlier for earlier, later in zip(window, window[1:]))
    return falling and window[0] > 0 and window[-1] < fraction * window[0]


def sparkline(margins: list[float], *, width: int = 120, height: int = 28, flagged: bool = False) -> str:
    """A small inline SVG of the margins in order (no script, no external reference): a line,
    a dot on the latest point, and the zero line where the range crosses it."""
    if not margins:
        return '<svg class="spark" width="%d" height="%d" role="img" aria-label="no margin history"></svg>' % (
            width, height)
    lo, hi = min(min(margins), 0.0), max(max(margins), 0.0)
    span = (hi - lo) or 1.0
    pad = 3

    def xy(i: int, m: float) -> tuple[float, float]:
        x = pad + (width - 2 * pad) * (i / (len(margins) - 1) if len(margins) > 1 else 0.5)
        y = pad + (height - 2 * pad) * (1 - (m - lo) / span)
        return round(x, 1), round(y, 1)

    points = " ".join(f"{x},{y}" for x, y in (xy(i, m) for i, m in enumerate(margins)))
    colour = "#d9480f" if flagged else "#1c7ed6"
    zero_y = xy(0, 0.0)[1]
    last_x, last_y = xy(len(margins) - 1, margins[-1])
    label = f"margin over {len(margins)} commits: first {margins[0]:.4g}, latest {margins[-1]:.4g}"
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{label}">'
            f'<line x1="0" y1="{zero_y}" x2="{width}" y2="{zero_y}" stroke="#adb5bd" stroke-dasharray="2,2"/>'
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>'
            f'<circle cx="{last_x}" cy="{last_y}" r="2.5" fill="{colour}"/></svg>')
