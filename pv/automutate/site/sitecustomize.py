"""Installed by `pv mutate` on the PYTHONPATH of a mutant's run (pv/automutate/hook.py).

With PV_AUTOMUTANT set, serve the mutated module; then run the sitecustomize this one shadows
(if the interpreter has one), so the environment is otherwise the usual one."""

import os
import sys

if os.environ.get("PV_AUTOMUTANT"):
    from pv.automutate.hook import install

    install(os.environ["PV_AUTOMUTANT"])


def _chain() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if p and os.path.abspath(p) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None and spec.origin != os.path.abspath(__file__):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_chain()
