"""`pv validate`: strict schema and the checks beyond it, for every contract or the named ones.

    pv validate                          every contract in [tool.pv] contracts_dir
    pv validate contracts/a-v1.yaml ...  those files (cross-checks still see the whole dir)
    pv validate --format json            machine-readable report
    pv validate --dialect provable-contracts DIR   lenient reading of another toolchain's files

Every problem is printed as `path:line:col: CODE message` with a hint; codes are listed in
docs/contract-format.md. Exit status: 0 valid (warnings allowed), 1 invalid, 2 usage error.
The engine is pv.validation; this module is the click command only (`pv` itself checks plain
command lines without click: pv.replay.fast_validate).
"""

from __future__ import annotations

import click

from pv.commands import pass_workspace
from pv.config import Workspace
from pv.diagnostics import Diagnostic
from pv.validation import DIALECTS, checked_report, display, expand_paths, render


@click.command(name="validate")
@click.argument("paths", nargs=-1, type=click.Path(dir_okay=True, file_okay=True))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: path:line:col: CODE message; json: one report object.")
@click.option("--dialect", type=click.Choice(DIALECTS), default="pv", show_default=True,
              help="provable-contracts: lenient reading of that toolchain's contracts, with a summary "
                   "of what pv could and could not read.")
@click.option("--strict-bindings/--no-strict-bindings", default=None,
              help="A falsifier without `check:` is an error at every status (default: a warning "
                   "while the contract is DRAFT).")
@click.option("-q", "--quiet", is_flag=True, help="Print errors and the summary only, no warnings.")
@click.pass_context
@pass_workspace
def command(ctx: click.Context, paths: tuple[str, ...], fmt: str, dialect: str, strict_bindings: bool | None,
            quiet: bool, *, workspace: Workspace) -> None:
    """Check contracts: schema, ids, references, bindings, expressions.

    With no PATHS, every contract in [tool.pv] contracts_dir. PATHS may be files, directories
    or glob patterns. Exit status: 0 valid, 1 problems found, 2 usage error.
    """
    missing: list[Diagnostic] = []
    if any(not p.strip() for p in paths):  # `pv validate "$UNSET"` would otherwise check all of `.`
        raise click.UsageError("an empty PATH was given; name contract files, directories or globs")
    if paths:
        files, missing = expand_paths(paths)
        if not files:
            raise click.UsageError(f"no contract files matched: {' '.join(paths)}")
    else:
        files = workspace.contract_files()
        if not files:
            raise click.UsageError(
                f"no contract files matched: {display(workspace.contracts_dir)}/ has no *.yaml files "
                "([tool.pv] contracts_dir)")
    report = checked_report(workspace, files, missing, strict_bindings, dialect)
    click.echo(render(report, fmt, quiet))
    ctx.exit(0 if report.ok else 1)
