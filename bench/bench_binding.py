"""What recording the executed code costs: a representative set of CPU falsifiers, run with
and without collection (pv.execution), and the ratio, in one run.

    python bench/bench_binding.py [--repeat 2] [-k EXPR]

Each configuration runs `pytest generated_tests -k EXPR --pv-device cpu --pv-no-ledger -p
no:randomly` in a fresh process (the same work: kernels, data pipeline, gates, a DDP launch with
two ranks, a checkpoint round trip); the baseline sets PV_EXECUTION=off, which collects nothing
(records made that way say so and are never fresh). Runs alternate (off, on, off, on, ...) so a
neighbour's load falls on both; the figure is the ratio of the medians of the wall times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ("softmax_kernel or rmsnorm_kernel or rope_kernel or cross_entropy_kernel or kv_cache_kernel "
           "or adamw_kernel or gqa_attention_kernel or input_gates or data_pipeline or sequence_packing "
           "or distributed_training or checkpoint_round_trip")


def once(selection: str, collect: bool) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("PV_EXECUTION", None)
    if not collect:
        env["PV_EXECUTION"] = "off"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "generated_tests", "-q", "-k", selection, "--pv-device",
                           "cpu", "--pv-no-ledger", "-p", "no:randomly", "-p", "no:cacheprovider"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"pytest exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("-k", dest="selection", default=DEFAULT)
    args = parser.parse_args(argv)
    off, on = [], []
    for _ in range(args.repeat):
        off.append(once(args.selection, collect=False))
        on.append(once(args.selection, collect=True))
    base, with_binding = statistics.median(off), statistics.median(on)
    print(f"without collection: {', '.join(f'{t:.1f}' for t in off)} s (median {base:.1f} s)")
    print(f"with collection:    {', '.join(f'{t:.1f}' for t in on)} s (median {with_binding:.1f} s)")
    print(f"overhead of recording the executed code: {with_binding / base:.3f}x ({(with_binding / base - 1) * 100:+.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
