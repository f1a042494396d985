"""The `pv` command line. Each verb lives in its own module and is imported only when used,
so `pv validate` (a pre-commit hook) never pays for jinja2, pytest or torch. And `pv validate`
whose inputs are all unchanged is answered from its stored run (pv.replay) before even click is
imported, and a plain `pv validate` command line is checked without click (click only parses
options); every other command line goes to the click group (pv.commands.group)."""

from __future__ import annotations

import sys
from typing import Any

# verb -> (module, attribute, one-line help shown in `pv --help`)
VERBS: dict[str, tuple[str, str, str]] = {
    "init": ("pv.commands.init", "command", "Make this directory a pv project (settings, a contract, a check, hooks)."),
    "validate": ("pv.commands.validate", "command", "Check contracts: schema, ids, references, bindings, expressions."),
    "generate": ("pv.commands.generate", "command", "Compile contracts into pytest modules under generated_tests/."),
    "run": ("pv.commands.run", "command", "Run falsifiers on cpu/cuda and record the evidence in the ledger."),
    "status": ("pv.commands.status", "command", "Compute lifecycle status from evidence; write the dashboard."),
    "measure": ("pv.commands.measure", "command", "Sweep a falsifier's check over seeds: worst case, spread, a suggested bound."),
    "strength": ("pv.commands.strength", "command", "Run falsifiers against planted bugs (mutants); kill matrix."),
    "mutate": ("pv.commands.mutate", "command", "Mutate the code falsifiers bind (automatic mutants); mutation score."),
    "bisect": ("pv.commands.bisect", "command", "Localise a divergence between two backends, op by op."),
    "ledger": ("pv.commands.ledger", "command", "Inspect, check and merge evidence ledgers."),
    "schema": ("pv.commands.schema", "command", "Print the contract JSON Schema or write it into the project (editors)."),
}


class Main:
    """`pv` itself: callable like the click group (the console script calls `main()`), and
    every other attribute is the group's (`CliRunner().invoke(main, ...)`, `main.commands`)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        argv = args[0] if args else kwargs.get("args")
        argv = sys.argv[1:] if argv is None else list(argv)
        itself = argv[:1] == ["validate"] and not args and not kwargs  # the `pv` process, ending after this
        if itself:
            # Validation runs with the cyclic collector off (pv.validation); importing click,
            # pydantic and pv's models before it ran a dozen collections over what they build,
            # all of which lives until the process ends (0.02 s of a run).
            import gc

            gc.disable()
            from pv import validation

            validation.KEPT = []  # this process ends with os._exit (_end): nothing it built need be freed
        if argv[:1] == ["validate"] and kwargs.get("standalone_mode", True) and len(args) <= 1:
            from pv.replay import fast_validate

            # the process itself checks a plain command line without click (in-process callers get click)
            try:
                code = fast_validate(argv[1:], check=itself)
            except KeyboardInterrupt:  # as click's command line ends on ^C
                sys.stderr.write("\nAborted!\n")
                sys.exit(1)
            if code is not None:
                if itself:
                    _freeze()
                    _end(code)
                sys.exit(code)
        if itself:
            try:
                return group()()
            finally:
                _freeze()
        return group()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(group(), name)


def _freeze() -> None:
    # What validation left (parsed expressions, pydantic's schemas) lives until the process
    # ends: the interpreter's last collection need not walk it (0.06 s of 1,000 contracts).
    # Validation writes only through pv.atomic, closed as it goes.
    import gc

    gc.freeze()


def _end(code: int) -> None:
    """End the `pv` process now, its report printed: tearing the interpreter down frees every
    object one by one (0.05 to 0.1 s after 1,000 contracts or a large ledger) and frees nothing
    anyone needs. Only where that teardown has nothing else to do: no exit handler registered
    (coverage.py's, an embedding tool's), no other thread, the output flushed (else the usual
    exit, which meets the same error)."""
    import atexit
    import os
    import threading

    ncallbacks = getattr(atexit, "_ncallbacks", None)
    if ncallbacks is None or ncallbacks() != 0 or threading.active_count() != 1 or not isinstance(code, int):
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - e.g. a closed pipe: the usual exit reports it as before
        return
    os._exit(code)


def group() -> Any:
    from pv.commands.group import main as click_group

    return click_group


main = Main()


if __name__ == "__main__":
    main()
