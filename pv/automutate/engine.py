"""`pv mutate`'s engine: which code, which mutants, which falsifiers; run each mutant, record it.

1. **Bound code.** Each selected falsifier binds the modules of `[tool.pv] code_packages` in
   the static import closure of its check's module (pv.codebind, the same closure a ledger
   record's `code_digests` name). Those modules are mutated; a mutant of module M is judged by
   the falsifiers whose closure holds M, and only by them.
2. **Baseline.** The judging falsifiers run once unmutated (reused while their code and
   definitions are unchanged). One that does not PASS is left out: it would "kill" everything.
   Each verdict names the functions its check executed (pv.execution's `executed_code`): a
   mutant is judged only by the falsifiers that ran its function, and a mutant of a function
   none ran is SURVIVED without a run.
3. **Mutants.** pv.automutate.operators lists every site of every bound module; `--seed` shuffles
   that list and `--sample N` keeps its first N (so a larger sample extends a smaller one).
4. **One pytest process per mutant**, through pv.automutate.hook (the file on disk is never
   edited): its falsifiers run in an order that tries first the ones that killed mutants of the
   same module, then the quickest; the first FAIL kills the mutant and stops the process.
   Exceeding the mutant's time limit (a multiple of its baseline time) is a TIMEOUT; a process
   that dies without every verdict (a segfault, os._exit) or a falsifier ERROR is an ERROR.
5. **Record** one line per mutant in the results file (pv.automutate.results) as it finishes,
   so a killed run resumes where it stopped.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pv import codebind
from pv.automutate import hook, operators, results as store
from pv.config import Workspace

START_UP_S = 30.0  # added to every mutant's limit: interpreter, imports, fixtures


@dataclass
class Target:
    """One bound module of the code under test."""
    module: str
    path: Path
    rel: str
    falsifiers: list[str]
    source: str = ""
    digest: str | None = None
    problem: str | None = None  # why it cannot be mutated (unreadable, does not parse)
    _units: Any = None

    def unit_of(self, line: int) -> str:
        """The code unit (pv.codeunits: a function's qualname, or `<module>`) holding `line`."""
        if self._units is None:
            from pv.codeunits import units_of_source

            self._units = units_of_source(self.source.encode("utf-8"))
        return self._units.unit_of_line(line)


@dataclass
class Candidate:
    site: operators.Site
    target: Target


@dataclass
class MutatePlan:
    targets: dict[str, Target]
    tests: dict[str, list[Any]]  # falsifier -> its generated tests (pv.commands.run.Selected)
    definitions: dict[str, str]  # falsifier -> definition hash
    contract_of: dict[str, str]
    check_module: dict[str, str]
    unbound: list[str] = field(default_factory=list)  # selected falsifiers that bind no code under test
    timing: set[str] = field(default_factory=set)  # falsifiers that declare timing_observations (they measure time)
    candidates: list[Candidate] = field(default_factory=list)
    total_sites: int = 0


def plan_targets(workspace: Workspace, plan: Any, chosen: list[Any], only_modules: tuple[str, ...] = ()) -> MutatePlan:
    """The bound modules of the chosen generated tests (pv.commands.run.Selected), each with the
    falsifiers that judge it."""
    index = plan.falsifiers()
    roots = codebind.search_roots(workspace.root)
    tests: dict[str, list[Any]] = {}
    for selected in chosen:
        tests.setdefault(selected.falsifier, []).append(selected)
    out = MutatePlan({}, tests, {}, {}, {})
    for fid in tests:
        target, falsifier = index[fid]
        out.contract_of[fid] = target.contract.metadata.id
        if falsifier.timing_observations:
            out.timing.add(fid)
        out.definitions[fid] = store.definition_of(falsifier, workspace.subject_param)
        if not falsifier.check:
            out.unbound.append(fid)
            continue
        check_module = falsifier.check.split(":")[0]
        out.check_module[fid] = check_module
        closure = codebind.closure([check_module], workspace.bound_packages, roots)
        modules = sorted(m for m in closure if codebind.in_packages(m, workspace.code_packages)
                         and not codebind.in_packages(m, workspace.check_packages))
        if only_modules:
            modules = [m for m in modules if any(m == w or m.startswith(w + ".") for w in only_modules)]
        if not modules:
            out.unbound.append(fid)
        for module in modules:
            path = codebind.module_file(module, roots)
            if path is None:
                continue
            entry = out.targets.setdefault(module, Target(module, path, workspace.rel(path), []))
            entry.falsifiers.append(fid)
    for entry in out.targets.values():
        try:
            entry.source = entry.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            entry.problem = f"{entry.rel}: cannot read: {exc}"
            continue
        entry.digest = codebind.digest_source(entry.source.encode("utf-8"))
    return out


def sample_candidates(mplan: MutatePlan, seed: int, sample: int | None, ops: tuple[str, ...],
                      only: tuple[str, ...] = ()) -> list[str]:
    """Fill mplan.candidates (shuffled by seed, first `sample` kept, then only the ids in `only`
    if any are given); return the modules that do not parse."""
    problems = []
    every: list[Candidate] = []
    for module in sorted(mplan.targets):
        target = mplan.targets[module]
        if target.problem is None:
            try:
                every += [Candidate(s, target) for s in operators.sites(target.source, module, target.rel, ops)]
            except operators.MutationSourceError as exc:
                target.problem = str(exc)
        if target.problem is not None:
            problems.append(target.problem)
    mplan.total_sites = len(every)
    random.Random(seed).shuffle(every)
    mplan.candidates = every if sample is None else every[:sample]
    if only:
        mplan.candidates = [c for c in mplan.candidates if c.site.id in set(only)]
    return problems


# --- one pytest process ------------------------------------------------------------------------


@dataclass
class ProcessResult:
    verdicts: list[tuple[str, str, str]] = field(default_factory=list)  # (falsifier, verdict, message)
    cells: dict[str, str] = field(default_factory=dict)  # "falsifier|device|subject" -> verdict
    units: dict[str, dict[str, set[str]]] = field(default_factory=dict)  # falsifier -> module -> units it ran
    units_unknown: set[str] = field(default_factory=set)  # falsifiers whose executed code was not told
    durations: dict[str, float] = field(default_factory=dict)
    killed_by: str | None = None
    returncode: int | None = None
    timed_out: bool = False
    stopped: bool = False  # stopped on purpose (the first FAIL, or the time budget)
    missing: list[str] = field(default_factory=list)
    output: str = ""
    seconds: float = 0.0


class Runner:
    """Runs generated tests in pytest subprocesses; kills every one still running on `stop_all()`."""

    def __init__(self, workspace: Workspace, device: str, build_command: Callable[..., list[str]]):
        self.workspace, self.device, self.build_command = workspace, device, build_command
        self._live: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def stop_all(self) -> None:
        with self._lock:
            for proc in list(self._live):
                _kill_group(proc)

    def run(self, tests: list[Any], *, timeout: float | None, mutant_spec: Path | None = None,
            stop_on_fail: bool = True, deadline: float | None = None,
            on_verdict: Callable[[str, str, float], None] | None = None) -> ProcessResult:
        out = ProcessResult()
        env = dict(os.environ)
        paths = ([hook.site_dir()] if mutant_spec else []) + [str(self.workspace.root)]
        env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ written into the user's tree
        env.pop(hook.ENV, None)
        if mutant_spec:
            env[hook.ENV] = str(mutant_spec)
        plugins = ["-p", "no:randomly", "-p", "no:xdist"]
        read_end, write_end = os.pipe()
        cmd = self.build_command(tests, rootdir=self.workspace.root, report=Path(f"/dev/fd/{write_end}"),
                             run_id=uuid.uuid4().hex, device=self.device, ledger=None, mutant=None, keyword=None,
                             pytest_args=plugins)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(cmd, cwd=self.workspace.root, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, pass_fds=(write_end,), start_new_session=True)
        finally:
            os.close(write_end)
        with self._lock:
            self._live.add(proc)
        tail: list[bytes] = []

        def pump() -> None:
            for line in proc.stdout:  # type: ignore[union-attr]
                tail.append(line)
                del tail[:-200]

        def report() -> None:
            with open(read_end, encoding="utf-8", errors="replace") as stream:
                for raw in stream:
                    try:
                        event = json.loads(raw)
                    except json.JSONDecodeError:
                        continue
                    if not isinstance(event, dict) or event.get("event") != "outcome":
                        continue
                    fid, verdict = str(event.get("falsifier")), str(event.get("verdict") or "ERROR")
                    out.verdicts.append((fid, verdict, str(event.get("message") or "").strip()))
                    out.cells[_cell_key(fid, event.get("device"), event.get("subject"))] = verdict
                    executed = event.get("executed_code")
                    if isinstance(executed, dict):  # pv.execution: module -> unit -> digest
                        units = out.units.setdefault(fid, {})
                        for module, by_unit in executed.items():
                            units.setdefault(module, set()).update(by_unit or {})
                    else:
                        out.units_unknown.add(fid)
                    out.durations[fid] = out.durations.get(fid, 0.0) + float(event.get("duration_s") or 0)
                    if on_verdict is not None:
                        on_verdict(fid, verdict, float(event.get("duration_s") or 0))
                    if verdict == "FAIL" and stop_on_fail and out.killed_by is None:
                        out.killed_by = fid
                        out.stopped = True
                        _kill_group(proc)

        threads = [threading.Thread(target=pump, daemon=True), threading.Thread(target=report, daemon=True)]
        for thread in threads:
            thread.start()
        limit = timeout
        if deadline is not None:
            left = max(1.0, deadline - time.monotonic())
            limit = left if limit is None else min(limit, left)
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.wait()
            within_budget = deadline is None or time.monotonic() < deadline - 0.5
            out.timed_out = within_budget and timeout is not None
            out.stopped = out.stopped or not out.timed_out
        finally:
            with self._lock:
                self._live.discard(proc)
        for thread in threads:
            thread.join(timeout=10)
        out.seconds = time.monotonic() - started
        out.returncode = proc.returncode
        out.output = b"".join(tail).decode("utf-8", "replace")
        seen = {fid for fid, _, _ in out.verdicts}
        out.missing = [t.falsifier for t in tests if t.falsifier not in seen]
        return out


def _cell_key(falsifier: str, device: Any, subject: Any) -> str:
    return f"{falsifier}|{device}|{subject or ''}"


def _bare(nodeid: str) -> str:
    """A node id without its parameters: `f.py::test_x[cpu]` -> `f.py::test_x`."""
    return nodeid.split("[", 1)[0]


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the pytest process and every child it started
    except (ProcessLookupError, PermissionError):
        pass


def describe_exit(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the test process was killed by {name}"
    return f"the test process exited with status {returncode}"


def shared_machine_artifact(proc: ProcessResult, timing: set[str], jobs: int) -> str | None:
    """Why this mutant's ERROR says nothing about the mutant, or None where it may. With several
    mutant processes on one machine, a falsifier that measures time (timing_observations) sees
    the others' load (throughput.UnstableMeasurement), and any falsifier can find the GPU's
    memory taken by them: an ERROR in which every errored falsifier is one of these is the
    machine's, not the mutant's. Such a result is not recorded (a rerun at -j 1 judges it), so it
    never replaces an earlier verdict of the same mutant. A kill, a timeout or a crash is kept."""
    if jobs <= 1 or proc.killed_by or proc.timed_out or proc.missing:
        return None
    errors = [(f, m) for f, v, m in proc.verdicts if v == "ERROR"]
    if not errors:
        return None
    for fid, message in errors:
        if fid not in timing and "out of memory" not in message.lower():
            return None
    return (f"{', '.join(sorted({f for f, _ in errors}))} errored with {jobs} mutant processes sharing the machine "
            f"(a timing or out-of-memory error)")


def classify(proc: ProcessResult) -> tuple[str, str]:
    """(result, message) of one mutant's run."""
    if proc.killed_by:
        message = next((m for f, v, m in proc.verdicts if f == proc.killed_by and v == "FAIL"), "")
        return store.KILLED, message.splitlines()[0][:300] if message else ""
    if proc.timed_out:
        return store.TIMEOUT, f"no verdict within {proc.seconds:.0f}s"
    errors = [(f, m) for f, v, m in proc.verdicts if v == "ERROR"]
    if errors:
        fid, message = errors[0]
        first = message.splitlines()[0][:300] if message else ""
        return store.ERROR, f"{fid} errored: {first}" + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else "")
    if proc.missing:
        return store.ERROR, (f"{describe_exit(proc.returncode)} before {len(proc.missing)} falsifier(s) reported "
                             f"(first: {proc.missing[0]})")
    if not any(v == "PASS" for _, v, _ in proc.verdicts):
        return store.ERROR, "no falsifier ran (every one skipped)"
    return store.SURVIVED, f"{sum(1 for _, v, _ in proc.verdicts if v == 'PASS')} falsifier test(s) passed"


# --- the run -----------------------------------------------------------------------------------


@dataclass
class MutateRun:
    workspace: Workspace
    mplan: MutatePlan
    results_path: Path
    device: str
    jobs: int = 1
    time_budget: float | None = None
    timeout: float | None = None  # per mutant; None: from the baseline
    seed: int = 0
    echo: Callable[..., None] = print
    # builds a pytest command line for generated tests: pv.commands.run.pytest_command (the verb
    # passes it in; a core module does not import the verbs)
    build_command: Callable[..., list[str]] | None = None
    excluded: dict[str, str] = field(default_factory=dict)  # falsifier -> why it judges nothing
    executed: dict[str, dict[str, set[str]]] = field(default_factory=dict)  # falsifier -> module -> units it ran
    passing_tests: dict[str, list[Any]] = field(default_factory=dict)  # falsifier -> its cells that PASS unmutated
    baseline_seconds: dict[str, float] = field(default_factory=dict)
    start_up: float = START_UP_S
    recorded: list[dict[str, Any]] = field(default_factory=list)  # lines written by this run
    skipped_fresh: int = 0
    left: int = 0  # not run: the time budget ran out
    deferred: list[str] = field(default_factory=list)  # mutant ids whose ERROR was the shared machine's (unrecorded)

    def __post_init__(self) -> None:
        assert self.build_command is not None, "MutateRun needs build_command (pv.commands.run.pytest_command)"
        self.runner = Runner(self.workspace, self.device, self.build_command)
        self._lock = threading.Lock()
        self._kills: dict[str, dict[str, int]] = {}  # module -> falsifier -> kills so far
        self._started = time.monotonic()
        self._deadline = None if self.time_budget is None else self._started + self.time_budget

    # baseline -------------------------------------------------------------------------------
    def _code_digest(self, fid: str) -> str:
        roots = codebind.search_roots(self.workspace.root)
        digests = codebind.bind([self.mplan.check_module[fid]], self.workspace.bound_packages, roots)
        return store.suite_digest(digests.items())

    def baseline(self, previous: dict[str, dict[str, Any]]) -> None:
        # Only the falsifiers that judge a mutant of this run (a sample, or --only, may leave
        # whole modules without one): a baseline is a full run of each, the costliest step.
        judging = sorted({f for c in self.mplan.candidates for f in c.target.falsifiers})
        code = {fid: self._code_digest(fid) for fid in judging}
        todo = []
        for fid in judging:
            line = previous.get(fid)
            if line and line.get("definition") == self.mplan.definitions[fid] and line.get("code") == code[fid] \
                    and line.get("device") == self.device and "units" in line and "cells" in line:
                self._take_baseline(fid, line)
            else:
                todo.append(fid)
        if not todo:
            self.echo(f"baseline: {len(judging)} falsifier(s) reused from {self.results_path.name}")
            return
        self.echo(f"baseline: {len(todo)} falsifier(s) run unmutated first ({len(judging) - len(todo)} reused); "
                  "each records the functions it executes")
        chunks = [todo[i::self.jobs] for i in range(min(self.jobs, len(todo)))]
        total = sum(len(self.mplan.tests[fid]) for fid in todo)
        seen = [0]

        def progress(fid: str, verdict: str, seconds: float) -> None:
            with self._lock:
                seen[0] += 1
                self.echo(f"  baseline [{seen[0]}/{total} {time.monotonic() - self._started:.0f}s] {fid} {verdict} "
                          f"({seconds:.1f}s)")

        def one(chunk: list[str]) -> list[dict[str, Any]]:
            tests = [t for fid in chunk for t in self.mplan.tests[fid]]
            proc = self.runner.run(tests, timeout=None, stop_on_fail=False, deadline=self._deadline,
                                   on_verdict=progress)
            lines = []
            for fid in chunk:
                verdicts = sorted({v for f, v, _ in proc.verdicts if f == fid})
                if proc.stopped and sum(f == fid for f, _, _ in proc.verdicts) < len(self.mplan.tests[fid]):
                    continue  # the time budget stopped it before its last cell: unrecorded, the rerun runs it
                why = next((m for f, v, m in proc.verdicts if f == fid and v != "PASS"), "")
                units = None if fid in proc.units_unknown or fid not in proc.units else \
                    {m: sorted(u) for m, u in sorted(proc.units[fid].items()) if m in self.mplan.targets}
                lines.append({"kind": "baseline", "format": store.RESULTS_FORMAT, "falsifier": fid,
                              "device": self.device, "verdicts": verdicts or ["MISSING"],
                              "message": why.splitlines()[0][:300] if why else
                              ("" if verdicts else describe_exit(proc.returncode)),
                              "seconds": round(proc.durations.get(fid, 0.0), 3),
                              "start_up": round(max(0.0, proc.seconds - sum(proc.durations.values())), 1),
                              "definition": self.mplan.definitions[fid], "code": code[fid],
                              "cells": {k: v for k, v in sorted(proc.cells.items()) if k.startswith(fid + "|")},
                              "units": units, "time_utc": _now()})
            return lines

        with ThreadPoolExecutor(max_workers=len(chunks)) as pool:
            lines = [line for chunk_lines in pool.map(one, chunks) for line in chunk_lines]
        store.append(self.results_path, lines)
        for line in lines:
            self._take_baseline(line["falsifier"], line)

    def _take_baseline(self, fid: str, line: dict[str, Any]) -> None:
        self.baseline_seconds[fid] = float(line.get("seconds") or 0.0)
        self.start_up = max(self.start_up, float(line.get("start_up") or 0.0))
        if line.get("units") is not None:  # None: the run could not tell what it executed
            self.executed[fid] = {m: set(v) for m, v in line["units"].items()}
        verdicts = line.get("verdicts") or []
        cells = line.get("cells")
        passing = [t for t in self.mplan.tests[fid]
                   if verdicts == ["PASS"] or (cells or {}).get(_cell_key(fid, t.device, t.subject)) == "PASS"]
        if passing:
            self.passing_tests[fid] = passing  # a cell that SKIPs here (device or subject absent) is not run
        else:
            self.excluded[fid] = f"{'/'.join(verdicts)} unmutated" + (f": {line['message']}" if line.get("message") else "")

    # mutants --------------------------------------------------------------------------------
    def judges(self, target: Target, site: operators.Site | None = None) -> list[str]:
        """The falsifiers that judge a mutant of `target` (with `site`: those that executed the
        function holding it in the baseline, pv.execution), likeliest killers first, then quickest."""
        kills = self._kills.get(target.module, {})
        usable = [f for f in target.falsifiers if f not in self.excluded]
        if site is not None:
            unit = target.unit_of(site.line)
            usable = [f for f in usable if f not in self.executed or unit in self.executed[f].get(target.module, ())]
        return sorted(usable, key=lambda f: (-kills.get(f, 0), self.baseline_seconds.get(f, 0.0), f))

    def suite(self, target: Target) -> str:
        fids = [f for f in target.falsifiers if f not in self.excluded]
        return store.suite_digest((f, self.mplan.definitions[f]) for f in fids)

    def run(self, previous: dict[str, dict[str, Any]]) -> None:
        todo = []
        for candidate in self.mplan.candidates:
            line = previous.get(candidate.site.id)
            target = candidate.target
            if line and store.is_fresh(line, target.digest, self.suite(target), self.mplan.definitions):
                self.skipped_fresh += 1
                continue
            todo.append(candidate)
        total = len(todo)
        if self.skipped_fresh:
            self.echo(f"{self.skipped_fresh} mutant(s) already have fresh results: skipped (resume)")
        self.echo(f"{total} mutant(s) to run, {self.jobs} at a time")
        done = [0]
        workdir = Path(tempfile.mkdtemp(prefix="pv-mutate-"))
        try:
            def one(candidate: Candidate) -> None:
                if self._deadline is not None and time.monotonic() >= self._deadline:
                    with self._lock:
                        self.left += 1
                    return
                line = self._one(candidate, workdir)
                if line is None:  # stopped by the time budget, or the shared machine's ERROR: not recorded, a rerun does it
                    with self._lock:
                        if candidate.site.id not in self.deferred:
                            self.left += 1
                    return
                store.append(self.results_path, [line])
                with self._lock:
                    self.recorded.append(line)
                    done[0] += 1
                    if line["result"] == store.KILLED:
                        counts = self._kills.setdefault(line["module"], {})
                        counts[line["killed_by"]] = counts.get(line["killed_by"], 0) + 1
                    self.echo(_progress(line, done[0], total, time.monotonic() - self._started))

            with ThreadPoolExecutor(max_workers=self.jobs) as pool:
                futures = [pool.submit(one, c) for c in todo]
                try:
                    for future in futures:
                        future.result()
                except BaseException:
                    for future in futures:
                        future.cancel()
                    self.runner.stop_all()
                    raise
        finally:
            for path in workdir.glob("*"):
                path.unlink(missing_ok=True)
            workdir.rmdir()

    def _one(self, candidate: Candidate, workdir: Path) -> dict[str, Any] | None:
        site, target = candidate.site, candidate.target
        judges = self.judges(target, site)
        bound = self.judges(target)
        line: dict[str, Any] = {
            "kind": "mutant", "format": store.RESULTS_FORMAT, "id": site.id, "module": target.module,
            "path": target.rel, "line": site.line, "col": site.col, "scope": site.scope, "operator": site.operator,
            "original": site.original, "replacement": site.replacement, "module_digest": target.digest,
            "falsifiers": judges, "contracts": sorted({self.mplan.contract_of[f] for f in bound}),
            "definitions": {f: self.mplan.definitions[f] for f in judges}, "suite": self.suite(target),
            "device": self.device, "seed": self.seed, "killed_by": None, "diff": "", "time_utc": _now()}
        try:
            mutated = operators.apply(target.source, site, target.rel)
            compile(mutated, str(target.path), "exec")
        except (operators.MutationSourceError, SyntaxError, ValueError) as exc:
            return {**line, "result": store.NOT_APPLIED, "message": str(exc)[:300], "seconds": 0.0}
        line["diff"] = operators.unified_diff(target.source, mutated, target.rel)
        if not bound:
            return {**line, "result": store.NOT_APPLIED, "seconds": 0.0,
                    "message": "no falsifier that binds this module passes unmutated"}
        if not judges:
            return {**line, "result": store.SURVIVED, "seconds": 0.0, "executed": False,
                    "message": f"no falsifier executes {site.scope if site.scope != '<module>' else 'this module-level code'} "
                                                   "(pv's executed-code binding, in the baseline)"}
        source_file = workdir / f"{site.id}.py"
        spec_file = workdir / f"{site.id}.json"
        source_file.write_text(mutated, encoding="utf-8")
        spec_file.write_text(json.dumps({"module": target.module, "path": str(target.path),
                                         "mutated_source": str(source_file)}), encoding="utf-8")
        try:
            tests = [t for fid in judges for t in self.passing_tests.get(fid, self.mplan.tests[fid])]
            limit = self.timeout or 3 * (self.start_up + sum(self.baseline_seconds.get(f, 0.0) for f in judges)) + 10
            proc = self.runner.run(tests, timeout=limit, mutant_spec=spec_file, deadline=self._deadline)
        finally:
            source_file.unlink(missing_ok=True)
            spec_file.unlink(missing_ok=True)
        if proc.stopped and not proc.killed_by:
            return None
        artifact = shared_machine_artifact(proc, self.mplan.timing, self.jobs)
        if artifact is not None:
            self.echo(f"not recorded: {site.id} {target.rel}:{site.line}: {artifact}")
            with self._lock:
                self.deferred.append(site.id)
            return None
        result, message = classify(proc)
        return {**line, "result": result, "killed_by": proc.killed_by, "message": message,
                "ran": len({f for f, _, _ in proc.verdicts}), "seconds": round(proc.seconds, 2)}


def _progress(line: dict[str, Any], done: int, total: int, elapsed: float) -> str:
    who = f" by {line['killed_by']}" if line.get("killed_by") else (f": {line['message'][:80]}"
                                                                      if line["result"] != store.SURVIVED else "")
    return (f"[{done}/{total} {elapsed:.0f}s] {line['result']:<11} {line['path']}:{line['line']} "
            f"{line['scope']} {line['operator']}: {line['original'][:40]} -> {line['replacement'][:40]}"
            f"{who} ({line['seconds']:.1f}s)")


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
