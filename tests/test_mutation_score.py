"""scripts/mutation_score.py, pv's own mutation score: a mutant patched in place is seen by every
holder of the patched object, the changed lines select the tests, a run resumes from its results
file, and the equivalents file names real sites with a reason."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import textwrap
from pathlib import Path

import pytest

from pv.automutate import operators

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("pv_mutation_score", ROOT / "scripts" / "mutation_score.py")
ms = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = ms  # dataclasses look their module up while the class is made
_spec.loader.exec_module(ms)

TOY = textwrap.dedent('''\
    LIMIT = 3


    def over(x):
        return x > LIMIT


    class Box:
        size = 1

        def double(self):
            return self.size * 2
    ''')
USER = "from {toy} import over, LIMIT, Box\n\ndef check(x):\n    return over(x)\n"


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest):
    """A module `toy_<n>` and a module that imports names from it, both loaded from tmp_path."""
    name = f"toy_{abs(hash(request.node.nodeid)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(TOY)
    (tmp_path / f"{name}_user.py").write_text(USER.format(toy=name))
    monkeypatch.syspath_prepend(str(tmp_path))
    module, user = importlib.import_module(name), importlib.import_module(f"{name}_user")
    yield module, user, tmp_path
    sys.modules.pop(name, None)
    sys.modules.pop(f"{name}_user", None)


def _site(module_name: str, operator: str, before: str, after: str | None = None) -> operators.Site:
    return next(s for s in operators.sites(TOY, module_name)
                if s.operator == operator and s.original == before and (after is None or s.replacement == after))


def _patch(toy, site: operators.Site) -> str:
    module, _user, root = toy
    return ms.patch(module, TOY, operators.apply(TOY, site), site, roots=(root,))


def test_a_mutated_function_is_seen_by_a_module_that_imported_it(toy):
    module, user, _ = toy
    over = module.over
    assert user.check(3) is False
    assert _patch(toy, _site(module.__name__, "compare", "x > LIMIT")) == "function"
    assert user.check(3) is True  # the caller's own reference runs the mutant
    assert module.over is over  # same object, new code


def test_a_mutated_method_keeps_its_class(toy):
    module, user, _ = toy
    box = module.Box()
    assert _patch(toy, _site(module.__name__, "arithmetic", "self.size * 2")) == "function"
    assert box.double() == 0.5
    assert isinstance(box, user.Box) and user.Box is module.Box


def test_a_mutated_module_constant_reaches_the_functions_and_the_importers(toy):
    module, user, _ = toy
    site = next(s for s in operators.sites(TOY, module.__name__) if s.operator == "constant" and s.line == 1)
    assert _patch(toy, site) == "binding"
    assert module.LIMIT == 4 and user.LIMIT == 4
    assert user.check(4) is False


def test_a_dropped_module_statement_leaves_the_name_unbound(toy):
    module, user, _ = toy
    site = next(s for s in operators.sites(TOY, module.__name__) if s.operator == "statement" and s.line == 1)
    _patch(toy, site)
    assert not hasattr(module, "LIMIT") and not hasattr(user, "LIMIT")
    with pytest.raises(NameError):
        user.check(1)


def test_a_class_body_mutant_replaces_the_class_everywhere(toy):
    module, user, _ = toy
    site = next(s for s in operators.sites(TOY, module.__name__) if s.operator == "constant" and s.scope == "Box")
    assert _patch(toy, site) == "binding"
    assert user.Box is module.Box and module.Box().double() == 4


def test_patching_with_the_unmutated_source_changes_no_behaviour(toy):
    module, user, root = toy
    for site in operators.sites(TOY, module.__name__):
        over = module.over
        how = ms.patch(module, TOY, TOY, site, roots=(root,))
        assert how == ("function" if site.scope in ("over", "Box.double") else "binding"), site
        if how == "function" or site.scope == "Box":
            assert module.over is over  # identities kept: `over` reads LIMIT when called
        assert user.check(4) is True and user.check(3) is False and module.Box().double() == 2
        assert module.LIMIT == 3 and user.over is module.over and user.Box is module.Box


def test_a_module_level_mutant_rebuilds_what_the_module_derives_from_it(toy):
    module, user, _ = toy
    site = next(s for s in operators.sites(TOY, module.__name__) if s.operator == "constant" and s.line == 1)
    module_source = TOY + "DOUBLE_LIMIT = LIMIT * 2\n"
    ms.patch(module, module_source, operators.apply(module_source, site), site, roots=(toy[2],))
    assert module.DOUBLE_LIMIT == 8  # as a fresh import of the mutated source computes it
    assert module.Box is user.Box and module.over is user.over  # what does not read LIMIT at import stays itself


def test_changed_lines_cover_every_line_of_a_dropped_multiline_statement():
    before = "a = 1\nb = f(\n    2,\n)\nc = 3\n"
    after = "a = 1\npass\nc = 3\n"
    assert ms.changed_lines(before, after) == {2, 3, 4}
    assert ms.changed_lines(before, before.replace("c = 3", "c = 4")) == {5}


def test_bound_names_of_a_top_level_statement():
    import ast

    tree = ast.parse("if x:\n    A = 1\nelse:\n    A, B = 2, 3\nclass C:\n    D = 1\n")
    assert ms._bound_names(tree.body[0]) == {"A", "B"}
    assert ms._bound_names(tree.body[1]) == {"C"}


def test_results_resume_from_the_latest_whole_line(tmp_path: Path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"id": "a", "status": "survived"}) + "\n"
                    + json.dumps({"id": "a", "status": "killed"}) + "\n" + '{"id": "b", "sta')
    assert {k: v["status"] for k, v in ms.load_results(path).items()} == {"a": "killed"}


def test_the_score_leaves_equivalents_out_and_counts_only_current_verdicts():
    source = "def f(x):\n    return x + 1 > 2\n"
    sites = operators.sites(source, "pv.toy")
    mutants = [ms.Mutant(s, ROOT / "pv" / "toy.py", "d1") for s in sites[:4]]
    results = {mutants[0].site.id: {"status": "killed", "digest": "d1"},
               mutants[1].site.id: {"status": "survived", "digest": "d1"},
               mutants[2].site.id: {"status": "survived", "digest": "d1"},
               mutants[3].site.id: {"status": "killed", "digest": "old"}}  # another source: not counted
    summary = ms.summarize(mutants, results, {mutants[2].site.id: "why"}, 4, 7)
    assert summary["total"] == {"sampled": 4, "run": 3, "killed": 1, "equivalent": 1, "survived": 1, "score": 0.5}
    assert [s["id"] for s in summary["survivors"]] == [mutants[1].site.id]


def test_every_listed_equivalent_is_a_site_of_todays_core_with_a_reason():
    entries = ms.tomllib.loads(ms.EQUIVALENTS.read_text()).get("equivalent", [])
    assert entries, "the equivalents file lists none"
    sites = {}
    for path in sorted({entry["mutant"].split(":", 1)[0] for entry in entries}):  # pv/expr.py
        assert Path(path).stem in ms.CORE, path
        sites.update({s.id: s for s in operators.sites((ROOT / path).read_text(), f"pv.{Path(path).stem}")})
    for entry in entries:
        assert entry["reason"].strip(), entry
        site = sites.get(entry["id"])
        assert site is not None, f"{entry['mutant']}: no such site today; remove it from {ms.EQUIVALENTS.name}"
        assert site.label() in entry["mutant"], (entry["mutant"], site.label())
