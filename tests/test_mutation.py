"""pv.mutation: the @mutant registry, loading it from [tool.pv], and the static scan."""

from __future__ import annotations

import textwrap

import pytest

from pv import mutation
from pv_workspace import make_workspace


@pytest.fixture(autouse=True)
def _isolated_registry(monkeypatch):
    monkeypatch.setattr(mutation, "REGISTRY", {})


def test_decorator_registers_a_context_manager_with_its_doc():
    state = {"on": False}

    @mutation.mutant("flips_state")
    def flips_state():
        """Turns the state on for the run."""
        state["on"] = True
        try:
            yield
        finally:
            state["on"] = False

    entry = mutation.REGISTRY["flips_state"]
    assert entry.doc == "Turns the state on for the run." and entry.qualname.endswith("flips_state")
    with flips_state():
        assert state["on"]
    assert not state["on"]
    with mutation.active(mutation.REGISTRY, "flips_state"):
        assert state["on"]
    with mutation.active(mutation.REGISTRY, None):
        assert not state["on"]


def test_names_must_be_snake_case_and_unique():
    with pytest.raises(mutation.MutationError, match="snake_case"):
        mutation.mutant("Drops-Bias")

    @mutation.mutant("once")
    def first():
        yield

    with pytest.raises(mutation.MutationError, match="declared twice"):
        @mutation.mutant("once")
        def second():
            yield


def test_unknown_name_suggests_near_matches():
    registry = {"cuda_drops_qkv_bias": None, "stale_eval_buffer": None}
    with pytest.raises(mutation.UnknownMutant) as info:
        mutation.get(registry, "cuda_drop_qkv_bias")
    assert str(info.value) == "unknown mutant 'cuda_drop_qkv_bias'; did you mean 'cuda_drops_qkv_bias'?"
    with pytest.raises(mutation.UnknownMutant, match="known mutants: cuda_drops_qkv_bias, stale_eval_buffer"):
        mutation.get(registry, "zzz")
    with pytest.raises(mutation.UnknownMutant, match="no mutants are registered"):
        mutation.get({}, "zzz")


def test_load_registry_imports_the_workspace_module(tmp_path):
    ws = make_workspace(tmp_path)
    registry = mutation.load_registry(ws.workspace())
    assert set(registry) == {"drops_bias", "does_nothing"}
    assert registry["drops_bias"].doc == "The forward forgets the attention biases."


def test_load_registry_errors_are_clear(tmp_path):
    ws = make_workspace(tmp_path, mutants=False)
    with pytest.raises(mutation.MutationError, match="set `mutants_module`"):
        mutation.load_registry(ws.workspace())
    broken = make_workspace(tmp_path / "b")
    (broken.root / broken.package / "mutants.py").write_text("import no_such_module_here\n")
    with pytest.raises(mutation.MutationError, match="cannot import mutants module .*ModuleNotFoundError"):
        mutation.load_registry(broken.workspace())


def test_static_scan_finds_names_without_importing(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text(textwrap.dedent('''\
        import no_such_module_ever  # never imported by the scan
        from pv.mutation import mutant
        import pv.mutation
        from pv import mutation as m

        @mutant("one")
        def one():
            """First."""
            yield

        @pv.mutation.mutant("two")
        def two():
            yield

        @m.mutant(name="three")
        def three():
            yield

        @other("not_a_mutant")
        def four():
            yield
        '''))
    (pkg / "sub").mkdir()
    (pkg / "sub" / "b.py").write_text('@mutant("four")\ndef f():\n    yield\n')
    found = mutation.scan_mutant_names(pkg)
    assert [(d.name, d.path.name, d.line) for d in found] == [
        ("one", "a.py", 6), ("two", "a.py", 11), ("three", "a.py", 15), ("four", "b.py", 1)]
    assert found[0].doc == "First." and found[0].function == "one"
    assert [d.name for d in mutation.scan_mutant_names(pkg / "sub" / "b.py")] == ["four"]
    (pkg / "bad.py").write_text("def (:\n")
    with pytest.raises(mutation.MutationError, match=r"bad.py:1:\d+: cannot parse"):
        mutation.scan_mutant_names(pkg)


def test_module_path_locates_the_mutants_module(tmp_path):
    ws = make_workspace(tmp_path)
    assert mutation.module_path(ws.workspace()) == ws.root / ws.package / "mutants.py"
    assert [d.name for d in mutation.scan_mutant_names(mutation.module_path(ws.workspace()))] == \
        ["drops_bias", "does_nothing"]


def test_a_mutants_package_is_located_and_scanned_through_every_submodule(tmp_path):
    ws = make_workspace(tmp_path)
    flat = ws.root / ws.package / "mutants.py"
    package = ws.root / ws.package / "mutants"
    (package / "seams").mkdir(parents=True)
    (package / "__init__.py").write_text("from . import kernels, seams  # registers\n")
    (package / "kernels.py").write_text(flat.read_text())
    (package / "seams" / "__init__.py").write_text("from . import devices  # registers\n")
    (package / "seams" / "devices.py").write_text(
        'from pv.mutation import mutant\n\n\n@mutant("ignores_no_gpu")\ndef ignores_no_gpu():\n    yield\n')
    flat.unlink()
    assert mutation.module_path(ws.workspace()) == package
    found = mutation.scan_mutant_names(mutation.module_path(ws.workspace()))
    assert sorted((d.name, d.path.name) for d in found) == [
        ("does_nothing", "kernels.py"), ("drops_bias", "kernels.py"), ("ignores_no_gpu", "devices.py")]
    assert set(mutation.load_registry(ws.workspace())) == {d.name for d in found}  # the import agrees
