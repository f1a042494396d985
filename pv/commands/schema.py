"""`pv schema [--write [PATH]] [--check [PATH]]`: the contract JSON Schema, for editors.

yaml-language-server reads a contract's first line, `# yaml-language-server: $schema=<path>`,
and checks the file as you type. The path must work on every machine that clones the repo, so
it cannot point into pv's install (site-packages differs per machine and per venv). Instead the
schema is written into the project (default `.pv/contract.schema.json`, a folder of pv's own so
it never collides with the project's files) and contracts name it relatively. `--check` tells
when the written copy differs from the schema of the installed pv (after an upgrade).

Works outside a pv project too (it writes only the named file): with no [tool.pv] table above
the current directory the default path is taken from the current directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from pv.schema import PROJECT_SCHEMA, schema_reference


def project_root(start: Path | None = None) -> Path:
    """The pv project holding `start` (default: cwd), or `start` itself outside any project."""
    from pv.config import ConfigError, find_pyproject

    here = (Path.cwd() if start is None else Path(start)).resolve()
    try:
        pyproject = find_pyproject(here)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    return here if pyproject is None else pyproject.parent


def _target(path: str | None) -> Path:
    return Path(path) if path else project_root() / PROJECT_SCHEMA


@click.command(name="schema")
@click.option("--write", "write", is_flag=True, help=f"Write the schema to PATH (default: {PROJECT_SCHEMA} "
                                                      "in the project root).")
@click.option("--check", "check", is_flag=True, help="Exit 1 if PATH differs from this pv's schema; write nothing.")
@click.argument("path", required=False, type=click.Path(dir_okay=False))
def command(write: bool, check: bool, path: str | None) -> None:
    """Print the contract JSON Schema, or write it into your project for editors.

    \b
    pv schema --write          writes .pv/contract.schema.json in the project root
    Then start each contract with (path relative to the contract):
      # yaml-language-server: $schema=../.pv/contract.schema.json
    """
    from pv.schema import json_schema_text

    if write and check:
        raise click.UsageError("--write and --check cannot be combined")
    if path and not (write or check):
        raise click.UsageError("PATH needs --write or --check (without them the schema is printed)")
    text = json_schema_text()
    if not (write or check):
        click.echo(text, nl=False)
        return
    target = _target(path)
    shown = os.path.relpath(target) if not path else path
    if check:
        try:
            current = target.read_text(encoding="utf-8")
        except FileNotFoundError:
            click.echo(f"{shown} does not exist; run `pv schema --write{' ' + path if path else ''}`", err=True)
            sys.exit(1)
        except (OSError, UnicodeDecodeError) as exc:
            raise click.UsageError(f"cannot read {shown}: {exc}") from None
        if current != text:
            click.echo(f"{shown} differs from the schema of this pv; run `pv schema --write"
                       f"{' ' + path if path else ''}`", err=True)
            sys.exit(1)
        click.echo(f"{shown} is up to date")
        return
    if target.is_dir():
        raise click.UsageError(f"{shown} is a directory; give a file path")
    from pv.atomic import write_text

    try:
        unchanged = target.is_file() and target.read_text(encoding="utf-8") == text
        if not unchanged:
            write_text(target, text)
    except (OSError, UnicodeDecodeError) as exc:
        raise click.UsageError(f"cannot write {shown}: {exc}") from None
    click.echo(f"{shown} is up to date" if unchanged else f"wrote {shown}")
