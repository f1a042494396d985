"""`pv run`: run falsifiers on cpu/cuda and record the evidence in the ledger.

    pv run FALSIFY-CUDA-FORWARD-PARITY-001 [FALSIFY-... ...]
    pv run --contract apr-pretrain-cuda-forward-parity
    pv run --all --device cpu
    pv run --all -- -x -n 2          # everything after `--` goes to pytest
    pv run --contract apr-cpu-forward-sanity --subject tiny-trained
    pv run --contract apr-cpu-forward-sanity --subject-path ~/my-checkpoint

First makes sure generated_tests/ is up to date (regenerating in-process if not, and saying
so), then runs pytest in a subprocess on the selected generated tests with pv's plugin, which
records only the selected cells (`--pv-cells`). One line per finished falsifier test (streamed
from the plugin's `--pv-report`), then a table of verdicts with observed values and margins.

Exit status: 0 when nothing was falsified or errored (SKIPs alone exit 0, but are called out as
"not evidence"); 1 when anything FAILed or ERRORed, or pytest itself broke; 2 for usage errors.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import click

from pv.commands import pass_workspace
from pv.config import Workspace
from pv.identity import cells_option
from pv.outcome import Outcome
from pv.runview import print_table, progress_line, summary_lines

DEVICES = ("cpu", "cuda", "auto")
DEFAULT = object()  # "the workspace's ledger"


@dataclass(frozen=True)
class Selected:
    falsifier: str
    contract: str
    device: str
    nodeid: str
    subject: str | None = None  # None: a falsifier without subjects
    runtime: str | None = None  # None: a falsifier without runtimes

    @property
    def cell(self) -> tuple[str, str, str | None, str | None]:
        return (self.falsifier, self.device, self.subject, self.runtime)


@dataclass
class RunResult:
    run_id: str
    selected: list[Selected]
    outcomes: list[Outcome] = field(default_factory=list)
    returncodes: list[int] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # node ids that reported no outcome
    # outcomes whose ledger record could not be written (a read-only or unreachable ledger):
    # a verdict nobody can see later is no evidence, so the run is not ok
    unrecorded: list[Outcome] = field(default_factory=list)
    output: str = ""  # pytest's combined output (all repetitions)

    def count(self, verdict: str) -> int:
        return sum(1 for o in self.outcomes if o.verdict == verdict)

    @property
    def broken(self) -> bool:
        """pytest failed in a way that is not a verdict (usage, collection, internal error)."""
        return any(rc not in (0, 1) for rc in self.returncodes) or bool(self.missing) or bool(self.unrecorded)

    @property
    def ok(self) -> bool:
        return not (self.count("FAIL") or self.count("ERROR") or self.broken)


# --- selection -------------------------------------------------------------------------------


def _suggest(word: str, candidates: Iterable[str]) -> str:
    candidates = list(candidates)
    upper = {c.upper(): c for c in candidates}
    near = difflib.get_close_matches(word.upper(), list(upper), n=3, cutoff=0.6)
    if near:
        return "; did you mean " + " or ".join(upper[n] for n in near) + "?"
    return ""


def select(plan: Any, ids: Iterable[str], contracts: Iterable[str], everything: bool, device: str,
           subject: str | None = None, skip_subjects: Iterable[str] = (), runtime: str | None = None) -> list[Selected]:
    """The generated tests to run, in contract/falsifier/subject/device order. `subject`: only
    that subject's cells; a `path:DIR` subject (pv.subjects) runs every selected falsifier that
    takes subjects on that checkpoint instead of its declared ones. `skip_subjects`: leave those
    subjects' cells out (a production-scale subject on a machine that cannot build it).
    Raises click.UsageError."""
    from pv.codegen import function_name, test_name
    from pv.runtimes import cells
    from pv.subjects import is_path_subject

    ids, contracts = list(ids), list(contracts)
    index = plan.falsifiers()
    by_contract: dict[str, list[str]] = {}
    for fid, (target, _) in index.items():
        by_contract.setdefault(target.contract.metadata.id, []).append(fid)
    for fid in ids:
        if fid not in index:
            raise click.UsageError(f"unknown falsifier {fid!r}{_suggest(fid, index)}")
    for cid in contracts:
        if cid not in by_contract:
            raise click.UsageError(f"unknown contract {cid!r}{_suggest(cid, by_contract)}")
    if not (ids or contracts or everything):
        raise click.UsageError("name falsifiers (FALSIFY-...), --contract ID, or --all")
    wanted = set(ids)
    for cid in contracts:
        wanted.update(by_contract[cid])
    if everything:
        wanted.update(index)
    adhoc = is_path_subject(subject)
    if subject is not None:
        _check_subject(index, wanted, ids, subject, adhoc)
    declared = sorted({s for _, f in index.values() for s in (f.subjects or [])})
    for name in (n for n in skip_subjects if n not in declared):
        raise click.UsageError(f"--skip-subject {name!r}: no falsifier declares it{_suggest(name, declared)}")
    selected: list[Selected] = []
    unavailable: list[str] = []
    for fid, (target, f) in index.items():  # plan order: deterministic
        if fid not in wanted:
            continue
        devices = list(f.devices) if device == "auto" else [d for d in f.devices if d == device]
        if not devices:
            unavailable.append(f"{fid} (declares {', '.join(f.devices)})")
        rel = plan.workspace.rel(target.path)
        subjects: list[str | None] = list(f.subjects or [None])
        if subject is not None:
            subjects = [subject] if (adhoc and f.subjects) or subject in subjects else []
        subjects = [s for s in subjects if s not in skip_subjects]
        for subj, dev, rt in cells(f.runtimes, subjects, devices, runtime):  # (pv.runtimes)
            # An ad-hoc subject is not in the generated parametrization: pytest gets the
            # function and the plugin narrows it (--pv-device, --pv-subject).
            name = function_name(fid) if adhoc else test_name(fid, dev, subj, rt)
            selected.append(Selected(fid, target.contract.metadata.id, dev, f"{rel}::{name}", subj, rt))
    named_but_unavailable = [u for u in unavailable if u.split(" ")[0] in set(ids)]
    if named_but_unavailable:
        raise click.UsageError(f"not declared for --device {device}: " + "; ".join(named_but_unavailable))
    if not selected:
        raise click.UsageError(f"nothing to run on --device {device}"
                               + (f" with subject {subject}" if subject else ""))
    return selected


def _check_subject(index: dict[str, Any], wanted: set[str], ids: list[str], subject: str, adhoc: bool) -> None:
    """A named falsifier must take subjects (and, for a declared name, declare it); some selected
    falsifier must."""
    takes = [fid for fid in wanted if index[fid][1].subjects]
    if adhoc:
        refused = [fid for fid in ids if not index[fid][1].subjects]
        if refused:
            raise click.UsageError(f"--subject-path: {', '.join(refused)} declare(s) no `subjects:`, so no "
                                   "checkpoint can be given to them")
        if not takes:
            raise click.UsageError("--subject-path: none of the selected falsifiers declares `subjects:`")
        return
    declared = sorted({s for fid in wanted for s in (index[fid][1].subjects or [])})
    refused = [fid for fid in ids if subject not in (index[fid][1].subjects or [])]
    if refused or subject not in declared:
        who = ", ".join(refused) if refused else "the selected falsifiers"
        raise click.UsageError(f"--subject {subject!r}: not a subject of {who}; declared: "
                               f"{', '.join(declared) or 'none'}{_suggest(subject, declared)}")


def select_stale(workspace: Workspace, plan: Any, ids: Iterable[str], contracts: Iterable[str], device: str,
                 ledger_path: Path, subject: str | None = None, skip_subjects: Iterable[str] = (),
                 runtime: str | None = None) -> list[Selected]:
    """The generated tests of every falsifier x required cell (subject x device) whose deciding
    evidence is STALE (pv status's rule), narrowed by ids / contracts / device / subject /
    skip_subjects / runtime, as `select` narrows a plain selection. The evidence is the
    workspace's ledger followed by `ledger_path` when that is another file (on the GPU machine:
    the committed evidence, then what this machine has recorded since)."""
    from pv import ledger as ledger_mod
    from pv.statusreport import build_report, load_all, stale_rows
    from pv.identity import EvidenceCheck

    loaded, failures = load_all(workspace)
    records = ledger_mod.read(workspace.ledger).records
    if Path(ledger_path).resolve() != workspace.ledger.resolve():
        records = records + ledger_mod.read(ledger_path).records
    report = build_report(loaded, failures, records, workspace.rel(workspace.ledger), [], None,
                          EvidenceCheck(workspace, loaded), workspace.subject_param)
    owed = {(f.id, d.device, d.subject, d.runtime) for _, f, d in stale_rows(report)}
    ids, contracts = list(ids), list(contracts)
    candidates = select(plan, ids, contracts, not (ids or contracts), device, subject, skip_subjects, runtime)
    return [s for s in candidates if s.cell in owed]


# --- execution -------------------------------------------------------------------------------


def plugin_autoloads() -> bool:
    """Whether pytest will load pv's plugin by itself (pv installed with its pytest11 entry point)."""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    from importlib import metadata

    try:
        return any(ep.value == "pv.plugin" for ep in metadata.entry_points(group="pytest11"))
    except Exception:  # noqa: BLE001 - broken metadata: load the plugin explicitly
        return False


def pytest_command(selected: list[Selected], *, rootdir: Path, report: Path, run_id: str, device: str,
                   ledger: Any, mutant: str | None, keyword: str | None,
                   pytest_args: Iterable[str] = (), subject: str | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", *dict.fromkeys(s.nodeid for s in selected), "--pv-cells",
           cells_option(selected), "--pv-report", str(report), "--pv-run-id", run_id, "--pv-device", device,
           "--tb=short", "-q", "-p", "no:cacheprovider", "--rootdir", str(rootdir)]
    if not plugin_autoloads():  # e.g. pv used from a source tree on PYTHONPATH (the GPU machine)
        cmd[3:3] = ["-p", "pv.plugin"]
    if ledger is None:
        cmd.append("--pv-no-ledger")
    else:
        cmd += ["--pv-ledger", str(ledger)]
    if mutant:
        cmd += ["--pv-mutant", mutant]
    if subject:
        cmd += ["--pv-subject", subject]
    if keyword:
        cmd += ["-k", keyword]
    cmd += list(pytest_args)
    return cmd


def _read_report(stream: Any, on_event: Callable[[dict[str, Any]], None]) -> None:
    """Read the plugin's report pipe line by line until pytest exits (EOF): no polling."""
    for raw in stream:
        if not raw.strip():
            continue
        try:
            event = json.loads(raw)
        except json.JSONDecodeError:
            continue  # a line the plugin did not write; the missing verdict is reported later
        if isinstance(event, dict):
            on_event(event)


def execute(workspace: Workspace, selected: list[Selected], *, device: str = "auto", repeat: int = 1,
            ledger: Any = DEFAULT, mutant: str | None = None, keyword: str | None = None,
            pytest_args: Iterable[str] = (), run_id: str | None = None, subject: str | None = None,
            on_outcome: Callable[[Outcome, int], None] | None = None,
            echo_output: Callable[[str], None] | None = None, git_commit: str | None = None) -> RunResult:
    """Run the selected generated tests `repeat` times in pytest subprocesses (the API that
    `pv strength` uses). `on_outcome(outcome, repetition)` is called as each test finishes.

    The plugin writes one JSON line per finished test to a pipe this process reads (passed as
    `--pv-report /dev/fd/N`); pytest's own output goes through another pipe."""
    run_id = run_id or uuid.uuid4().hex
    result = RunResult(run_id=run_id, selected=list(selected))
    if ledger is DEFAULT:
        ledger = workspace.ledger
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(workspace.root), *filter(None, [env.get("PYTHONPATH")])])
    if git_commit:
        env["PV_GIT_COMMIT"] = git_commit
    pytest_args = list(pytest_args)
    outputs: list[str] = []
    for rep in range(1, repeat + 1):
        read_end, write_end = os.pipe()
        cmd = pytest_command(selected, rootdir=workspace.root, report=Path(f"/dev/fd/{write_end}"), run_id=run_id,
                             device=device, ledger=ledger, mutant=mutant, keyword=keyword, pytest_args=pytest_args,
                             subject=subject)
        lines: list[str] = []
        try:
            proc = subprocess.Popen(cmd, cwd=workspace.root, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, errors="replace", pass_fds=(write_end,))
        finally:
            os.close(write_end)  # the child holds it now; EOF comes when the child exits

        def pump(stream=proc.stdout, sink=lines) -> None:
            for line in stream:  # type: ignore[union-attr]
                sink.append(line)
                if echo_output is not None:
                    echo_output(line.rstrip("\n"))

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        seen: set[tuple[Any, Any]] = set()

        def take(event: dict[str, Any], rep: int = rep, seen: set = seen) -> None:
            if event.get("event") != "outcome":
                return
            outcome = Outcome.from_json(event)
            outcome.repeat = rep
            seen.add((outcome.falsifier, outcome.device, outcome.subject, outcome.runtime))
            result.outcomes.append(outcome)
            if on_outcome is not None:
                on_outcome(outcome, rep)

        try:
            with open(read_end, encoding="utf-8", errors="replace") as report:
                _read_report(report, take)
            proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait()
            raise
        reader.join()
        result.returncodes.append(proc.returncode)
        outputs.append("".join(lines))
        if keyword is None and not pytest_args:  # -k / passthrough may deselect on purpose
            result.missing += [s.nodeid if s.nodeid.endswith("]") else f"{s.nodeid}[{s.device}-{s.subject}]"
                               for s in selected if s.cell not in seen]
    result.output = "\n".join(outputs)
    if ledger is not None:
        result.unrecorded = [o for o in result.outcomes if not o.record_id]
    return result


class _RunCommand(click.Command):
    """Everything after `--` goes to pytest untouched."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta["pv_pytest_args"] = args[cut + 1:]
            args = args[:cut]
        return super().parse_args(ctx, args)


@click.command(name="run", cls=_RunCommand)
@click.argument("falsifiers", nargs=-1, metavar="[FALSIFY-ID]...")
@click.option("--contract", "contracts", multiple=True, metavar="ID", help="Run every falsifier of a contract.")
@click.option("--all", "everything", is_flag=True, help="Run every falsifier.")
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True,
              help="Run on this device only; auto runs every declared device (absent ones SKIP visibly).")
@click.option("--repeat", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Run the selection N times (flakiness check); every run is recorded.")
@click.option("-k", "keyword", metavar="EXPR", default=None, help="pytest -k expression to narrow the selection.")
@click.option("--no-ledger", is_flag=True, help="Dry run: record nothing.")
@click.option("--ledger", "ledger_path", type=click.Path(dir_okay=False), default=None,
              help="Append to this ledger instead of [tool.pv] ledger (e.g. on the GPU machine).")
@click.option("--stale", is_flag=True,
              help="Run exactly the falsifier x device rows whose deciding evidence is STALE (definition or "
                   "code changed since); with --device, on that device only.")
@click.option("--subject", default=None, metavar="NAME",
              help="Run only this subject's cells (a name from the falsifiers' `subjects:`).")
@click.option("--skip-subject", "skip_subjects", multiple=True, metavar="NAME",
              help="Leave this subject's cells out (repeatable); they stay owed on the dashboard.")
@click.option("--runtime", default=None, metavar="NAME", help="Run only this runtime's cells ([tool.pv] runtimes).")
@click.option("--subject-path", default=None, metavar="DIR",
              help="Run the selected subject-taking falsifiers on your HF checkpoint DIR (recorded as subject "
                   "path:DIR with a digest; shown under 'Your checkpoints', never counted toward a contract).")
@click.option("--git-commit", default=None, metavar="SHA",
              help="The commit this tree is (wins over git; e.g. on a copy without .git). Or PV_GIT_COMMIT.")
@click.option("--mutant", default=None, hidden=True, help="Run under a planted bug (used by pv strength).")
@click.option("-v", "--verbose", is_flag=True, help="Show pytest's own output as it runs.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one JSON document on stdout (every outcome, verdict, observations, margin, explanation).")
@click.option("--junitxml", type=click.Path(dir_okay=False), default=None, metavar="PATH",
              help="Also write the outcomes as JUnit XML to PATH (for CI).")
@click.pass_context
@pass_workspace
def command(ctx: click.Context, falsifiers: tuple[str, ...], contracts: tuple[str, ...], everything: bool,
            device: str, repeat: int, keyword: str | None, no_ledger: bool, ledger_path: str | None,
            stale: bool, subject: str | None, skip_subjects: tuple[str, ...], runtime: str | None,
            subject_path: str | None, git_commit: str | None, mutant: str | None, verbose: bool, fmt: str,
            junitxml: str | None, *, workspace: Workspace) -> None:
    """Run falsifiers and record the evidence. Arguments after `--` go to pytest.

    \b
    Examples: pv run FALSIFY-DEMO-001 --device cpu;  pv run --contract demo;
              pv run --all --device cpu;  pv run --stale --device cpu

    Exit status: 0 nothing falsified or errored (SKIPs alone: 0, "not evidence"); 1 a FAIL or
    an ERROR, pytest broke, or a record could not be written; 2 usage error.
    """
    from pv import codegen, report
    from pv.subjects import subject_option

    pytest_args = list(ctx.meta.get("pv_pytest_args", []))
    if no_ledger and ledger_path:
        raise click.UsageError("--no-ledger and --ledger exclude each other")
    if stale and (everything or mutant):
        raise click.UsageError("--stale picks its own selection; it excludes --all and --mutant")
    if git_commit is not None and not re.fullmatch(r"[0-9a-fA-F]{7,64}", git_commit):
        raise click.UsageError(f"--git-commit {git_commit!r} is not a commit id (7 to 64 hex digits)")
    subject = subject_option(subject, subject_path, stale)
    quiet = fmt == "json"  # stdout carries the JSON document only; progress goes to stderr
    plan = codegen.ensure_fresh(workspace, echo=lambda line: click.echo(line, err=quiet))
    ledger: Any = None if no_ledger else (Path(ledger_path).resolve() if ledger_path else DEFAULT)
    ledger_file = None if ledger is None else (workspace.ledger if ledger is DEFAULT else ledger)
    if stale:
        selected = select_stale(workspace, plan, falsifiers, contracts, device,
                                ledger_file or workspace.ledger, subject, skip_subjects, runtime)
        if not selected:
            click.echo(f"nothing is stale on {device}: every deciding record matches the current definition and code",
                       err=quiet)
            return
    else:
        selected = select(plan, falsifiers, contracts, everything, device, subject, skip_subjects, runtime)
    if mutant:
        _check_mutant(workspace, mutant)

    ledger_label = None if ledger_file is None else workspace.rel(ledger_file)
    if ledger_file is not None:
        _warn_ledger_problems(ledger_file, ledger_label)

    total = len(selected) * repeat
    what = f"{len(selected)} falsifier test(s)" + (f" x {repeat}" if repeat > 1 else "")
    click.echo(f"running {what} on {device}" + (f" under mutant {mutant}" if mutant else "")
               + (f" with subject {subject}" if subject else "")
               + ("" if ledger_label else " (dry run)"), err=quiet)
    done = 0

    def on_outcome(event: Outcome, _rep: int) -> None:
        nonlocal done
        done += 1
        click.echo(progress_line(event, done, total, mutant), err=quiet)

    result = execute(workspace, selected, device=device, repeat=repeat, ledger=ledger, mutant=mutant,
                     keyword=keyword, pytest_args=pytest_args, on_outcome=on_outcome, git_commit=git_commit,
                     subject=subject,
                     echo_output=(lambda line: click.echo(line, err=True)) if verbose else None)
    if result.broken and not verbose:
        click.echo(result.output.rstrip("\n")[-20000:], err=True)
    if result.outcomes and not quiet:
        print_table(result, mutant, repeat)
        if repeat > 1:
            click.echo("\n" + "\n".join(report.spread_lines(report.spreads(result.outcomes))))
    click.echo("", err=quiet)
    for line in summary_lines(result, mutant, ledger_label):
        click.echo(click.style(line, bold=True, fg="yellow" if "skipped" in line else None), err=quiet)
    if quiet:
        click.echo(report.document_text(result, device=device, mutant=mutant, ledger=ledger_label, repeat=repeat),
                   nl=False)
    if junitxml and not report.write_junit(junitxml, result):
        sys.exit(1)
    if result.missing:
        click.echo(click.style(f"{len(result.missing)} selected test(s) reported no verdict (see pytest's output "
                               "above):", fg="red", bold=True), err=True)
        for nodeid in result.missing[:20]:
            click.echo(f"  {nodeid}", err=True)
    if result.unrecorded:
        why = next((line.strip() for o in result.unrecorded for line in str(o.message).splitlines()
                    if "could not write the ledger record" in line), "")
        click.echo(click.style(f"{len(result.unrecorded)} outcome(s) could not be recorded in {ledger_label}"
                               + (f": {why}" if why else "") + "; make the ledger writable (or use --no-ledger "
                               "for a dry run) and run again", fg="red", bold=True), err=True)
    if any(rc not in (0, 1) for rc in result.returncodes):
        click.echo(click.style(f"pytest exited with status {result.returncodes}", fg="red"), err=True)
    if not result.ok:
        sys.exit(1)


def _check_mutant(workspace: Workspace, name: str) -> None:
    from pv import mutation

    path = mutation.module_path(workspace)
    if path is None:
        if not workspace.mutants_module:
            raise click.UsageError("--mutant: no mutants_module in [tool.pv]")
        return  # not found statically; the plugin will import it and report
    try:
        names = sorted({d.name for d in mutation.scan_mutant_names(path)})
    except mutation.MutationError as exc:
        raise click.UsageError(f"--mutant: {exc}") from None
    if name not in names:
        raise click.UsageError(f"--mutant: {mutation.UnknownMutant(name, names).describe()}")


def _warn_ledger_problems(path: Path, label: str | None) -> None:
    from pv import ledger

    if not path.exists():
        return
    problems = ledger.read(path).problems
    if problems:
        click.echo(click.style(f"warning: {label or path} has {len(problems)} bad line(s) "
                               f"(first: line {problems[0].line}: {problems[0].message}); new records are "
                               "appended after them. Run `pv ledger check`.", fg="yellow"), err=True)
