"""`pv generate [--check]`: compile contracts into pytest modules under generated_tests/.

The click command only; rendering, planning and writing are pv.codegen.
"""

from __future__ import annotations

import sys

import click

from pv.codegen import apply, build_plan, describe_drift, print_diagnostics
from pv.commands import pass_workspace
from pv.config import Workspace


@click.command(name="generate")
@click.option("--check", "check_only", is_flag=True,
              help="Write nothing; exit 1 naming every stale, missing or orphaned generated file.")
@pass_workspace
def command(check_only: bool, *, workspace: Workspace) -> None:
    """Compile contracts into pytest modules under [tool.pv] generated_dir.

    Exit status: 0 written (or, with --check, up to date); 1 a contract cannot be compiled
    (diagnostics as in `pv validate`), or with --check something is stale, missing or
    orphaned; 2 usage error.
    """
    plan = build_plan(workspace)
    if plan.invalid:
        print_diagnostics(plan)
        sys.exit(1)
    where = workspace.rel(workspace.generated_dir) + "/"
    total = len(plan.targets)
    if check_only:
        if plan.up_to_date:
            click.echo(f"{where} is up to date ({total} module(s) from {total} contract(s))")
            return
        click.echo(f"{where} is out of date:")
        for line in describe_drift(plan):
            click.echo(line)
        click.echo("run `pv generate` to update it")
        sys.exit(1)
    if plan.foreign:
        for line in describe_drift(plan):
            if "foreign" in line:
                click.echo(line, err=True)
        click.echo("pv generate: refusing to overwrite files it did not generate", err=True)
        sys.exit(1)
    changed = apply(plan)
    tests = sum(len(f.runtime_cells()) for t in plan.targets for f in t.contract.falsification_tests)  # runtime x subject x device
    if changed:
        click.echo(f"{where}: {changed} file(s) changed; {total} module(s), {tests} test(s) from {total} contract(s)")
    else:
        click.echo(f"{where} is up to date ({total} module(s), {tests} test(s) from {total} contract(s))")
