"""Binding what torch.compile ran (pv.compiledtrace through pv.execution.collecting): the body of
a compiled function and every function it inlined are bound to the check that compiled it and
to every later check that ran the compiled code; what cannot be told makes a problem."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from pv import compiledtrace, execution  # noqa: E402

SOURCE = textwrap.dedent('''
    import torch


    def rotate(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


    def scaled(x, factor):
        return x * factor


    def forward(x):
        y = rotate(x)
        return scaled(y, 2.0) + 1


    def unrelated(x):
        return x - 1
''')


@pytest.fixture
def compiled_package(tmp_path: Path, monkeypatch):
    """A bound package `pvct_pkg` whose `forward` is compiled (a fresh name per test: dynamo's
    caches are per code object, and each test needs its own first compilation)."""
    name = f"pvct_pkg_{tmp_path.name.replace('-', '_')}"
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(f"{name}.model")
    yield name, module, torch.compile(module.forward)
    compiledtrace.clear([module.forward.__code__])
    for key in [k for k in sys.modules if k.startswith(name)]:
        del sys.modules[key]


def _units(name: str, run: execution.Run, root: Path) -> set[str]:
    bound = execution.bind(run, [name], root)
    return set(bound.executed.get(f"{name}.model", {}))


def test_the_check_that_compiles_binds_the_body_and_what_it_inlined(compiled_package, tmp_path):
    name, module, forward = compiled_package
    with execution.collecting([name]) as run:
        forward(torch.randn(2, 4))
    units = _units(name, run, tmp_path)
    assert {"forward", "rotate", "scaled"} <= units, units
    assert "unrelated" not in units
    assert run.problem is None


def test_a_later_check_running_the_cached_compiled_code_binds_it_too(compiled_package, tmp_path):
    name, module, forward = compiled_package
    forward(torch.randn(2, 4))                      # compiled outside any check
    with execution.collecting([name]) as run:
        forward(torch.randn(2, 4))                  # a cache hit: dynamo traces nothing
    assert {"forward", "rotate", "scaled"} <= _units(name, run, tmp_path)
    with execution.collecting([name]) as other:
        module.unrelated(torch.ones(1))             # never ran the compiled code
    assert _units(name, other, tmp_path) & {"forward", "rotate", "scaled"} == set()


def test_without_the_traced_code_the_record_says_it_cannot_vouch(compiled_package, monkeypatch):
    name, module, forward = compiled_package
    monkeypatch.setattr(compiledtrace, "_traced_code", lambda depth=4: None)   # a torch that does not say
    with execution.collecting([name]) as run:
        forward(torch.randn(2, 4))
    assert run.problem and "did not say which code it traced" in run.problem


def test_compiling_while_not_listening_is_a_problem(compiled_package, monkeypatch):
    name, module, forward = compiled_package
    monkeypatch.setattr(compiledtrace, "install", lambda: None)      # as with a torch that has no hook
    monkeypatch.setattr(compiledtrace, "_installed", False)
    with execution.collecting([name]) as run:
        forward(torch.randn(3, 4))
    assert run.problem and "while pv was not listening" in run.problem


def test_pv_listens_without_importing_torch_and_hears_a_torch_imported_later(tmp_path):
    """In a fresh interpreter: install() imports neither torch nor dynamo (1.3 s), yet the
    first compilation after torch is imported is heard and remembered."""
    script = textwrap.dedent('''
        import sys
        from pv import compiledtrace
        compiledtrace.install()
        assert "torch" not in sys.modules and "torch._dynamo" not in sys.modules, "pv imported torch"
        import torch

        def doubled(x):
            return x * 2

        torch.compile(doubled)(torch.ones(3))
        assert compiledtrace._installed, "the hook was not registered when dynamo was imported"
        assert doubled.__code__ in compiledtrace._traced, "the compilation was not heard"
        print("heard")
    ''')
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0 and "heard" in done.stdout, done.stdout + done.stderr[-3000:]


def test_no_sink_is_left_open_after_a_check():
    with execution.collecting(["pv"]):
        pass
    assert compiledtrace._sinks == []


def test_a_local_whose_attributes_raise_is_passed_over_not_raised():
    class Hostile:
        def __getattr__(self, name):
            raise RuntimeError("no attributes here")

    assert compiledtrace._traced_code_of(Hostile()) is None

    class Holder:
        def __init__(self):
            self.output_graph = type("Graph", (), {"traced_code": [Holder.__init__.__code__]})()

    assert compiledtrace._traced_code_of(Holder()) == [Holder.__init__.__code__]
