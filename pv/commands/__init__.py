"""One module per `pv` verb. Each holds the verb's click command and nothing the other verbs
need; what they share lives in pv's core modules. `pv.cli` only wires the verbs in.

Every verb that works on a project opens it the same way, through `pass_workspace`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable

import click

from pv.config import ConfigError, Workspace, load_workspace


def open_workspace(start: Path | None = None) -> Workspace:
    """The pv project that holds `start` (default: the current directory).

    Outside a project — no pyproject.toml with a [tool.pv] table here or above — a verb would
    otherwise write a ledger or a dashboard into a random directory, so it stops with a usage
    error (exit 2) that says how to make one; so does a project whose contracts_dir is missing.
    """
    here = Path.cwd() if start is None else Path(start)
    try:
        workspace = load_workspace(here)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.UsageError(f"cannot read the project settings: {exc}") from None
    if workspace.pyproject is None:
        raise click.UsageError(
            f"not inside a pv project: no pyproject.toml with a [tool.pv] table in {here.resolve()} "
            "or any directory above it. Run `pv init` to make this directory one, or cd into your project."
        )
    if not workspace.contracts_dir.is_dir():
        # Without it every verb would read "no contracts": generate would delete every generated
        # module, status would write an empty dashboard. Stop before anything is written.
        raise click.UsageError(
            f"[tool.pv] contracts_dir {workspace.rel(workspace.contracts_dir)!r} (in {workspace.pyproject}) is not a "
            "directory: create it, or point contracts_dir at your contracts; nothing was read or written"
        )
    return workspace


def pass_workspace(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give a verb's function the project it runs in as the keyword argument `workspace`."""

    @functools.wraps(command)
    def with_workspace(*args: Any, **kwargs: Any) -> Any:
        return command(*args, workspace=open_workspace(), **kwargs)

    return with_workspace
