"""The click group behind `pv` (pv.cli): verbs imported lazily from pv.cli.VERBS, help text
from the table, a file pv cannot access reported in one line."""

from __future__ import annotations

import difflib
import errno
import importlib

import click

from pv import __version__
from pv.cli import VERBS


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(VERBS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in VERBS:
            return None
        module_name, attr, _ = VERBS[name]
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            return _not_built(name)
        return getattr(module, attr)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        # click suggests near names from `self.commands`, which a lazy group leaves empty;
        # suggest from the table instead, in click's own words (as `pv ledger chek` does).
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in VERBS:
            near = difflib.get_close_matches(name, list(VERBS), n=1)
            ctx.fail(f"No such command {name!r}." + (f" Did you mean {near[0]!r}?" if near else ""))
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context):
        # A file pv cannot read or write (a read-only directory, permissions, a full disk, a
        # path through a file) is the machine's state, not a bug in pv: one line naming the
        # file and why, exit 1, never a traceback. A closed pipe stays click's own business.
        try:
            return super().invoke(ctx)
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise
            where = f" {exc.filename}" if exc.filename else ""
            raise click.ClickException(f"cannot access{where}: {exc.strerror or exc}; check that the path exists, "
                                       "is of the right kind and is writable, then run the command again") from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Help text comes from the table so `pv --help` imports no verb module.
        with formatter.section("Commands"):
            formatter.write_dl([(name, text) for name, (_, _, text) in VERBS.items()])


def _not_built(name: str) -> click.Command:
    @click.command(name=name, help=f"`pv {name}` is not available in this build.")
    def missing() -> None:
        raise click.UsageError(f"`pv {name}` is not available in this build of pv {__version__}")

    return missing


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pv")
def main() -> None:
    """pv: contract-driven falsification for ML training runtimes.

    \b
    Typical loop:
      pv validate contracts/*.yaml     strict schema and cross-checks
      pv generate                      contracts -> generated_tests/
      pv run --all --device cpu        run falsifiers, record evidence
      pv status                        docs/STATUS.md from the evidence
    """
