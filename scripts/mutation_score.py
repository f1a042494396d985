"""pv's own mutation score: plant small bugs in pv's core modules and count those its tests kill.

    python scripts/mutation_score.py [--sample 320] [--seed 24] [--timeout 120] [--json out.json]
                                     [--modules lifecycle,ledger,...] [--only N,N] [--baseline]

Every mutation point of the core modules is enumerated with libcst (a comparison flipped,
`and`/`or` swapped, an arithmetic operator changed, a `not` dropped, True/False/None and
numbers changed, an `if` condition negated, a `return` value replaced by None, a call statement
removed, `break`/`continue` swapped; docstrings and other string literals are not mutated:
messages are prose). A seeded sample is run: for each mutant a forked child replaces the module's
code in place (exec of the mutated source into the module's namespace, so `from pv import
expr; expr.parse` sees it) and runs the module's tests with pytest in that child; any failure,
error or timeout kills the mutant. Only the module's own test files count (MODULE_TESTS), and of
those only the test functions that execute the mutated line (measured once with coverage.py,
one context per test; a line no test reaches at run time, module-level code, gets them all):
the figure is a lower bound on what the whole suite kills.

Why not mutmut or cosmic-ray: both were tried here. mutmut 3 rewrites the whole package into a
`mutants/` copy with trampolines and wants every test to pass through it; cosmic-ray needs a
session database and a full test command per mutant (about 10 s of pytest start-up each on this
shared machine). A fork per mutant after one import costs well under a second.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CORE = ("lifecycle", "ledger", "expr", "vacuity", "tolerance", "provenance", "outcome", "codebind", "crosscheck")
MODULE_TESTS = {
    "lifecycle": ["tests/test_lifecycle.py"],
    "ledger": ["tests/test_ledger.py"],
    "expr": ["tests/test_expr.py", "tests/test_vacuity.py"],
    "vacuity": ["tests/test_vacuity.py"],
    "tolerance": ["tests/test_tolerance.py"],
    "provenance": ["tests/test_provenance.py"],
    "outcome": ["tests/test_outcome.py"],
    "codebind": ["tests/test_codebind.py"],
    "crosscheck": ["tests/test_crosscheck.py", "tests/test_validate.py"],
}

_FLIP_COMPARE = {
    cst.LessThan: cst.LessThanEqual, cst.LessThanEqual: cst.LessThan, cst.GreaterThan: cst.GreaterThanEqual,
    cst.GreaterThanEqual: cst.GreaterThan, cst.Equal: cst.NotEqual, cst.NotEqual: cst.Equal, cst.In: cst.NotIn,
    cst.NotIn: cst.In, cst.Is: cst.IsNot, cst.IsNot: cst.Is,
}
_FLIP_BINARY = {
    cst.Add: cst.Subtract, cst.Subtract: cst.Add, cst.Multiply: cst.Divide, cst.Divide: cst.Multiply,
    cst.FloorDivide: cst.Divide, cst.Modulo: cst.Multiply, cst.Power: cst.Multiply,
}


@dataclass(frozen=True)
class Mutant:
    module: str
    index: int  # the index-th mutation point of the module, in visiting order
    line: int
    what: str
    end_line: int = 0

    def label(self) -> str:
        return f"pv/{self.module}.py:{self.line} {self.what}"


def _kind(node: cst.CSTNode) -> str | None:
    """The mutation this node admits, or None."""
    if isinstance(node, cst.ComparisonTarget) and type(node.operator) in _FLIP_COMPARE:
        return f"{type(node.operator).__name__} -> {_FLIP_COMPARE[type(node.operator)].__name__}"
    if isinstance(node, cst.BooleanOperation):
        return "and -> or" if isinstance(node.operator, cst.And) else "or -> and"
    if isinstance(node, cst.BinaryOperation) and type(node.operator) in _FLIP_BINARY:
        return f"{type(node.operator).__name__} -> {_FLIP_BINARY[type(node.operator)].__name__}"
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        return "not dropped"
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return f"{node.value} -> {'False' if node.value == 'True' else 'True'}"
    if isinstance(node, cst.Integer):
        return f"{node.value} -> {node.value}+1"
    if isinstance(node, cst.If):
        return "if condition negated"
    if isinstance(node, cst.Return) and node.value is not None and not (
            isinstance(node.value, cst.Name) and node.value.value == "None"):
        return "return value -> None"
    if isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1 and isinstance(node.body[0], cst.Expr) \
            and isinstance(node.body[0].value, cst.Call):
        return "call statement removed"
    if isinstance(node, cst.Break):
        return "break -> continue"
    if isinstance(node, cst.Continue):
        return "continue -> break"
    return None


def _mutated(node: cst.CSTNode) -> cst.CSTNode:
    if isinstance(node, cst.ComparisonTarget):
        return node.with_changes(operator=_FLIP_COMPARE[type(node.operator)]())
    if isinstance(node, cst.BooleanOperation):
        return node.with_changes(operator=cst.Or() if isinstance(node.operator, cst.And) else cst.And())
    if isinstance(node, cst.BinaryOperation):
        return node.with_changes(operator=_FLIP_BINARY[type(node.operator)]())
    if isinstance(node, cst.UnaryOperation):
        return node.expression
    if isinstance(node, cst.Name):
        return node.with_changes(value="False" if node.value == "True" else "True")
    if isinstance(node, cst.Integer):
        return cst.Integer(str(int(node.value.replace("_", ""), 0) + 1))
    if isinstance(node, cst.If):
        test = node.test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return node.with_changes(test=cst.UnaryOperation(cst.Not(), test))
    if isinstance(node, cst.Return):
        return node.with_changes(value=cst.Name("None"))
    if isinstance(node, cst.SimpleStatementLine):
        return node.with_changes(body=[cst.Pass()])
    if isinstance(node, cst.Break):
        return cst.Continue()
    return cst.Break()


class _Points(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        self.points: list[tuple[int, int, str]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        kind = _kind(node)
        if kind is not None:
            where = self.get_metadata(PositionProvider, node)
            end = where.start.line if isinstance(node, cst.If) else where.end.line  # an if: its test line
            self.points.append((where.start.line, end, kind))
        return True


def mutation_points(module: str) -> tuple[str, list[Mutant]]:
    source = (REPO / "pv" / f"{module}.py").read_text()
    visitor = _Points()
    MetadataWrapper(cst.parse_module(source)).visit(visitor)
    return source, [Mutant(module, i, line, what, end) for i, (line, end, what) in enumerate(visitor.points)]


def mutate_source(source: str, index: int) -> str:
    counter = {"n": -1}
    hit: dict[str, cst.CSTNode] = {}

    class Mark(cst.CSTVisitor):  # find the index-th point (same visiting order as _Points)
        def on_visit(self, node: cst.CSTNode) -> bool:
            if _kind(node) is not None:
                counter["n"] += 1
                if counter["n"] == index:
                    hit["node"] = node
            return True

    tree = cst.parse_module(source)
    tree.visit(Mark())
    target = hit["node"]

    class Replace(cst.CSTTransformer):
        def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):  # type: ignore[override]
            return _mutated(updated) if original is target else updated

    return tree.visit(Replace()).code


class _Contexts:
    """A pytest plugin that names the coverage context after the running test function."""

    def __init__(self, cov):
        self.cov = cov

    def pytest_runtest_setup(self, item):
        self.cov.switch_context(item.nodeid.split("[", 1)[0])

    def pytest_runtest_teardown(self, item):
        self.cov.switch_context("")


def covering_tests(modules: list[str], data_file: Path) -> dict[str, dict[int, set[str]]]:
    """module -> line -> the test functions (node ids without parameters) that execute it,
    measured once by running every module's tests under coverage in a forked child."""
    pid = os.fork()
    if pid == 0:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            import coverage
            import pytest

            cov = coverage.Coverage(data_file=str(data_file), include=[str(REPO / "pv" / f"{m}.py") for m in modules])
            cov.start()
            files = sorted({f for m in modules for f in MODULE_TESTS[m]})
            pytest.main([*files, "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "--pv-no-ledger",
                         "-p", "no:xdist"], plugins=[_Contexts(cov)])
            cov.stop()
            cov.save()
            os._exit(0)
        except BaseException:  # noqa: BLE001
            os._exit(99)
    os.waitpid(pid, 0)
    import coverage

    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    out: dict[str, dict[int, set[str]]] = {}
    for module in modules:
        by_line = data.contexts_by_lineno(str(REPO / "pv" / f"{module}.py"))
        out[module] = {line: {c for c in contexts if c} for line, contexts in by_line.items()}
    return out


def run_mutant(mutant: Mutant, source: str, timeout: int, mutated: str | None = None,
               tests: list[str] | None = None) -> str:
    """'killed' | 'survived' | 'timeout' | 'invalid' (the mutant does not compile)."""
    mutated = mutate_source(source, mutant.index) if mutated is None else mutated
    try:
        code = compile(mutated, f"pv/{mutant.module}.py", "exec")
    except SyntaxError:
        return "invalid"
    pid = os.fork()
    if pid == 0:  # the child: patch the module, run its tests, exit with pytest's status
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            import pytest

            module = importlib.import_module(f"pv.{mutant.module}")
            exec(code, module.__dict__)
            status = pytest.main([*(tests or MODULE_TESTS[mutant.module]), "-x", "-q", "-p", "no:randomly",
                                  "-p", "no:cacheprovider", "--pv-no-ledger", "-p", "no:xdist"])
            os._exit(int(status))
        except BaseException:  # noqa: BLE001
            os._exit(99)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return "survived" if os.waitstatus_to_exitcode(status) == 0 else "killed"
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout"
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=320)
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument("--timeout", type=int, default=180)
    parser.add_argument("--modules", default=",".join(CORE))
    parser.add_argument("--only", default="", help="comma-separated sample positions to run (re-checks)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--baseline", action="store_true",
                        help="first run each module's tests with its own source exec'd in place (must pass)")
    args = parser.parse_args(argv)
    os.chdir(REPO)
    sources: dict[str, str] = {}
    everything: list[Mutant] = []
    for module in args.modules.split(","):
        sources[module], points = mutation_points(module)
        everything += points
    sample = random.Random(args.seed).sample(everything, min(args.sample, len(everything)))
    for module in sources:  # import once in the parent: each fork starts warm
        importlib.import_module(f"pv.{module}")
    import pytest  # noqa: F401
    import z3  # noqa: F401

    for module, source in (sources.items() if args.baseline else ()):  # patching alone must not fail the tests
        baseline = run_mutant(Mutant(module, -1, 0, "none"), source, args.timeout, mutated=source)
        print(f"baseline {module}: {'ok' if baseline == 'survived' else baseline.upper()}", flush=True)
        if baseline != "survived":
            return 2
    coverage_map = covering_tests(sorted(sources), Path(os.environ.get("TMPDIR", "/tmp")) / f".pv-mutcov-{os.getpid()}")
    chosen = [int(i) for i in args.only.split(",") if i] or range(len(sample))
    results = []
    for position in chosen:
        mutant = sample[position]
        lines = coverage_map[mutant.module]
        tests = sorted(set().union(*[lines.get(n, set()) for n in range(mutant.line, mutant.end_line + 1)]))
        # tests that execute the mutated line; none (module-level code runs at import) -> all of them
        status = run_mutant(mutant, sources[mutant.module], args.timeout, tests=tests or None)
        results.append({"position": position, "mutant": mutant.label(), "status": status})
        print(f"{position:4d} {status:8s} {mutant.label()}", flush=True)
    counts = {s: sum(r["status"] == s for r in results) for s in ("killed", "timeout", "survived", "invalid")}
    valid = counts["killed"] + counts["timeout"] + counts["survived"]
    summary = {"points": len(everything), "sampled": len(results), "seed": args.seed, **counts,
               "score": round((counts["killed"] + counts["timeout"]) / valid, 4) if valid else None,
               "survivors": [r for r in results if r["status"] == "survived"]}
    print(json.dumps({k: v for k, v in summary.items() if k != "survivors"}))
    if args.json:
        args.json.write_text(json.dumps(summary | {"results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
