"""Fuzz pv's front door: mutated real contracts and random predictions.

    python bench/fuzz_contracts.py [--cases 100000] [--seed 0] [--jobs 2] [--cli 100] [--json out.json]

Each case is one of:

* a **mutated real contract** — a file of contracts/ or of the shared measurement corpus
  (`--corpus`, default ../shared/corpus next to the repository) with 1 to 3 mutations: a line
  deleted, duplicated or re-indented, the text cut short, bytes inserted, a value replaced by a
  hostile one (`!!bool foo`, `1e400`, a 400-digit integer, `.nan`, an alias, a long string, ...),
  a prediction replaced by a random one, a tolerance of 1e300. It is loaded and validated in
  process (pv.loader, pv.validation) and its parseable predictions judged (pv.expr) on random
  observations; a sample of `--cli` cases also runs `pv validate` as a user runs it.
* a **random prediction** — from a small grammar of the expression language, a quarter of
  them built from tautology and contradiction templates (`A or not A`, `e <= inf`, `e*e >= 0`,
  a dozen comparisons covering the line, ...). pv.vacuity decides it, and an **independent
  oracle** judges it with pv.expr on a grid of special doubles (0, ±0, ±1, tiny, huge, ±inf,
  1e300, the prediction's own numbers and their neighbours) plus random values, NaN excluded
  as pv.vacuity excludes it (the harness judges a NaN observation false whatever the prediction).

Counted: **tracebacks** (any exception out of pv, or a PV199 internal-error diagnostic, or a
CLI exit status other than 0/1/2 or "Traceback" in its output), **hangs** (a case over
`--timeout` CPU seconds; a watchdog also ends the process if one runs 30x that on the wall clock), **false accepts**
(accepted, yet neither the oracle's grid nor a replay of pv.vacuity's own failing observation
through pv.expr makes it false), **false refusals** (refused as "cannot fail", yet the oracle
finds an observation that fails it — or "cannot pass", yet one that passes it), and undecided
predictions (PV407). Exit status 1 if any traceback, hang or false accept/refusal was found.
"""

from __future__ import annotations

import argparse
import faulthandler
import itertools
import json
import math
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pv import expr, vacuity  # noqa: E402

NAMES = ("x", "y", "z")
NUMBERS = ("0", "1", "-1", "2", "0.5", "3", "10", "1e300", "1e-300", "1e308", "1.5e-5", "inf", "pi", "e",
           "1e400", "7", "100", "0.1", "1" + "0" * 400, "2 ** 53")
FUNCTIONS = ("ln", "log", "log2", "log10", "exp", "sqrt", "abs")
COMPARE = ("<", "<=", ">", ">=", "==", "!=")
ARITH = ("+", "-", "*", "/", "**", "%")
HOSTILE = ("!!bool foo", "!!python/object:os.system", "1e400", "1" + "0" * 400, ".nan", ".inf", "-.inf", "~",
           "[]", "{}", "'" + "a" * 5000 + "'", "*nowhere", "&a [*a]", "\"\\t\"", "ñ", "0x1F", "2026-13-45",
           "yes", "no", "{rtol: 1e300, atol: 1e300}", "\"x < 1 # and x > 100\"", "-1", "1e-400", "'\\u202e'",
           "\"x == x\"", "\"val_loss <= inf\"", "!!binary aGk=", "? [a]", "| \n  text", "\x00", "\ufeff")
SPECIAL_DOUBLES = (0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, 10.0, 1e-300, -1e-300, 5e-324, 1e300, -1e300,
                   1.7976931348623157e308, -1.7976931348623157e308, math.inf, -math.inf, 1e-5, 100.0, 7.0)


# --- random predictions ------------------------------------------------------------------------


def number(rng: random.Random) -> str:
    return rng.choice(NUMBERS)


def term(rng: random.Random, depth: int) -> str:
    roll = rng.random()
    if depth <= 0 or roll < 0.3:
        return rng.choice(NAMES) if rng.random() < 0.65 else number(rng)
    if roll < 0.55:
        return f"{term(rng, depth - 1)} {rng.choice(ARITH)} {term(rng, depth - 1)}"
    if roll < 0.7:
        return f"{rng.choice(FUNCTIONS)}({term(rng, depth - 1)})"
    if roll < 0.8:
        args = ", ".join(term(rng, depth - 1) for _ in range(rng.randint(2, 3)))
        return f"{rng.choice(('min', 'max'))}({args})"
    if roll < 0.9:
        return f"-{term(rng, depth - 1)}"
    return f"({term(rng, depth - 1)})"


def predicate(rng: random.Random, depth: int) -> str:
    roll = rng.random()
    if depth <= 0 or roll < 0.5:
        links = rng.choice((1, 1, 1, 2))
        parts = [term(rng, 2)]
        for _ in range(links):
            parts += [rng.choice(COMPARE), term(rng, 2)]
        return " ".join(parts)
    if roll < 0.8:
        op = rng.choice((" and ", " or "))
        return op.join(f"({predicate(rng, depth - 1)})" for _ in range(rng.randint(2, 3)))
    if roll < 0.9:
        return f"not ({predicate(rng, depth - 1)})"
    return f"{predicate(rng, depth - 1)} {rng.choice(('or', 'and'))} {rng.choice(('1', '0', 'true', 'false', 'x'))}"


def template(rng: random.Random) -> str:
    """Forms that cannot fail or cannot pass (and near misses that can), after the attack."""
    e, a = term(rng, 1), predicate(rng, 0)
    c = rng.choice(("0", "1", "2", "0.5", "-1", "10"))
    forms = [f"{a} or not ({a})", f"{e} <= inf", f"{e} >= -inf", f"({e}) * ({e}) >= 0", f"({e}) ** 0 == 1",
             f"max({e}, {c}) >= {c}", f"min({e}, {c}) <= {c}", f"{e} < {c} or {e} >= {c}", f"{a} or 1",
             f"abs({e}) >= 0", f"not ({a} and not ({a}))", f"{e} == {e}", f"{e} != {e}", f"{a} and not ({a})",
             f"{e} < {e} + 1", f"{e} - {e} == 0", f"sqrt({e}) >= 0", f"exp({e}) > 0", f"x > {c} or x < {c}",
             " or ".join(f"x > {i}" for i in range(rng.randint(12, 16))) + rng.choice((" or x <= 0", " or x < 0")),
             " and ".join(f"{e} == {e}" for _ in range(rng.randint(10, 14)))]
    return rng.choice(forms)


def random_prediction(rng: random.Random) -> str:
    return template(rng) if rng.random() < 0.25 else predicate(rng, rng.choice((0, 1, 1, 2)))


# --- the oracle -----------------------------------------------------------------------------------


def verdict(parsed: expr.Expression, env: dict) -> bool | None:
    """What the harness would judge: True, False, or None (an ERROR). Raises for a traceback."""
    try:
        return expr.judge(parsed, env).holds
    except (expr.ExprError, expr.EvalError, TypeError, ArithmeticError):  # what pv.harness catches
        return None


def oracle(parsed: expr.Expression, rng: random.Random, randoms: int = 200) -> tuple[dict | None, dict | None]:
    """(an observation judged false, one judged true) found by brute force, or None each."""
    names = sorted(parsed.names)
    values = list(SPECIAL_DOUBLES)
    for node in __import__("ast").walk(parsed.tree):
        if type(node).__name__ == "Constant" and isinstance(node.value, (int, float)):
            try:
                c = float(node.value)
            except OverflowError:
                continue
            values += [c, -c, math.nextafter(c, math.inf), math.nextafter(c, -math.inf), c + 1, c - 1]
    per_name = values if len(names) == 1 else values[:16] if len(names) == 2 else values[:9]
    grid = itertools.product(per_name, repeat=len(names))
    extra = ([rng.choice(values) if rng.random() < 0.5 else rng.uniform(-1e3, 1e3) * 10 ** rng.randint(-20, 20)
              for _ in names] for _ in range(randoms))
    found: dict[bool, dict | None] = {False: None, True: None}
    for combo in itertools.chain(grid, extra):
        env = dict(zip(names, combo))
        for candidate in (env, {k: bool(v) if v in (0.0, 1.0) else v for k, v in env.items()}):
            v = verdict(parsed, candidate)
            if v is not None and found[v] is None:
                found[v] = candidate
        if found[False] is not None and found[True] is not None:
            break
    return found[False], found[True]


# --- the cases ------------------------------------------------------------------------------------


def prediction_case(rng: random.Random, stats: Counter, examples: dict) -> None:
    text = random_prediction(rng)
    try:
        parsed = expr.parse(text)
    except expr.ExprError:
        stats["prediction: not in the language"] += 1
        return
    decision = vacuity.decide(parsed)  # must never raise
    for _ in range(3):
        verdict(parsed, {n: rng.choice(SPECIAL_DOUBLES) for n in parsed.names})
    if not expr.is_boolean(parsed) or not parsed.names:
        stats["prediction: not boolean / no observation"] += 1
        return
    fails_at, passes_at = oracle(parsed, rng)
    if decision.undecided:
        stats["prediction: undecided (PV407)"] += 1
        return
    if decision.refused:
        stats["prediction: refused"] += 1
        cannot_pass = decision.refused in (vacuity.CONTRADICTION, vacuity.NEVER_DEFINED)
        if decision.refused == vacuity.NEVER_DEFINED and fails_at is not None:
            stats["FALSE REFUSAL"] += 1  # "never evaluable", yet it evaluated (to false)
            examples.setdefault("false refusal", []).append((text, decision.refused[:40], fails_at))
        witness = passes_at if cannot_pass else fails_at
        if witness is not None:
            stats["FALSE REFUSAL"] += 1
            examples.setdefault("false refusal", []).append((text, decision.refused[:40], witness))
        return
    stats["prediction: accepted"] += 1
    replay_fails = decision.fails_at is not None and verdict(parsed, decision.fails_at) is False
    replay_passes = decision.passes_at is not None and verdict(parsed, decision.passes_at) is True
    if fails_at is None and not replay_fails:
        stats["FALSE ACCEPT"] += 1
        examples.setdefault("false accept", []).append((text, decision.fails_at))
    elif fails_at is None:
        stats["prediction: accepted, failing value found only by pv.vacuity (replayed)"] += 1
    if passes_at is None and not replay_passes:
        stats["FALSE ACCEPT"] += 1
        examples.setdefault("false accept (cannot pass)", []).append((text, decision.passes_at))


def mutate(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(9)
        i = rng.randrange(len(lines)) if lines else 0
        if kind == 0 and lines:
            del lines[i]
        elif kind == 1 and lines:
            lines.insert(i, lines[i])
        elif kind == 2 and lines:
            lines[i] = rng.choice(("  ", "", "\t", "    ")) + lines[i].lstrip() if rng.random() < 0.5 else lines[i][2:]
        elif kind == 3:
            cut = "\n".join(lines)
            lines = cut[: rng.randrange(len(cut) + 1)].split("\n")
        elif kind == 4 and lines:
            pos = rng.randrange(len(lines[i]) + 1)
            lines[i] = lines[i][:pos] + rng.choice(("\x00", "\ufeff", ":", "- ", "{", "[", "'", '"', "#", "&x ", "*x",
                                                     "\u202e", "\t", "!!", "%")) + lines[i][pos:]
        elif kind in (5, 6) and lines and ":" in lines[i]:
            key = lines[i].split(":", 1)[0]
            lines[i] = f"{key}: {rng.choice(HOSTILE)}"
        elif kind == 7:
            at = [j for j, line in enumerate(lines) if "prediction:" in line]
            if at:
                j = rng.choice(at)
                lines[j] = lines[j].split("prediction:")[0] + "prediction: " + json.dumps(random_prediction(rng))
        else:
            at = [j for j, line in enumerate(lines) if line.strip().startswith("check:")]
            if at:
                j = rng.choice(at)
                indent = lines[j][: len(lines[j]) - len(lines[j].lstrip())]
                value = rng.choice(("1e300", "0", "-1", ".inf", "1e-3", "0.5"))
                lines.insert(j + 1, f"{indent}tolerance:\n{indent}  source: fuzz\n{indent}  float32: "
                                    f"{{rtol: {value}, atol: {value}}}")
    return "\n".join(lines)


def contract_case(rng: random.Random, sources: list[tuple[str, str]], workspace: Path, stats: Counter,
                  examples: dict, cli: bool) -> None:
    from pv.config import load_workspace
    from pv.loader import load_contract
    from pv.validation import validate

    name, text = rng.choice(sources)
    mutated = mutate(text, rng)
    path = workspace / "contracts" / name
    for old in (workspace / "contracts").iterdir():
        old.unlink()
    try:
        path.write_text(mutated, encoding="utf-8", errors="surrogatepass")
    except (UnicodeEncodeError, ValueError):
        path.write_bytes(mutated.encode("utf-8", "replace"))
    loaded, _ = load_contract(path)
    report = validate(load_workspace(workspace), [path])
    internal = [d for d in report.diagnostics if d.code == "PV199"]
    if internal:
        stats["TRACEBACK"] += 1
        examples.setdefault("traceback", []).append((name, str(internal[0])[:300]))
    stats["contract: valid" if report.errors == 0 else "contract: refused"] += 1
    data = getattr(loaded, "data", None)
    for f in (data.get("falsification_tests") or []) if isinstance(data, dict) else []:
        if isinstance(f, dict) and isinstance(f.get("prediction"), str):
            try:
                parsed = expr.parse(f["prediction"])
            except expr.ExprError:
                continue
            vacuity.decide(parsed)
            verdict(parsed, {n: rng.choice(SPECIAL_DOUBLES) for n in parsed.names})
    if cli:
        stats["cli runs"] += 1
        try:
            proc = subprocess.run([sys.executable, "-c", "from pv.cli import main; main()", "validate", str(path)],
                                  cwd=workspace, capture_output=True, text=True, timeout=120,
                                  env={**os.environ, "PYTHONPATH": str(REPO)})
        except subprocess.TimeoutExpired:
            stats["HANG"] += 1
            examples.setdefault("hang", []).append((name, "cli"))
            return
        if proc.returncode not in (0, 1, 2) or "Traceback" in proc.stdout + proc.stderr:
            stats["TRACEBACK"] += 1
            examples.setdefault("traceback", []).append((name, f"cli rc {proc.returncode}: {proc.stderr[-300:]}"))


def corpus_sources(corpus: Path | None) -> list[tuple[str, str]]:
    paths = sorted((REPO / "contracts").glob("*.yaml"))
    if corpus is not None and corpus.is_dir():
        paths += sorted(corpus.rglob("*.yaml"))
    return [(p.name if p.name.endswith("-v1.yaml") else "fuzzed-contract-v1.yaml", p.read_text(errors="replace"))
            for p in paths]


def make_workspace(root: Path) -> Path:
    (root / "contracts").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.pv]\ncontracts_dir = "contracts"\ncheck_packages = ["pvlab.falsifiers"]\n'
                                         'code_packages = ["pvlab.runtime"]\nmutants_module = "pvlab.falsifiers.mutants"\n'
                                         'subject_param = "checkpoint"\n')
    (root / "pvlab").symlink_to(REPO / "pvlab")
    return root


def run(seed: int, cases: int, cli_every: int, corpus: Path | None, timeout: float,
        progress: Path | None = None) -> tuple[Counter, dict, float]:
    rng = random.Random(seed)
    stats: Counter = Counter()
    examples: dict = {}
    sources = corpus_sources(corpus)
    slowest = 0.0
    faulthandler.dump_traceback_later(timeout * 30, exit=True)  # a real hang ends the run, loudly (wall clock)
    with tempfile.TemporaryDirectory() as tmp:
        workspace = make_workspace(Path(tmp))
        for n in range(cases):
            start = time.process_time()  # CPU seconds (z3 runs in this process): a busy machine is no hang
            try:
                if n % 2:
                    contract_case(rng, sources, workspace, stats, examples, cli=cli_every > 0 and n % cli_every == 1)
                else:
                    prediction_case(rng, stats, examples)
            except Exception as exc:  # noqa: BLE001 - this is what we count
                stats["TRACEBACK"] += 1
                examples.setdefault("traceback", []).append((seed, n, f"{type(exc).__name__}: {exc}"[:300]))
            took = time.process_time() - start
            slowest = max(slowest, took)
            if took > timeout:
                stats["HANG"] += 1
                examples.setdefault("hang", []).append((seed, n, round(took, 1)))
            faulthandler.dump_traceback_later(timeout * 30, exit=True)
            stats["cases"] += 1
            if progress is not None and (n % 100 == 99 or n == cases - 1):
                (progress / f"job{seed}.json").write_text(json.dumps({"stats": stats, "examples": examples,
                                                                      "slowest": slowest}, default=str))
    faulthandler.cancel_dump_traceback_later()
    return stats, {k: v[:5] for k, v in examples.items()}, slowest


def _job(args: tuple) -> tuple[Counter, dict, float]:
    return run(*args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--cli", type=int, default=100, help="how many cases also run the CLI")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds for one case before it is a hang")
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "corpus"),
                        help="a folder of real contracts to mutate beside contracts/ (`none`: contracts/ only)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--progress", type=Path, help="a folder where each job writes its counts every 100 cases")
    args = parser.parse_args(argv)
    # A corpus that is not there is an error, not a silent fall-back to contracts/ alone: the
    # figure would claim cases it never drew.
    args.corpus = None if args.corpus == "none" else Path(args.corpus)
    if args.corpus is not None and not any(args.corpus.rglob("*.yaml")):
        parser.error(f"--corpus {args.corpus}: no *.yaml under it (give the corpus folder, or `--corpus none`)")
    cli_every = max(1, args.cases // args.cli) if args.cli else 0
    per_job = [(args.seed * 1000 + j, args.cases // args.jobs + (j < args.cases % args.jobs), cli_every, args.corpus,
                args.timeout, args.progress) for j in range(args.jobs)]
    start = time.perf_counter()
    if args.jobs == 1:
        results = [run(*per_job[0])]
    else:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            results = pool.map(_job, per_job)
    stats: Counter = Counter()
    examples: dict = {}
    for s, e, _ in results:
        stats.update(s)
        for k, v in e.items():
            examples.setdefault(k, []).extend(v)
    summary = {"cases": stats["cases"], "corpus": None if args.corpus is None else str(args.corpus),
               "sources": len(corpus_sources(args.corpus)), "seconds": round(time.perf_counter() - start, 1),
               "slowest_case_s": round(max(r[2] for r in results), 2),
               "tracebacks": stats["TRACEBACK"], "hangs": stats["HANG"], "false_accepts": stats["FALSE ACCEPT"],
               "false_refusals": stats["FALSE REFUSAL"], "counts": dict(sorted(stats.items())), "examples": examples}
    print(json.dumps(summary, indent=2, default=str))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=str))
    bad = stats["TRACEBACK"] + stats["HANG"] + stats["FALSE ACCEPT"] + stats["FALSE REFUSAL"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
