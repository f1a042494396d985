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


def test_planted_names_the_registered_mutants_in_effect_innermost_last(monkeypatch):
    monkeypatch.setattr(mutation, "_PLANTED", [])
    seen = []

    @mutation.mutant("outer_bug")
    def outer_bug():
        seen.append(("entering outer", mutation.planted()))
        yield

    @mutation.mutant("inner_bug")
    def inner_bug():
        yield

    assert mutation.planted() == ()
    with outer_bug():
        with inner_bug():
            assert mutation.planted() == ("outer_bug", "inner_bug")
        assert mutation.planted() == ("outer_bug",)
    assert seen == [("entering outer", ())]  # named once its swaps are in place, not before
    with pytest.raises(ZeroDivisionError):
        with outer_bug():
            1 / 0
    assert mutation.planted() == ()


def test_the_run_mutant_wraps_each_check_call(monkeypatch):
    monkeypatch.setattr(mutation, "_PLANTED", [])
    monkeypatch.setattr(mutation, "_RUN", None)

    @mutation.mutant("run_bug")
    def run_bug():
        yield

    with mutation.around_check():
        assert mutation.planted() == ()
    mutation.set_run_mutant("run_bug", mutation.REGISTRY["run_bug"].factory)
    assert mutation.run_mutant() == "run_bug"
    with mutation.around_check():
        assert mutation.planted() == ("run_bug",)
    assert mutation.planted() == ()  # only around the check call
    mutation.set_run_mutant(None)
    assert mutation.run_mutant() is None


# --- where a planted bug is planted (runtimes=) --------------------------------------------------


def test_runtimes_are_registered_as_a_tuple_and_bad_values_refused():
    @mutation.mutant("one_runtime", runtimes="beta")
    def one_runtime():
        yield

    @mutation.mutant("two_runtimes", runtimes=["beta", "gamma", "beta"])
    def two_runtimes():
        yield

    @mutation.mutant("left_out")
    def left_out():
        yield

    assert mutation.REGISTRY["one_runtime"].runtimes == ("beta",)
    assert mutation.REGISTRY["two_runtimes"].runtimes == ("beta", "gamma")
    assert mutation.REGISTRY["left_out"].runtimes is None
    for bad in ((), [""], 3, ("beta", 4)):
        with pytest.raises(mutation.MutationError, match="runtimes= must be"):
            mutation.mutant("bad_runtimes", runtimes=bad)


def test_static_scan_reads_runtimes_literals_and_module_constants(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(textwrap.dedent('''\
        from pv.mutation import mutant

        HF = ("transformers", "liger")
        NOT_A_LITERAL = tuple(["x"])

        @mutant("plain")
        def plain():
            yield

        @mutant("named", runtimes="transformers")
        def named():
            yield

        @mutant("by_constant", runtimes=HF)
        def by_constant():
            yield

        @mutant("computed", runtimes=NOT_A_LITERAL)
        def computed():
            yield

        @mutant("called", runtimes=sorted(HF))
        def called():
            yield
        '''))
    found = {d.name: (d.runtimes, d.problem) for d in mutation.scan_mutant_names(path)}
    assert found["plain"] == (None, None)
    assert found["named"] == (("transformers",), None)
    assert found["by_constant"] == (("transformers", "liger"), None)
    for name in ("computed", "called"):  # never run: a name pv cannot read is a problem, not a guess
        runtimes, problem = found[name]
        assert runtimes is None and "must be a literal runtime name" in problem


@pytest.mark.parametrize("declared, cell, table, expected", [
    (None, "alpha", ["alpha", "beta"], True),  # left out: the project's default runtime (the first)
    (None, "beta", ["alpha", "beta"], False),
    (None, None, ["alpha", "beta"], True),  # a falsifier without runtimes: drives the project's own code
    (("beta",), None, ["alpha", "beta"], False),
    (("beta",), "beta", ["alpha", "beta"], True),
    (("beta", "gamma"), "gamma", ["alpha", "beta", "gamma"], True),
    (None, None, [], True),  # no runtimes anywhere: one runtime, every cell
    (("beta",), None, [], False),  # a runtime the project does not have: met nowhere
])
def test_a_bug_meets_only_cells_of_the_runtimes_it_is_planted_in(declared, cell, table, expected):
    assert mutation.meets(mutation.planted_in(declared, table), cell, table) is expected


def test_the_scan_finds_the_definitions_ast_walk_finds_in_its_order(tmp_path):
    """The scan walks statements only (a function definition is never inside an expression):
    the same definitions, in the same order, as walking every node."""
    import ast
    import textwrap

    source = textwrap.dedent('''\
        from pv.mutation import mutant

        @mutant("top")
        def top():
            @mutant("nested")
            def inner():
                yield
            yield

        class Holder:
            if True:
                @mutant("in_class_if", runtimes=("pvlab",))
                def m(self):
                    yield
        try:
            @mutant("in_try")
            def t():
                yield
        except ImportError:
            @mutant("in_except")
            def e():
                yield
        x = [lambda: 1 for _ in range(2)]
        match x:
            case [*_]:
                @mutant("in_case")
                def c():
                    yield
        ''')
    path = tmp_path / "m.py"
    path.write_text(source)
    walked = [node.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)]
    found = mutation.scan_mutant_names(path)
    assert [d.function for d in found] == walked and len(walked) == 6
    assert found[[d.function for d in found].index("m")].runtimes == ("pvlab",)


@pytest.mark.parametrize("variant", ["as is", "crlf", "cookie", "non-ascii", "non-ascii-code", "bom", "not-utf8"])
def test_scanning_a_parsed_tree_finds_what_scanning_the_file_finds(tmp_path, variant):
    """pv.staticcheck hands the tree it parsed from a file's bytes to scan_parsed: the same
    declarations as scanning the file, which reads its text (and so, where the text could parse
    otherwise, scan_parsed scans the file)."""
    import ast

    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "pvlab" / "falsifiers" / "mutants"
    for source_file in sorted(root.glob("*.py")):
        data = source_file.read_bytes()
        if variant == "crlf":
            data = data.replace(b"\n", b"\r\n")
        elif variant == "cookie":
            data = b"# -*- coding: latin-1 -*-\n" + data
        elif variant == "non-ascii":
            data = data + "\n# caf\u00e9\n".encode()
        elif variant == "non-ascii-code":  # read from the tree: the same strings, lines and columns
            data = data.replace(b"\n@mutant(", '\n_caf\u00e9 = "\u00e9t\u00e9 \u2014 \U0001f600"  # \u00e9\n@mutant('.encode())
        elif variant == "bom":
            data = b"\xef\xbb\xbf" + data
        elif variant == "not-utf8":  # a latin-1 byte in a comment: the file is scanned, and says so
            data = data + b"\n# caf\xe9\n"
        path = tmp_path / source_file.name
        path.write_bytes(data)
        expected = mutation.scan_mutant_names(path) if variant not in ("bom", "not-utf8") else None
        if variant in ("bom", "not-utf8"):  # its text does not parse (U+FEFF) or read: the file is scanned, and says so
            with pytest.raises((mutation.MutationError, SyntaxError)):
                mutation.scan_parsed(path, data, ast.parse(data))
            continue
        assert mutation.scan_parsed(path, data, ast.parse(data)) == expected, source_file.name


def test_around_check_tells_where_the_bug_is_planted(tmp_path, monkeypatch):
    """Red team 2026-12-03: pv records where entering a run's planted bug replaced code of the
    bound packages (`planted_at`), so a kill of a bug planted in the adapter — not the runtime —
    can be told. A swapped function, a swapped method, a dict entry, and a module the bug imports
    itself to plant in (its change is seen when leaving puts the original back)."""
    import sys

    pkg = tmp_path / "seamrt"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text("def rate(step):\n    return 1.0\n\nclass Model:\n    def forward(self):\n        return 1\n\n"
                                 "TABLE = {'a': 1.5}\n")
    (pkg / "lazy.py").write_text("def late():\n    return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "seamrt" or m.startswith("seamrt.")]:
        monkeypatch.delitem(sys.modules, name)
    import seamrt.core as core

    @mutation.mutant("rate_halved")
    def rate_halved():
        original, method, entry = core.rate, core.Model.forward, core.TABLE["a"]
        core.rate, core.Model.forward, core.TABLE["a"] = (lambda step: 0.5), (lambda self: 2), 9.5
        import seamrt.lazy as lazy          # imported by the bug itself, then planted in
        late = lazy.late
        lazy.late = lambda: 1
        try:
            yield
        finally:
            core.rate, core.Model.forward, core.TABLE["a"], lazy.late = original, method, entry, late

    mutation.set_run_mutant("rate_halved", mutation.REGISTRY["rate_halved"].factory)
    try:
        with mutation.around_check(("seamrt",)):
            assert core.rate(0) == 0.5
        assert mutation.last_seams() == ["seamrt.core:Model.forward", "seamrt.core:TABLE['a']", "seamrt.core:rate",
                                         "seamrt.lazy:late"]
        with mutation.around_check():            # no packages: nothing told
            pass
        assert mutation.last_seams() is None
    finally:
        mutation.set_run_mutant(None)
    with mutation.around_check(("seamrt",)):     # no planted bug: nothing told
        pass
    assert mutation.last_seams() is None and core.rate(0) == 1.0
