"""Child Python processes keep the planted bugs: the one place that does it.

A check that starts a Python process (`python -m pvlab.runtime ...`, `python -c CODE ...`) builds
its command line with `python_command(...)`:

* no mutant planted: `[sys.executable, *args]`, the child is the plain runtime;
* mutants planted: `[sys.executable, "-m", "pvlab.falsifiers.mutants.child", "a,b", "--", *args]`.
  A launcher that starts the Python processes itself (torchrun) is given `python_args(...)`, the
  same without the executable, so every worker it starts is planted.
  This module, run as the program, enters the same registered mutants by name (the registry's
  own code, not a copy), runs `args` as `python` would (`-m module ...`, `-c code ...`,
  `script.py ...`) and restores them when the program ends, whatever way it ends.

The runtime honours no test hook, no environment variable is involved, and the planting is
visible on the child's command line. tests/falsifiers/test_mutants.py checks that no check
starts `sys.executable` any other way.
"""

from __future__ import annotations

import contextlib
import runpy
import sys

USAGE = "usage: python -m pvlab.falsifiers.mutants.child NAME[,NAME...] -- (-m MODULE | -c CODE | SCRIPT) [ARG...]"


def python_command(*args: str) -> list[str]:
    """The command line that runs `python *args` with the mutants planted here planted there too."""
    return [sys.executable, *python_args(*args)]


def python_args(*args: str) -> list[str]:
    """`args` for a Python started by another launcher, planted like python_command's: e.g.
    `torchrun --nproc-per-node 2 *python_args("-m", "pvlab.runtime", ...)` plants every worker."""
    from pv import mutation

    names = mutation.planted()
    return ["-m", __name__, ",".join(names), "--", *args] if names else list(args)


def _run_like_python(args: list[str]) -> None:
    if args[0] == "-m" and len(args) > 1:
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[0] == "-c" and len(args) > 1:
        sys.argv = ["-c", *args[2:]]
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    else:
        sys.argv = list(args)
        runpy.run_path(args[0], run_name="__main__")


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--" or not argv[0]:
        sys.stderr.write(USAGE + "\n")
        raise SystemExit(2)
    import importlib

    from pv import mutation

    from .planting import PACKAGE, registry

    importlib.import_module(PACKAGE)  # registers every planted bug
    known = registry()
    try:
        chosen = [mutation.get(known, name) for name in argv[0].split(",")]
    except mutation.UnknownMutant as exc:
        sys.stderr.write(f"pv: {exc}\n")
        raise SystemExit(2) from None
    with contextlib.ExitStack() as planted:
        for entry in chosen:
            planted.enter_context(entry())
        _run_like_python(argv[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
