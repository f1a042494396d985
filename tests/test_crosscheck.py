"""pv.crosscheck and pv.staticcheck at unit level: bindings resolved by parsing, never importing."""

from __future__ import annotations

from pathlib import Path

import pytest

from pv.crosscheck import _cycles
from pv.staticcheck import ModuleIndex, Unresolved, in_allowed_package


def tree(root: Path, files: dict[str, str]) -> ModuleIndex:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return ModuleIndex(root)


def test_signature_of_a_plain_check(tmp_path):
    index = tree(tmp_path, {"pkg/__init__.py": "", "pkg/m.py": (
        "import torch\nraise SystemExit('never run')\n"
        "def check(*, device, a, b=1, tolerance=None):\n    pass\n")})
    sig = index.find_function("pkg.m", "check")
    assert sig.line == 3 and sig.accepts("device") and not sig.accepts("c")
    assert sig.problems(["a"]) == []
    assert [c for c, _, _ in sig.problems([])] == ["PV314"]  # a is required
    assert [(c, k) for c, _, k in sig.problems(["a", "c"])] == [("PV313", "c")]


def test_required_tolerance_is_always_supplied(tmp_path):
    index = tree(tmp_path, {"pkg/m.py": "def check(device, tolerance):\n    pass\n"})
    assert index.find_function("pkg.m", "check").problems([]) == []


def test_var_keyword_accepts_everything(tmp_path):
    index = tree(tmp_path, {"pkg/m.py": "def check(**kw):\n    pass\n"})
    assert index.find_function("pkg.m", "check").problems(["anything", "else"]) == []


def test_async_and_positional_only(tmp_path):
    index = tree(tmp_path, {"pkg/m.py": "async def a(*, device):\n    pass\ndef p(device, x, /, y):\n    pass\n"})
    assert [c for c, _, _ in index.find_function("pkg.m", "a").problems([])] == ["PV313"]
    problems = index.find_function("pkg.m", "p").problems(["y"])
    assert [c for c, _, _ in problems] == ["PV313", "PV314"]  # device by keyword; x unfillable


@pytest.mark.parametrize("init", [
    "from .impl import check\n",
    "from pkg.impl import check\n",
    "from .impl import check as check\n",
    "from .impl import *\n",
    "from . import impl\ncheck = impl_check = None\nfrom .impl import check\n",
    "try:\n    from .impl import check\nexcept ImportError:\n    pass\n",
])
def test_re_exports_are_followed(tmp_path, init):
    index = tree(tmp_path, {"pkg/__init__.py": init, "pkg/impl.py": "def check(*, device):\n    pass\n"})
    sig = index.find_function("pkg", "check")
    assert sig.path == tmp_path / "pkg" / "impl.py"


def test_renamed_re_export_and_alias(tmp_path):
    index = tree(tmp_path, {"pkg/__init__.py": "from .impl import _real as check\n",
                            "pkg/impl.py": "def _real(*, device):\n    pass\nalias = _real\n"})
    assert index.find_function("pkg", "check").name == "_real"
    assert index.find_function("pkg.impl", "alias").name == "_real"


def test_parent_relative_import(tmp_path):
    index = tree(tmp_path, {"pkg/__init__.py": "", "pkg/sub/__init__.py": "",
                            "pkg/sub/m.py": "from ..impl import check\n",
                            "pkg/impl.py": "def check(*, device):\n    pass\n"})
    assert index.find_function("pkg.sub.m", "check").path.name == "impl.py"


def test_src_layout(tmp_path):
    index = tree(tmp_path, {"src/pkg/__init__.py": "def check(*, device):\n    pass\n"})
    assert index.find_function("pkg", "check").line == 1


@pytest.mark.parametrize("files, code", [
    ({"pkg/m.py": "class check:\n    pass\n"}, "PV312"),
    ({"pkg/m.py": "import functools\ncheck = functools.partial(print)\n"}, "PV312"),
    ({"pkg/m.py": "from os.path import join as check\n"}, "PV312"),
    ({"pkg/m.py": "from .n import check\n", "pkg/n.py": "from .m import check\n"}, "PV312"),
    ({"pkg/m.py": "def other():\n    pass\n"}, "PV312"),
    ({"pkg/other.py": ""}, "PV311"),
    ({"pkg/m.py": "def check(:\n"}, "PV315"),
    ({"pkg/m.py": "x = 1\0\n"}, "PV315"),
])
def test_unresolvable(tmp_path, files, code):
    index = tree(tmp_path, files)
    with pytest.raises(Unresolved) as info:
        index.find_function("pkg.m", "check")
    assert info.value.code == code


def test_answers_are_cached(tmp_path):
    index = tree(tmp_path, {"pkg/m.py": "def check(*, device):\n    pass\n"})
    first = index.find_function("pkg.m", "check")
    (tmp_path / "pkg" / "m.py").unlink()
    assert index.find_function("pkg.m", "check") is first


def test_mutant_names_in_a_module_and_a_package(tmp_path):
    index = tree(tmp_path, {
        "muts.py": "from pv.mutation import mutant\n@mutant('a_one')\ndef a():\n    yield\n"
                   "import pv.mutation as m\n@m.mutant(name='b_two')\ndef b():\n    yield\n"
                   "@mutant(NAME)\ndef c():\n    yield\n",
        "mpkg/__init__.py": "from . import extra\n",
        "mpkg/extra.py": "from pv.mutation import mutant\n@mutant('c_three')\ndef c():\n    yield\n",
    })
    assert index.mutant_names("muts") == {"a_one", "b_two"}
    assert index.mutant_names("mpkg") == {"c_three"}
    assert index.mutant_names("absent") is None


@pytest.mark.parametrize("module, ok", [
    ("falsifiers", True), ("falsifiers.loss", True), ("falsifiers_evil", False), ("os.path", False),
    ("falsifier", False),
])
def test_allowed_packages(module, ok):
    assert in_allowed_package(module, ("falsifiers", "other.checks")) is ok


def test_a_cycle_through_a_later_edge_is_found():
    edges = {"a": [("b", ()), ("c", ()), ("d", ())], "d": [("a", ())]}  # a -> d -> a, d the third target
    assert _cycles(edges) == [["a", "d", "a"]]
    edges = {"a": [("b", ()), ("c", ())], "c": [("a", ())]}  # the second
    assert _cycles(edges) == [["a", "c", "a"]]


def test_cycles_found_once_each():
    edges = {"a": [("b", ())], "b": [("c", ())], "c": [("a", ())], "d": [("d", ())], "e": [("a", ())]}
    assert _cycles(edges) == [["a", "b", "c", "a"], ["d", "d"]]


def test_no_cycle_in_a_diamond():
    edges = {"a": [("b", ()), ("c", ())], "b": [("d", ())], "c": [("d", ())]}
    assert _cycles(edges) == []


def test_long_chain_has_no_recursion_limit():
    n = 5000
    edges = {f"n{i}": [(f"n{i + 1}", ())] for i in range(n)}
    edges[f"n{n}"] = [("n0", ())]
    [cycle] = _cycles(edges)
    assert len(cycle) == n + 2


def test_a_contract_that_is_not_a_mapping_gets_no_per_file_findings_and_no_crash(tmp_path):
    from pathlib import Path

    from pv import crosscheck
    from pv.safe_yaml import LoadedContract

    for data in ([1, 2], "text", None):
        loaded = LoadedContract(path=Path(tmp_path / "a-v1.yaml"), display_path="a-v1.yaml", text="", sha256="0",
                                data=data, contract=None)
        assert crosscheck.check_file(loaded, None) == []


@pytest.mark.parametrize("decorator, runtimes_key, expected", [
    ('@mutant("drops_bias", runtimes="alpha")', "    runtimes: [alpha, beta]\n", []),
    ('@mutant("drops_bias")', "    runtimes: [alpha]\n", []),  # left out: the default runtime, alpha
    ('@mutant("drops_bias", runtimes=("beta",))', "    runtimes: [alpha]\n", [("PV320", "planted in beta only")]),
    ('@mutant("drops_bias")', "    runtimes: [beta]\n", [("PV320", "planted in alpha only")]),
    ('@mutant("drops_bias", runtimes="gamma")', "    runtimes: [alpha]\n", [("PV321", "'gamma'")]),
    ('@mutant("drops_bias", runtimes=pick())', "    runtimes: [alpha]\n", [("PV321", "literal")]),
])
def test_a_declared_bug_must_be_planted_in_a_runtime_the_falsifier_runs_on(vworkspace, decorator, runtimes_key,
                                                                         expected):
    from pv_validate_ws import parse_output
    from test_runtimes import RUNTIMES_TOML, _contract, _with_runtime_check

    vworkspace.write("pyproject.toml", (vworkspace.root / "pyproject.toml").read_text() + RUNTIMES_TOML)
    _with_runtime_check(vworkspace)
    mutants = vworkspace.root / "falsifiers" / "mutants.py"
    assert '@mutant("drops_bias")' in mutants.read_text()
    vworkspace.write("falsifiers/mutants.py", mutants.read_text().replace('@mutant("drops_bias")', decorator))
    vworkspace.contract(*_contract(runtimes_key))
    found = parse_output(vworkspace.run().output)
    assert [(f.code, text in f.message) for f, (_, text) in zip(found, expected)] == [(c, True) for c, _ in expected]
    assert [f.code for f in found] == [c for c, _ in expected]


def test_an_expression_error_without_a_column_points_at_the_start_of_the_value(vworkspace):
    from pv import expr
    from pv_validate_ws import line_of, parse_output

    # too many parts: pv.expr names no column for it, so the diagnostic is the value's own position
    long = "-" * expr.MAX_NODES + "val_loss < 1"
    # (blanks lead the quoted value: the diagnostic is still at the value, not inside it)
    _, text = vworkspace.contract(('prediction: "val_loss < 0.7 * ln(vocab_size)"', f'prediction: "   {long}"'))
    [found] = [d for d in parse_output(vworkspace.run().output) if d.code == "PV401"]
    line = line_of(text, long)
    assert "more than" in found.message
    assert (found.line, found.col) == (line, text.splitlines()[line - 1].index(f'"   {long}"') + 1)


def test_a_runtime_named_without_any_runtime_table_says_none_are_declared(vworkspace):
    from pv_validate_ws import parse_output
    from test_runtimes import _contract, _with_runtime_check

    _with_runtime_check(vworkspace)
    vworkspace.contract(*_contract("    runtimes: [alpha]\n"))
    [found] = [d for d in parse_output(vworkspace.run().output) if d.code == "PV319"]
    assert "runtime 'alpha' is not one of [tool.pv] runtimes (none)" in found.message


def test_a_bug_planted_away_from_the_default_runtime_is_named_for_a_falsifier_without_runtimes(vworkspace):
    from pv_validate_ws import parse_output
    from test_runtimes import RUNTIMES_TOML, _with_runtime_check

    vworkspace.write("pyproject.toml", (vworkspace.root / "pyproject.toml").read_text() + RUNTIMES_TOML)
    _with_runtime_check(vworkspace)
    mutants = vworkspace.root / "falsifiers" / "mutants.py"
    vworkspace.write("falsifiers/mutants.py", mutants.read_text().replace(
        '@mutant("drops_bias")', '@mutant("drops_bias", runtimes=("beta",))'))
    vworkspace.contract()  # the falsifier names no runtime
    [found] = parse_output(vworkspace.run().output)
    assert found.code == "PV320"
    assert "the falsifier runs on its own code (the default runtime, alpha)" in found.message


def test_a_misspelt_runtime_gets_the_nearest_declared_name(vworkspace):
    from test_runtimes import RUNTIMES_TOML, _contract, _with_runtime_check

    vworkspace.write("pyproject.toml", (vworkspace.root / "pyproject.toml").read_text() + RUNTIMES_TOML)
    _with_runtime_check(vworkspace)
    vworkspace.contract(*_contract("    runtimes: [alpah]\n"))
    output = vworkspace.run().output
    assert "PV319" in output and "did you mean 'alpha'?" in output


def test_a_pv_bug_in_a_file_check_is_reported_again_never_remembered(vworkspace, monkeypatch):
    from pv import crosscheck
    from pv_validate_ws import parse_output

    vworkspace.contract()
    real = crosscheck.tolerance_caps

    def broken(loaded):
        raise RuntimeError("a bug in pv")

    monkeypatch.setattr(crosscheck, "tolerance_caps", broken)
    assert "PV199" in [d.code for d in parse_output(vworkspace.run().output)]
    monkeypatch.setattr(crosscheck, "tolerance_caps", real)  # the bug fixed: the same file, checked again
    assert "PV199" not in [d.code for d in parse_output(vworkspace.run().output)]


OTHER_CONTRACT = """\
metadata:
  id: ab
  version: 1.0.0
  kind: pattern
  status: DRAFT
  description: A second contract, for depends_on.
  depends_on:
    - yy
    - demo-forward
falsification_tests: []
"""


def _depends_on(vworkspace, *targets: str) -> str:
    vworkspace.write("contracts/ab-v1.yaml", OTHER_CONTRACT)
    block = "depends_on:\n" + "".join(f"    - {t}\n" for t in targets)
    _, text = vworkspace.contract(("depends_on: []\n", block))
    return text


def test_a_depends_on_cycle_is_reported_at_each_entry_that_closes_it(vworkspace):
    from pv_validate_ws import line_of, parse_output

    # the edges of the cycle are at different places in the two lists (yy, zz: no such contract)
    text = _depends_on(vworkspace, "ab", "zz")
    found = [d for d in parse_output(vworkspace.run().output) if d.code == "PV307"]
    at = {(Path(d.path).name, d.line) for d in found}
    assert at == {("demo-forward-v1.yaml", line_of(text, "    - ab")), ("ab-v1.yaml", line_of(OTHER_CONTRACT, "    - demo-forward"))}


def test_a_depends_on_that_names_a_file_gets_the_ids_hint(vworkspace):
    text = _depends_on(vworkspace, "ab-v12", "nothing-like-it")
    output = vworkspace.run().output
    assert "depends_on names contract ids ('ab'), not file names" in output
    assert "depends_on names metadata.id of a contract in the contracts dir" in output
    assert text
