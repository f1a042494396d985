"""pv's own mutation score: plant small bugs in pv's core modules and count those its tests kill.

    python scripts/mutation_score.py [--sample 320] [--seed 2024] [--results FILE.jsonl] [--jobs 1]
                                     [--modules lifecycle,ledger,...] [--rerun-survivors] [--json out.json]

The mutants are pv's own (pv.automutate.operators: libcst sites with ids that stay stable across
unrelated edits; docstrings, annotations, imports and `# pragma: no mutate` lines are never
mutated). Every site of the core modules is listed, shuffled with the seed, and the first
`--sample` kept (a larger sample extends a smaller one).

How one run goes, in a single Python process (no pytest start-up per mutant):

1. pytest collects the test pool (TEST_POOL: pv's tests less NOT_IN_POOL) once; this script is the plugin that replaces its
   run loop, so every test module is imported before any mutant exists.
2. Coverage: a forked child runs every collected test once under coverage.py with one context
   per test (its node id), records each test's outcome and time, and the parent maps each
   line of each core module to the tests that executed it (cached next to the results file,
   keyed by the digest of the sources and tests). A test that fails unmutated is never used.
3. Each mutant runs in its own forked child: the child patches the module in place and runs,
   its mirror file's tests first, then the quickest, stopping at the first failure (`-x`),
   only the tests that executed
   the mutated lines (a mutated default: the tests that ran its function; a module-level or
   class-body mutant: every test that ran any line of the module). A failure, an error or
   running past the time limit (10 s + 3 x those tests' unmutated time) kills the mutant;
   a mutant no test reaches is `uncovered` (a survivor no test ran).
4. Each verdict is appended to the results file (JSON lines) as it comes, with the digest of
   the module's source: an interrupted run, started again with the same arguments, runs only
   what is missing; `--rerun-survivors` runs the survivors again (after tests were added).

Patching in place: the child execs the mutated source into the module's own namespace. A
mutant inside a function swaps the new code object (`__code__`, defaults) into the original
function and puts every other object back, so identities hold and a caller holding the
function (`from pv.expr import parse` in another module or in a test) runs the mutant too. A
mutant at module level or in a class body gives its statement's names their new values, and
so every later top-level statement that reads one of them at import (a model annotated with
a mutated enum is rebuilt, as a fresh import would); everything else is put back. Each
changed name is rebound wherever pv's or the tests' modules imported it. What other modules
derived from the old objects at their own import (an instance, a copy under another name)
stays old: the figure is a lower bound.

Equivalent mutants (no test can tell them from the original) are listed, each with a reason,
in scripts/mutation_equivalents.toml by site id; the score is killed / (sampled - equivalent).
Tests run in-process here, so a test that runs pv in a subprocess never sees a mutant: the
figure is a lower bound on what the suite kills.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import difflib
import hashlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pv.automutate import operators  # noqa: E402

CORE = ("lifecycle", "ledger", "expr", "vacuity", "fpmodel", "tolerance", "provenance", "outcome", "codebind",
        "crosscheck", "identity", "releasegate", "importbind")
# The tests that may judge a core mutant: pv's own tests (tests/test_*.py), less those that
# judge no core code in this process or cost minutes for nothing here. Coverage then picks, per
# mutant, the tests among them that ran its lines.
NOT_IN_POOL = {
    "test_bisect.py": "trains models with torch",
    "test_dashboard_browser.py": "drives a browser",
    "test_examples.py": "runs the examples in subprocesses",
    "test_execution_real.py": "runs real checks in subprocesses",
    "test_init_torch.py": "imports torch in subprocesses",
    "test_layout.py": "reads pv's source as text",
    "test_mutate.py": "runs `pv mutate` in subprocesses",
    "test_mutation_score.py": "tests this script on toy modules",
    "test_packaging.py": "builds wheels in subprocesses",
    "test_precommit.py": "runs git hooks in subprocesses",
}
TEST_POOL = tuple(sorted(f"tests/{p.name}" for p in (REPO / "tests").glob("test_*.py") if p.name not in NOT_IN_POOL))
EQUIVALENTS = Path(__file__).resolve().parent / "mutation_equivalents.toml"
KILLED = ("killed", "killed-at-import", "timeout")
IMPORT_FAILED = 98  # the child's exit code when the mutated module raised as it was loaded
_MISSING = object()


@dataclass(frozen=True)
class Mutant:
    site: operators.Site
    path: Path  # the module's file
    digest: str  # of the module's source

    @property
    def short(self) -> str:
        return self.site.module.rsplit(".", 1)[-1]

    def label(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.site.line} {self.site.label()}"


# --- the sample ------------------------------------------------------------------------------

def _rel(path: str | Path) -> str:
    return Path(path).resolve().relative_to(REPO).as_posix()


def source_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def sample(modules: list[str], size: int, seed: int) -> tuple[int, list[Mutant]]:
    """(number of sites, the first `size` of them after a seeded shuffle)."""
    everything = []
    for name in modules:
        path = REPO / "pv" / f"{name}.py"
        text = path.read_text()
        everything += [Mutant(site, path, source_digest(text)) for site in operators.sites(text, f"pv.{name}")]
    shuffled = list(everything)
    random.Random(seed).shuffle(shuffled)
    return len(everything), shuffled[:size]


def changed_lines(before: str, after: str) -> set[int]:
    """The 1-based lines of `before` that `after` rewrites."""
    lines: set[int] = set()
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    for tag, i1, i2, _j1, _j2 in matcher.get_opcodes():
        if tag != "equal":
            lines.update(range(i1 + 1, max(i2, i1 + 1) + 1))
    return lines


def _top_statement(tree: ast.Module, line: int) -> ast.stmt:
    return next(s for s in tree.body if s.lineno <= line <= (s.end_lineno or s.lineno))


def _bound_names(statement: ast.stmt) -> set[str]:
    """The module-level names one top-level statement binds."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    names, todo = set(), [statement]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return names


def _function_body(tree: ast.Module, line: int) -> set[int]:
    """The lines of the innermost function whose definition holds `line` (its defaults, say)."""
    spans = [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno <= line <= (n.end_lineno or 0)]
    if not spans:
        return set()
    start, end = max(spans)
    return set(range(start, end + 1))


# --- patching a module in place (in the mutant's child) ---------------------------------------

def _unwrap(obj: Any) -> Any:
    while True:
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        elif hasattr(obj, "func") and type(obj).__name__ == "cached_property":
            obj = obj.func
        elif hasattr(obj, "__wrapped__"):
            if hasattr(obj, "cache_clear"):
                obj.cache_clear()
            obj = obj.__wrapped__
        else:
            return obj


def _swap(old: Any, new: Any, path: list[str]) -> bool:
    """Put `new`'s code into `old` along `path` (a scope such as Class.method); True if done."""
    if isinstance(old, property) and isinstance(new, property):
        pairs = [(a, b) for a, b in ((old.fget, new.fget), (old.fset, new.fset), (old.fdel, new.fdel)) if a and b]
        return all(_swap(a, b, []) for a, b in pairs) and bool(pairs)
    old, new = _unwrap(old), _unwrap(new)
    if isinstance(old, type) and isinstance(new, type):
        return bool(path) and path[0] in vars(old) and path[0] in vars(new) and \
            _swap(vars(old)[path[0]], vars(new)[path[0]], path[1:])
    if not (callable(old) and hasattr(old, "__code__") and hasattr(new, "__code__")):
        return False
    try:
        old.__code__ = new.__code__  # nested functions are constants of this code: they follow
    except ValueError:  # different free variables
        return False
    old.__defaults__, old.__kwdefaults__ = new.__defaults__, new.__kwdefaults__
    return True


def _loads_at_import(statement: ast.stmt) -> set[str]:
    """The names a top-level statement reads while the module loads: a function's decorators,
    defaults and annotations, not its body (that reads globals when called)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
        parts: list[ast.AST] = [*statement.decorator_list, *statement.args.defaults,
                                *[d for d in statement.args.kw_defaults if d is not None]]
    else:
        parts = [statement]
    found = set()
    for part in parts:
        todo = [part]
        while todo:
            node = todo.pop()
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                found.add(node.id)
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    todo += [*getattr(child, "decorator_list", []), *child.args.defaults]
                else:
                    todo.append(child)
    return found


def _derived(tree: ast.Module, statement: ast.stmt, names: set[str]) -> set[str]:
    """`names` and the names of every later top-level statement that reads one of them at import."""
    changed = set(names)
    for later in tree.body[tree.body.index(statement) + 1:]:
        if _loads_at_import(later) & changed:
            changed |= _bound_names(later)
    return changed


def patch(module: Any, original: str, mutated: str, site: operators.Site, roots: tuple[Path, ...] = (REPO,)) -> str:
    """Make `module` behave as `mutated` source; returns how ('function' or 'binding'). A rebound
    name is followed into the modules loaded from under `roots`."""
    tree = ast.parse(original)
    statement = _top_statement(tree, site.line)
    names = _bound_names(statement)
    code = compile(mutated, module.__file__, "exec")
    namespace = module.__dict__
    before = dict(namespace)
    namespace.clear()
    namespace.update({k: v for k, v in before.items() if k.startswith("__") and k.endswith("__")})
    namespace.setdefault("__builtins__", builtins)
    exec(code, namespace)  # noqa: S102 - pv's own source, mutated at one site
    after = dict(namespace)
    scope = [] if site.scope == "<module>" else site.scope.split(".")
    head = scope[0] if scope else None
    if head in names and head in before and head in after and _swap(before[head], after[head], scope[1:]):
        # a mutant inside a function: every other object is put back as it was, so identities
        # (classes, enum members, sentinels) hold, and the function object itself is the
        # original one running the mutated code
        namespace.clear()
        namespace.update(before)
        return "function"
    # A module-level statement or a class body: its names take their new values, and so does
    # every later top-level statement that reads one of them as the module loads (a pydantic
    # model annotated with a mutated enum, a table built from a mutated constant), as a fresh
    # import would have it. Everything else is put back, so identities hold (an enum another
    # module imported under its own name stays the same class).
    changed = _derived(tree, statement, names)
    namespace.clear()
    namespace.update({k: v for k, v in before.items() if k not in changed})
    namespace.update({k: v for k, v in after.items() if k in changed})
    for name in changed:
        old, new = before.get(name, _MISSING), after.get(name, _MISSING)
        if new is old:
            continue
        for other in list(sys.modules.values()):
            where = getattr(other, "__file__", None) or ""
            if other is module or not any(where.startswith(str(root)) for root in roots):
                continue
            if getattr(other, "__dict__", {}).get(name, _MISSING) is old:
                if new is _MISSING:
                    del other.__dict__[name]
                else:
                    other.__dict__[name] = new
    return "binding"


# --- running tests inside the pytest session ------------------------------------------------

def _run_items(items: list[Any], stop: bool = True, before: Any = None) -> tuple[int, list[Any]]:
    """Run `items` in order (stopping at the first failure unless `stop` is False), as pytest's own
    loop does, fixtures shared between neighbours: (1 if one failed else 0, [(node id, s, failed)])."""
    from _pytest.runner import runtestprotocol

    timings, status = [], 0
    for i, item in enumerate(items):
        if before is not None:
            before(item)
        start = time.perf_counter()
        reports = runtestprotocol(item, log=False, nextitem=items[i + 1] if i + 1 < len(items) else None)
        failed = any(r.failed for r in reports)
        timings.append((item.nodeid, time.perf_counter() - start, failed))
        if failed:
            status = 1
            if stop:
                break
    return status, timings


def _child_start(session: Any, scratch: Path) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:  # each child its own tmp_path root (the parent removes it)
        factory._given_basetemp, factory._basetemp = scratch / str(os.getpid()), None


class Runner:
    """The pytest plugin that replaces the run loop with the mutation run."""

    def __init__(self, args: argparse.Namespace, mutants: list[Mutant], points: int):
        self.args, self.mutants, self.points = args, mutants, points
        self.summary: dict[str, Any] = {}

    # coverage: line -> tests, measured once per sources + tests
    def coverage(self, session: Any, scratch: Path) -> dict[str, Any]:
        files = sorted({str(m.path) for m in self.mutants})
        key_text = "".join(Path(f).read_text() for f in files) + "".join(
            (REPO / t).read_text() for t in TEST_POOL) + (REPO / "tests" / "conftest.py").read_text()
        key = hashlib.sha256(key_text.encode()).hexdigest()
        cache = self.args.results.parent / "mutation-coverage.json"  # shared by runs of the same tree
        if cache.exists():
            cached = json.loads(cache.read_text())
            if cached.get("key") == key:
                return cached
        data_file, report = scratch / "coverage.data", scratch / "baseline.json"
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                import coverage

                _child_start(session, scratch)
                cov = coverage.Coverage(data_file=str(data_file), include=files)
                cov.start()
                timings = _run_items(session.items, stop=False, before=lambda item: cov.switch_context(item.nodeid))[1]
                cov.switch_context("")
                cov.stop()
                cov.save()
                report.write_text(json.dumps(timings))
                os._exit(0)
            except BaseException:  # noqa: BLE001
                os._exit(99)
        if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
            raise SystemExit("the coverage run of the unmutated tests failed")
        import coverage

        data = coverage.CoverageData(basename=str(data_file))
        data.read()
        lines = {_rel(f): {str(n): sorted(c for c in ctx if c) for n, ctx in data.contexts_by_lineno(f).items()}
                 for f in files}
        timings = json.loads(report.read_text())
        result = {"key": key, "lines": lines, "seconds": {n: s for n, s, _ in timings},
                  "failing": sorted(n for n, _, failed in timings if failed),
                  "took_s": round(time.monotonic() - started, 1)}
        cache.write_text(json.dumps(result))
        return result

    def tests_for(self, mutant: Mutant, mutated: str, original: str, cov: dict[str, Any]) -> list[str]:
        by_line: dict[str, list[str]] = cov["lines"].get(_rel(mutant.path), {})

        def ran(lines: set[int]) -> set[str]:
            return {t for n in lines for t in by_line.get(str(n), ())}

        chosen = ran(changed_lines(original, mutated))
        if not chosen and mutant.site.scope != "<module>":
            chosen = ran(_function_body(ast.parse(original), mutant.site.line))  # a default: its function
        scope_head = mutant.site.scope.split(".")[0]
        is_function = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == scope_head
                          for n in ast.parse(original).body)
        if not is_function:  # module level or a class body (ran at import): everything that uses the module
            chosen = {t for tests in by_line.values() for t in tests}
        return sorted(chosen - set(cov["failing"]))

    def pytest_runtestloop(self, session: Any) -> bool:
        scratch = Path(tempfile.mkdtemp(prefix="pv-mutation-"))
        try:
            self._loop(session, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return True

    def _loop(self, session: Any, scratch: Path) -> None:
        args = self.args
        cov = self.coverage(session, scratch)
        if cov["failing"]:
            print(f"tests failing unmutated (never used): {', '.join(cov['failing'])}", flush=True)
        order = {item.nodeid: i for i, item in enumerate(session.items)}
        by_id = {item.nodeid: item for item in session.items}
        done = load_results(args.results)
        equivalent = load_equivalents()
        todo = []
        for position, mutant in enumerate(self.mutants):
            record = done.get(mutant.site.id)
            fresh = record is not None and record["digest"] == mutant.digest
            if args.only and mutant.site.id not in args.only:
                continue
            if fresh and not args.only and not (args.rerun_survivors and record["status"] in ("survived", "uncovered")
                                                and mutant.site.id not in equivalent):
                continue
            todo.append((position, mutant))
        print(f"{self.points} sites, sample {len(self.mutants)} (seed {args.seed}); {len(todo)} to run, "
              f"coverage of the unmutated tests: {cov['took_s']} s", flush=True)
        sources = {m.path: m.path.read_text() for m in self.mutants}
        running: dict[int, tuple[int, Mutant, float, int, float]] = {}  # pid -> position, mutant, start, tests, limit
        started = time.monotonic()
        queue = list(todo)
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            self._drive(session, scratch, cov, queue, running, order, by_id, sources)
        finally:  # interrupted: no child outlives the run (its mutant is simply run again next time)
            for pid in running:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        self.summary = summarize(self.mutants, load_results(args.results), equivalent, self.points, args.seed)
        self.summary["run_s"] = round(time.monotonic() - started, 1)
        self.summary["coverage_s"] = cov.get("took_s")

    def _drive(self, session: Any, scratch: Path, cov: dict[str, Any], queue: list[tuple[int, Mutant]],
               running: dict[int, Any], order: dict[str, int], by_id: dict[str, Any],
               sources: dict[Path, str]) -> None:
        args = self.args
        while queue or running:
            while queue and (not running or (len(running) < args.jobs and _quiet(len(running)))):
                position, mutant = queue.pop(0)
                original = sources[mutant.path]
                mutated = original if args.baseline else operators.apply(original, mutant.site)
                tests = self.tests_for(mutant, mutated, original, cov)
                # the likeliest killers first (the module's mirror file, then the quickest): the first
                # failure ends the run. pv's tests pass in any order (pytest-randomly runs them so).
                mirror = f"tests/test_{mutant.short}.py::"
                tests.sort(key=lambda t: (not t.startswith(mirror), cov["seconds"].get(t, 1.0), order[t]))
                if not tests:
                    self.record(position, mutant, "uncovered", 0, 0.0)
                    continue
                limit = 10 + 3 * sum(cov["seconds"].get(t, 1.0) for t in tests)
                pid = os.fork()
                if pid == 0:
                    try:
                        _child_start(session, scratch)
                        patch(sys.modules[mutant.site.module], original, mutated, mutant.site)
                        os._exit(_run_items([by_id[t] for t in tests])[0])
                    except BaseException:  # noqa: BLE001 - the mutated module raised as it loaded: killed
                        os._exit(IMPORT_FAILED)
                running[pid] = (position, mutant, time.monotonic(), len(tests), limit)
            for pid, (position, mutant, began, count, limit) in list(running.items()):
                done_, status = os.waitpid(pid, os.WNOHANG)
                elapsed = time.monotonic() - began
                if not done_ and elapsed > limit:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    verdict = "timeout"
                elif done_:
                    code = os.waitstatus_to_exitcode(status)
                    verdict = "survived" if code == 0 else "killed-at-import" if code == IMPORT_FAILED else "killed"
                else:
                    continue
                del running[pid]
                shutil.rmtree(scratch / str(pid), ignore_errors=True)
                self.record(position, mutant, verdict, count, elapsed)
            time.sleep(0.02)

    def record(self, position: int, mutant: Mutant, status: str, tests: int, seconds: float) -> None:
        entry = {"id": mutant.site.id, "position": position, "module": mutant.short, "mutant": mutant.label(),
                 "scope": mutant.site.scope, "status": status, "tests": tests, "seconds": round(seconds, 2),
                 "digest": mutant.digest}
        with self.args.results.open("a") as handle:
            handle.write(json.dumps(entry) + "\n")
        print(f"{position:4d} {status:9s} {tests:3d} tests {seconds:6.1f}s {mutant.label()}", flush=True)


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _quiet(running: int) -> bool:
    """Another worker only while the machine is otherwise idle (the load is ours)."""
    return os.getloadavg()[0] - running < 0.5


# --- results ---------------------------------------------------------------------------------

def load_results(path: Path) -> dict[str, dict[str, Any]]:
    """site id -> its latest record (a line cut short by a crash is skipped)."""
    latest: dict[str, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            latest[entry["id"]] = entry
    return latest


def load_equivalents(path: Path = EQUIVALENTS) -> dict[str, str]:
    """site id -> why no test can kill it."""
    if not path.exists():
        return {}
    return {e["id"]: e["reason"] for e in tomllib.loads(path.read_text()).get("equivalent", [])}


def summarize(mutants: list[Mutant], results: dict[str, dict[str, Any]], equivalent: dict[str, str],
              points: int, seed: int) -> dict[str, Any]:
    modules: dict[str, dict[str, int]] = {}
    open_, listed = [], []
    for mutant in mutants:
        row = modules.setdefault(mutant.short, {"sampled": 0, "run": 0, "killed": 0, "equivalent": 0,
                                                "survived": 0})
        row["sampled"] += 1
        record = results.get(mutant.site.id)
        if record is None or record["digest"] != mutant.digest:
            continue
        row["run"] += 1
        if record["status"] in KILLED:
            row["killed"] += 1
        elif mutant.site.id in equivalent:
            row["equivalent"] += 1
            listed.append({"mutant": mutant.label(), "id": mutant.site.id, "reason": equivalent[mutant.site.id]})
        else:
            row["survived"] += 1
            open_.append({"mutant": mutant.label(), "id": mutant.site.id, "status": record["status"]})
    total = {k: sum(r[k] for r in modules.values()) for k in ("sampled", "run", "killed", "equivalent", "survived")}
    for row in [*modules.values(), total]:
        judged = row["killed"] + row["survived"]
        row["score"] = round(row["killed"] / judged, 4) if judged else None
    return {"points": points, "seed": seed, "modules": modules, "total": total, "survivors": open_,
            "equivalents": listed}


def markdown(summary: dict[str, Any]) -> str:
    lines = ["| module | sampled | run | killed | equivalent | survived | score |", "|---|---|---|---|---|---|---|"]
    rows = sorted(summary["modules"].items()) + [("**total**", summary["total"])]
    for name, r in rows:
        score = "–" if r["score"] is None else f"{100 * r['score']:.1f} %"
        lines.append(f"| {name} | {r['sampled']} | {r['run']} | {r['killed']} | {r['equivalent']} | "
                     f"{r['survived']} | {score} |")
    if summary["equivalents"]:
        lines += ["", "| equivalent mutant | why no test can kill it |", "|---|---|"]
        lines += [f"| `{e['mutant']}` | {e['reason']} |" for e in summary["equivalents"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=320)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--modules", default=",".join(CORE))
    parser.add_argument("--results", type=Path, default=None,
                        help="JSON lines, appended as verdicts come (default .pv-cache/mutation-score-<seed>.jsonl)")
    parser.add_argument("--jobs", type=int, default=1, help="mutants at once; a second starts only on an idle machine")
    parser.add_argument("--rerun-survivors", action="store_true", help="run the recorded survivors again")
    parser.add_argument("--only", type=lambda text: set(text.split(",")), default=set(),
                        help="comma-separated site ids of the sample: run just these (again)")
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--baseline", action="store_true",
                        help="check the machinery: run each sampled mutant's tests on the module patched with its "
                             "own unmutated source (every one must survive); results go to a separate file")
    parser.add_argument("--report-only", action="store_true", help="summarize the results file, run nothing")
    args = parser.parse_args(argv)
    os.chdir(REPO)
    default = REPO / ".pv-cache" / f"mutation-{'baseline' if args.baseline else 'score'}-{args.seed}.jsonl"
    args.results = (args.results or default).resolve()
    args.results.parent.mkdir(parents=True, exist_ok=True)
    points, mutants = sample(args.modules.split(","), args.sample, args.seed)
    if args.report_only:
        summary = summarize(mutants, load_results(args.results), load_equivalents(), points, args.seed)
    else:
        for mutant in mutants:  # import once in the parent: each fork starts warm
            __import__(mutant.site.module)
        import pytest

        runner = Runner(args, mutants, points)
        status = pytest.main([*TEST_POOL, "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:xdist",
                              "--pv-no-ledger", "--pv-device", "cpu"], plugins=[runner])
        if not runner.summary:
            print(f"pytest stopped before the mutation run (exit {int(status)})", file=sys.stderr)
            return 2
        summary = runner.summary
    print(markdown(summary))
    for s in summary["survivors"]:
        print(f"survivor {s['id']} {s['status']:9s} {s['mutant']}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
