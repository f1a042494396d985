"""`pv mutate`: automatic source mutants of the code the selected falsifiers bind.

    pv mutate --all --device cpu --sample 300 --seed 0 -j 2
    pv mutate --contract welford-variance --device cpu
    pv mutate FALSIFY-X-001 --module pvlab.runtime.kernels --time-budget 600

Each mutant changes one site of one bound module (pv.automutate.operators), is served to a
pytest process by an import hook (the user's files are never edited) and is judged by the
falsifiers whose bound code holds that module; the first FAIL kills it. Results go to the
results file (resumable: a rerun skips the mutants that already have a fresh result) and to
the `## Mutation score` section of `pv status`.

Exit status: 0 when no judged mutant survived (or the score reaches --fail-under); 1 when a
mutant survived (a behaviour nothing checks), a falsifier fails unmutated, or the time budget
left mutants unrun; 2 for usage errors (an unknown falsifier or contract, a selection that
binds no code, a results path that cannot be written, a malformed equivalents file).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pv.commands import pass_workspace
from pv.config import Workspace


@click.command(name="mutate")
@click.argument("falsifiers", nargs=-1, metavar="[FALSIFY-ID]...")
@click.option("--contract", "contracts", multiple=True, metavar="ID", help="The falsifiers of this contract.")
@click.option("--all", "everything", is_flag=True, help="Every falsifier.")
@click.option("--device", type=click.Choice(["cpu", "cuda", "auto"]), default="auto", show_default=True,
              help="Run the falsifiers on this device only.")
@click.option("--module", "modules", multiple=True, metavar="NAME",
              help="Mutate only this module (or package) of the bound code (repeatable).")
@click.option("--operator", "ops", multiple=True, metavar="NAME",
              help="Only these operators (repeatable): compare, boolean, constant, statement, arguments, dtype, "
                   "device, return, arithmetic.")
@click.option("--sample", type=click.IntRange(min=1), default=None, help="Run N mutants sampled with --seed (default: all).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sample's order.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="Mutants' pytest processes at a time.")
@click.option("--time-budget", type=click.FloatRange(min=1), default=None, metavar="SECONDS",
              help="Start no mutant after this many seconds; stop the running ones (unrecorded: a rerun resumes).")
@click.option("--timeout", type=click.FloatRange(min=1), default=None, metavar="SECONDS",
              help="Per-mutant limit (default: 3x its falsifiers' baseline time plus start-up).")
@click.option("--results", "results_path", type=click.Path(dir_okay=False), default=None,
              help="Results file (default: mutation.jsonl beside the ledger).")
@click.option("--equivalents", "equivalents_path", type=click.Path(dir_okay=False), default=None,
              help="Marked equivalent mutants (default: equivalent-mutants.toml beside the ledger).")
@click.option("--only", "only", multiple=True, metavar="ID",
              help="Only this mutant of the selection (its id from --list or the results; repeatable): re-judge "
                   "chosen mutants of a sample without re-drawing it (--module changes the sample).")
@click.option("--list", "list_only", is_flag=True, help="List the sampled mutants (id, where, change); run nothing.")
@click.option("--fail-under", type=click.FloatRange(0, 100), default=None, metavar="PERCENT",
              help="Exit 1 only when the score of this run's selection is below PERCENT.")
@click.option("--skip-subject", "skip_subjects", multiple=True, metavar="NAME",
              help="Leave out the cells of this subject (repeatable), e.g. a production-size checkpoint this "
                   "machine has not built: the same falsifiers judge, on their other subjects.")
@pass_workspace
def command(falsifiers: tuple[str, ...], contracts: tuple[str, ...], everything: bool, device: str,
            modules: tuple[str, ...], ops: tuple[str, ...], sample: int | None, seed: int, jobs: int,
            time_budget: float | None, timeout: float | None, results_path: str | None,
            equivalents_path: str | None, only: tuple[str, ...], list_only: bool, fail_under: float | None,
            skip_subjects: tuple[str, ...] = (), *, workspace: Workspace) -> None:
    """Mutate the code the selected falsifiers bind and report which mutants they kill."""
    from pv import codegen

    try:
        import libcst  # noqa: F401 - the rewriting library: an extra, so pv itself stays light
    except ImportError:
        raise click.UsageError("pv mutate needs libcst: pip install 'pv[mutate]'") from None
    from pv.automutate import engine, operators, report, results as store
    from pv.commands.run import pytest_command, select

    unknown_ops = [o for o in ops if o not in operators.OPERATORS]
    if unknown_ops:
        raise click.UsageError(f"unknown operator(s) {', '.join(unknown_ops)}; known: {', '.join(operators.OPERATORS)}")
    if not workspace.code_packages:
        raise click.UsageError("no code under test to mutate: set `code_packages` in [tool.pv] of "
                               f"{workspace.rel(workspace.pyproject)} to the package(s) your checks measure")
    default_results, default_equivalents = report.default_paths(workspace)
    results_file = Path(results_path).resolve() if results_path else default_results
    equivalents_file = Path(equivalents_path).resolve() if equivalents_path else default_equivalents
    try:
        if not list_only:
            store.check_writable(results_file)
        equivalents = store.read_equivalents(equivalents_file)
        previous = store.read(results_file)
    except store.ResultsError as exc:
        raise click.UsageError(str(exc)) from None

    plan = codegen.ensure_fresh(workspace)
    chosen = select(plan, falsifiers, contracts, everything, device, None, skip_subjects)
    mplan = engine.plan_targets(workspace, plan, chosen, modules)
    if not mplan.targets:
        what = f" in {', '.join(modules)}" if modules else ""
        raise click.UsageError(f"the selected falsifiers bind no module of code_packages "
                               f"({', '.join(workspace.code_packages)}){what}: their checks import none of it, so "
                               "there is nothing to mutate")
    problems = engine.sample_candidates(mplan, seed, sample, ops or operators.OPERATORS, only)
    missing = sorted(set(only) - {c.site.id for c in mplan.candidates})
    if missing:
        raise click.UsageError(f"--only {', '.join(missing)}: not a mutant of this selection (the falsifiers, "
                               f"--module, --operator, --sample and --seed {seed} that drew it); `pv mutate ... --list` "
                               "shows the selection's ids")
    for problem in problems:
        click.echo(click.style(f"not mutated: {problem}", fg="yellow"), err=True)
    click.echo(f"{len(mplan.targets)} bound module(s), {mplan.total_sites} mutation site(s); "
               f"{len(mplan.candidates)} mutant(s) selected (seed {seed})")
    if list_only:
        for c in mplan.candidates:
            click.echo(f"{c.site.id}  {c.target.rel}:{c.site.line}  {c.site.scope}  {c.site.label()}")
        return
    if not mplan.candidates:
        raise click.UsageError("no mutant to run: the bound modules have no mutation site"
                               + (" (every one failed to parse)" if problems else ""))

    run = engine.MutateRun(workspace, mplan, results_file, device, jobs=jobs, time_budget=time_budget,
                           timeout=timeout, seed=seed, echo=click.echo,
                           build_command=pytest_command)
    try:
        run.baseline(previous.baseline)
        for fid, why in sorted(run.excluded.items()):
            click.echo(click.style(f"left out: {fid} does not pass unmutated ({why})", fg="red"), err=True)
        run.run(previous.mutants)
    except store.ResultsError as exc:
        click.echo(click.style(f"error: {exc}", fg="red"), err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted: {len(run.recorded)} result(s) recorded; rerun to resume", err=True)
        sys.exit(130)

    # the selection's results: fresh ones from before and this run's
    latest = store.read(results_file).mutants
    ids = [c.site.id for c in mplan.candidates]
    lines = [latest[i] for i in ids if i in latest]
    total = store.Tally()
    for line in lines:
        total.add(line["result"], line["id"] in equivalents)
    click.echo("")
    for module, tally in store.tallies(lines, equivalents, "module").items():
        click.echo(f"{module}: {tally.line()}")
    click.echo(click.style(f"mutation score: {total.line()}", bold=True))
    survivors = [x for x in lines if x["result"] == store.SURVIVED and x["id"] not in equivalents]
    for s in survivors:
        click.echo(click.style(f"SURVIVED {s['id']} {s['path']}:{s['line']} {s['scope']} {s['operator']}", fg="red"))
        click.echo(s.get("diff", "").rstrip("\n"))
    if run.left:
        click.echo(click.style(f"time budget reached: {run.left} mutant(s) not run; rerun to resume", fg="yellow"))
    if run.deferred:
        click.echo(click.style(f"{len(run.deferred)} mutant(s) not judged: a falsifier that measures time or GPU "
                               f"memory errored with {run.jobs} mutants at once; rerun with -j 1 to judge them "
                               f"({' '.join('--only ' + i for i in run.deferred[:5])}"
                               f"{' ...' if len(run.deferred) > 5 else ''})", fg="yellow"))
    click.echo(f"{len(run.recorded)} result(s) appended to {workspace.rel(results_file)}")
    failed = (total.score is not None and 100 * total.score < fail_under) if fail_under is not None else \
        bool(survivors) or bool(run.excluded) or bool(run.left) or bool(run.deferred)
    if failed:
        sys.exit(1)
