"""What pv can read of a corpus of provable-contracts files (the figures in docs/corpus.md).

    python bench/corpus_report.py [CORPUS_DIR]      (default: ../shared/corpus next to the repo)

Runs `pv validate --dialect provable-contracts` in a fresh process (timed), then prints the
dialect report per sub-corpus and for the whole: how many files load, how many pass pv's
strict schema, how many predictions parse in pv's expression language, and the most common
problems. Nothing from the corpus is copied; only counts are printed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT = REPO.parent / "shared" / "corpus"
PV = [sys.executable, "-c", "from pv.cli import main; main()", "validate", "--dialect", "provable-contracts"]


def run(target: Path) -> tuple[dict, float, int]:
    start = time.perf_counter()
    done = subprocess.run([*PV, "--format", "json", str(target)], capture_output=True, text=True, cwd=REPO)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"pv validate failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return json.loads(done.stdout), elapsed, done.returncode


def pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f}%)" if d else "0/0"


def summarise(name: str, report: dict, elapsed: float, rc: int) -> None:
    d = report["dialect"]
    print(f"## {name}: {d['files']} files, pv validate --dialect provable-contracts in {elapsed:.2f} s (exit {rc})")
    print(f"  YAML loads as a mapping           {pct(d['loaded'], d['files'])}")
    print(f"  valid under pv's strict schema    {pct(d['strict_valid'], d['files'])}")
    print(f"  metadata.id present               {pct(d['with_metadata_id'], d['files'])}")
    print(f"  have falsification_tests          {pct(d['with_falsification_tests'], d['files'])}; "
          f"{d['falsifiers']} tests, {d['falsifiers_with_id']} with id, "
          f"{d['duplicate_falsifier_ids']} ids used in more than one test")
    print(f"  predictions parse in pv           {pct(d['predictions_parse'], d['predictions'])} "
          f"({d['predictions_boolean']} boolean)")
    print(f"  formulas parse in pv              {pct(d['formulas_parse'], d['formulas'])}")
    print(f"  falsifiers bound to a check       {pct(d['falsifiers_with_check'], d['falsifiers'])}")
    print(f"  proof obligations with an id      {pct(d['obligations_with_id'], d['obligations'])}")
    if d["load_problems"]:
        print(f"  files that do not load            {d['load_problems']}")
    top = lambda m, n=6: ", ".join(f"{k} {v}" for k, v in list(m.items())[:n])  # noqa: E731
    print(f"  sections pv ignores (files)       {top(d['sections_ignored'])}")
    print(f"  keys pv ignores (times)           {top(d['keys_ignored'])}")
    print("  most common strict-schema problems (times):")
    for what, n in list(d["problems"].items())[:8]:
        examples = d["examples"].get(what)
        more = f"  e.g. {', '.join(list(examples)[:4])}" if examples else ""
        print(f"    {n:5d}  {what}{more}")
    print("  why predictions do not parse (times):")
    for what, n in list(d["prediction_errors"].items())[:6]:
        print(f"    {n:5d}  {what}")
    print(f"  diagnostics: {report['errors']} errors, {report['warnings']} warnings")
    print()


def main() -> int:
    corpus = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    if not corpus.is_dir():
        sys.exit(f"no corpus at {corpus}")
    parts = sorted(p for p in corpus.iterdir() if p.is_dir())
    for part in parts:
        summarise(part.name, *run(part))
    summarise("whole corpus", *run(corpus))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
