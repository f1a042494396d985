"""How long pv.vacuity takes to decide every prediction of the repository's contracts.

    python bench/bench_vacuity.py [--runs 5]
    python bench/bench_vacuity.py --prediction "e >= max(7 / 0.5, 1e-300 ** y) != sqrt(z / 3)"

Prints the best in-process time (cold cache each run) to decide all of contracts/*.yaml's
predictions, the z3 resource units they spent, and whether z3 was imported doing it (it should
not be: honest predictions are settled by the concrete witness search, see pv/vacuity.py).
With --prediction: the CPU seconds, solver calls and resource units one prediction costs.
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
    parser.add_argument("--prediction", help="decide this one prediction and print its cost")
    args = parser.parse_args(argv)
    from pv import vacuity

    if args.prediction:
        start = time.process_time()
        decision = vacuity.decide(args.prediction)
        verdict = decision.refused or (f"undecided: {decision.undecided}" if decision.undecided else "can fail and pass")
        print(f"{time.process_time() - start:.2f} s CPU, {decision.solver_calls} solver calls, "
              f"{decision.solver_units:,} resource units (budget {vacuity.SOLVER_BUDGET:,}): {verdict}")
        return 0

    texts = predictions()
    best = float("inf")
    for _ in range(args.runs):
        vacuity._decide_text.cache_clear()
        start = time.perf_counter()
        decisions = [vacuity.decide(t) for t in texts]
        best = min(best, time.perf_counter() - start)
    undecided = sum(d.undecided is not None for d in decisions)
    print(f"{len(texts)} predictions decided in {best * 1000:.1f} ms (best of {args.runs}); "
          f"undecided {undecided}; solver calls {sum(d.solver_calls for d in decisions)}, "
          f"resource units {sum(d.solver_units for d in decisions):,}; z3 imported: {'z3' in sys.modules}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
