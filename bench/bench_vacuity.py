"""How long pv.vacuity takes to decide every prediction of the repository's contracts.

    python bench/bench_vacuity.py [--runs 5]

Prints the best in-process time (cold cache each run) to decide all of contracts/*.yaml's
predictions, and whether z3 was imported doing it (it should not be: honest predictions are
settled by the concrete witness search, see pv/vacuity.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def predictions(root: Path = REPO) -> list[str]:
    out = []
    for path in sorted((root / "contracts").glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        out += [f["prediction"] for f in data.get("falsification_tests") or [] if isinstance(f, dict)
                and isinstance(f.get("prediction"), str)]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    from pv import vacuity

    texts = predictions()
    best = float("inf")
    for _ in range(args.runs):
        vacuity._decide_text.cache_clear()
        start = time.perf_counter()
        undecided = sum(vacuity.decide(t).undecided is not None for t in texts)
        best = min(best, time.perf_counter() - start)
    print(f"{len(texts)} predictions decided in {best * 1000:.1f} ms (best of {args.runs}); "
          f"undecided {undecided}; z3 imported: {'z3' in sys.modules}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
