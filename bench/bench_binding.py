"""What recording the executed code costs: a representative set of CPU falsifiers, run with
and without collection (pv.execution), and the ratio, in one run.

    python bench/bench_binding.py [--repeat 2] [-k EXPR] [--json PATH]

Each configuration runs `pytest generated_tests -k EXPR --pv-device cpu --pv-no-ledger -p
no:randomly` in a fresh process (the same work: kernels, data pipeline, gates, DDP launches
with two ranks each, a checkpoint round trip); the baseline sets PV_EXECUTION=off, which
collects nothing (records made that way say so and are never fresh). Runs alternate (off, on,
off, on, ...) so a neighbour's load falls on both; with --side-by-side each repeat starts the two
together, so both run under the same load for the same minutes.

Two figures, each the ratio of the medians:

* CPU time: user + system seconds of the whole process tree (pytest and every rank or
  subprocess it started and waited for). On a machine shared with other work this is the
  fair figure: another process's load stretches the wall clock of whichever run it overlaps,
  not the CPU seconds a run spends.
* wall time: what a user waits, on a quiet machine the same ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ("softmax_kernel or rmsnorm_kernel or rope_kernel or cross_entropy_kernel or kv_cache_kernel "
           "or adamw_kernel or gqa_attention_kernel or input_gates or data_pipeline or sequence_packing "
           "or distributed_training or checkpoint_round_trip")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def once(selection: str, collect: bool, tests: str = "generated_tests") -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process tree, pytest's summary line) of one run."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("PV_EXECUTION", None)
    if not collect:
        env["PV_EXECUTION"] = "off"
    cpu, start = _children_cpu(), time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", tests, "-q", "-k", selection, "--pv-device",
                           "cpu", "--pv-no-ledger", "-p", "no:randomly", "-p", "no:cacheprovider"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed, spent = time.perf_counter() - start, _children_cpu() - cpu
    if done.returncode not in (0, 1):
        raise SystemExit(f"pytest exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    summary = next((line for line in reversed(done.stdout.splitlines()) if " passed" in line or " failed" in line), "")
    return elapsed, spent, summary.strip("= ")


def paired(selection: str, tests: str = "generated_tests") -> dict[str, tuple[float, float, str]]:
    """One run without and one with collection started together and run side by side: on a
    machine shared with other work both see the same neighbours for the same minutes. Each
    one's CPU time is its own process tree's (os.wait4: the process and every descendant it
    waited for), so the two do not mix."""
    started = {}
    for mode in ("off", "on"):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        env.pop("PV_EXECUTION", None)
        if mode == "off":
            env["PV_EXECUTION"] = "off"
        process = subprocess.Popen([sys.executable, "-m", "pytest", tests, "-q", "-k", selection, "--pv-device",
                                    "cpu", "--pv-no-ledger", "-p", "no:randomly", "-p", "no:cacheprovider"],
                                   cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        started[mode] = (process, time.perf_counter())
    out = {}
    for mode, (process, start) in started.items():
        stdout = process.stdout.read() if process.stdout else ""
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        if code not in (0, 1):
            raise SystemExit(f"pytest ({mode}) exited {code}:\n{stdout[-3000:]}")
        summary = next((line for line in reversed(stdout.splitlines()) if " passed" in line or " failed" in line), "")
        out[mode] = (elapsed, usage.ru_utime + usage.ru_stime, summary.strip("= "))
    return out


def _ratio(off: list[float], on: list[float]) -> float:
    return statistics.median(on) / statistics.median(off)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("-k", dest="selection", default=DEFAULT)
    parser.add_argument("--tests", default="generated_tests", help="the test path pytest collects")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--side-by-side", action="store_true",
                        help="run each repeat's two configurations at the same time (a shared machine)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    runs: dict[str, dict[str, list[float]]] = {"off": {"wall": [], "cpu": []}, "on": {"wall": [], "cpu": []}}
    summary = ""
    for _ in range(args.repeat):
        pair = paired(args.selection, args.tests) if args.side_by_side else None
        for mode in ("off", "on"):
            if pair is not None:
                wall, cpu, summary = pair[mode]
            else:
                wall, cpu, summary = once(args.selection, collect=mode == "on", tests=args.tests)
            runs[mode]["wall"].append(wall)
            runs[mode]["cpu"].append(cpu)
            print(f"  {mode:3s} wall {wall:7.1f} s  cpu {cpu:7.1f} s  ({summary})", flush=True)
    figures = {kind: _ratio(runs["off"][kind], runs["on"][kind]) for kind in ("cpu", "wall")}
    for label, mode in (("without collection", "off"), ("with collection", "on")):
        for kind in ("cpu", "wall"):
            times = runs[mode][kind]
            print(f"{label:19s} {kind:4s}: {', '.join(f'{t:.1f}' for t in times)} s (median {statistics.median(times):.1f} s)")
    for kind in ("cpu", "wall"):
        print(f"overhead of recording the executed code, {kind} time: {figures[kind]:.3f}x "
              f"({(figures[kind] - 1) * 100:+.1f} %)")
    if args.json:
        args.json.write_text(json.dumps({"selection": args.selection, "runs": runs, "ratio": figures,
                                         "pytest": summary}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
