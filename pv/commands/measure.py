"""`pv measure FALSIFY-ID`: sweep one falsifier's check over N seeds (engine: pv.measure).

    pv measure FALSIFY-X-001                      seeds 0..9 on cpu
    pv measure FALSIFY-X-001 --seeds 20 --first-seed 100 --device cuda
    pv measure FALSIFY-X-001 --out evidence/sweeps/FALSIFY-X-001.json   the sweep, for `source:`

Nothing is recorded in the ledger: a sweep chooses a bound, it is not evidence for one. Exit
status: 0 when the prediction holds at every seed; 1 when it is false at some seed (seed-lucky)
or a seed could not be measured (then nothing is written); 2 for usage errors.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import click

from pv.commands import pass_workspace
from pv.config import Workspace


@click.command(name="measure")
@click.argument("falsifier", metavar="FALSIFY-ID")
@click.option("--seeds", "count", type=click.IntRange(1, 10_000), default=10, show_default=True,
              help="How many seeds to sweep.")
@click.option("--first-seed", type=int, default=0, show_default=True, help="The first seed (then +1 each).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--subject", default=None, metavar="NAME", help="The subject to measure on (default: its first).")
@click.option("--headroom", type=click.FloatRange(1.0, 1e6), default=2.0, show_default=True,
              help="Suggested bound = the worst value over the seeds times this factor.")
@click.option("--out", type=click.Path(dir_okay=False), default=None, metavar="PATH",
              help="Write the sweep as JSON to PATH (cite it in the falsifier's tolerance `source:`).")
@pass_workspace
def command(falsifier: str, count: int, first_seed: int, device: str, subject: str | None, headroom: float,
            out: str | None, *, workspace: Workspace) -> None:
    """Sweep a falsifier's check over seeds: per observation min/max/mean, the worst seed and its
    margin, a suggested bound. Records nothing."""
    from pv import codegen, measure
    from pv.atomic import write_text
    from pv.harness import load_check

    plan = codegen.build_plan(workspace)
    index = plan.falsifiers()
    if falsifier not in index:
        near = difflib.get_close_matches(falsifier.upper(), list(index), n=3, cutoff=0.6)
        raise click.UsageError(f"unknown falsifier {falsifier!r}" + (f"; did you mean {' or '.join(near)}?" if near else ""))
    _, f = index[falsifier]
    if f.check is None:
        raise click.UsageError(f"{falsifier} has no `check:`; there is nothing to measure")
    if device not in f.devices:
        raise click.UsageError(f"{falsifier} is not declared for --device {device} (declares {', '.join(f.devices)})")
    if subject is not None and subject not in (f.subjects or []):
        raise click.UsageError(f"--subject {subject!r}: not a subject of {falsifier} "
                               f"(declared: {', '.join(f.subjects or []) or 'none'})")
    subject = subject or (f.subjects[0] if f.subjects else None)
    if str(workspace.root) not in sys.path:
        sys.path.insert(0, str(workspace.root))  # the check package, as pv's plugin does
    try:
        check = load_check(f.check)
    except Exception as exc:  # noqa: BLE001 - an import that fails is the check's problem, said plainly
        raise click.ClickException(f"cannot import the check {f.check} of {falsifier}: "
                                   f"{type(exc).__name__}: {exc}") from None
    seeds = list(range(first_seed, first_seed + count))
    where = device + (f" with subject {subject}" if subject else "")
    click.echo(f"measuring {falsifier} on {where} over seeds {seeds[0]}..{seeds[-1]} (nothing is recorded)")
    click.echo(f"  prediction: {f.prediction}")

    def on_seed(r: measure.SeedResult) -> None:
        observed = ", ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}"
                             for k, v in sorted(r.observations.items()))
        margin = "-" if r.margin is None else f"{r.margin:+.4g}"
        click.echo(f"  seed {r.seed:>4}  {r.verdict:<4}  margin {margin:>10}  {observed}")

    tolerance = f.tolerance.model_dump(exclude_none=True) if f.tolerance else None
    try:
        result = measure.sweep(check, falsifier=falsifier, prediction=f.prediction, params=dict(f.params),
                               seeds=seeds, device=device, tolerance=tolerance, subject=subject,
                               subject_param=workspace.subject_param, headroom=headroom, on_seed=on_seed)
    except measure.MeasureError as exc:
        click.echo(click.style(f"cannot measure {falsifier}: {exc}", fg="red", bold=True), err=True)
        click.echo("nothing was written" + (f" to {out}" if out else ""), err=True)
        sys.exit(1)
    click.echo("")
    for line in measure.lines(result):
        click.echo(line)
    if out:
        write_text(Path(out), result.to_json())
        click.echo(f"wrote the sweep to {out}; cite it in the falsifier's tolerance `source:`")
    if result.failing_seeds:
        sys.exit(1)
