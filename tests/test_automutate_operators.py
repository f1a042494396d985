"""pv.automutate.operators: every operator makes the change it names at one site and nothing
else; ids survive unrelated edits; docstrings, annotations, imports and `# pragma: no mutate`
lines are left alone; a module that does not parse is a clear error."""

from __future__ import annotations

import textwrap

import pytest

from pv.automutate import operators

SOURCE = textwrap.dedent('''\
    """Module docstring: never mutated."""
    import torch

    __all__ = ["f"]


    def f(a: int, b: int = 3) -> int:
        """Function docstring."""
        if a < b and not a == 0:
            a += 1
        x = max(a, b) * 2 - 1
        y = torch.zeros(2, dtype=torch.float32, device="cuda")
        keep = True  # pragma: no mutate
        return x
''')


def _changes(source: str) -> set[tuple[str, str, str]]:
    return {(s.operator, s.original, s.replacement) for s in operators.sites(source, "m")}


def test_each_operator_makes_the_change_it_names():
    found = _changes(SOURCE)
    expected = {
        ("compare", "a < b", "a <= b"), ("compare", "a == 0", "a != 0"),
        ("boolean", "a < b and not a == 0", "a < b or not a == 0"), ("boolean", "not a == 0", "a == 0"),
        ("constant", "0", "1"), ("constant", "2", "3"),
        ("arithmetic", "a += 1", "a -= 1"), ("arithmetic", "max(a, b) * 2", "max(a, b) / 2"),
        ("arithmetic", "max(a, b) * 2 - 1", "max(a, b) * 2 + 1"),
        ("arguments", "max(a, b)", "max(b, a)"),
        ("dtype", "torch.float32", "torch.bfloat16"), ("device", '"cuda"', '"cpu"'),
        ("return", "return x", "return None"), ("statement", "a += 1", "pass"),
    }
    assert expected <= found, expected - found


def test_left_alone_docstrings_annotations_imports_all_and_pragma():
    for site in operators.sites(SOURCE, "m"):
        assert "docstring" not in site.original
        assert "import" not in site.original and "__all__" not in site.original
        assert site.line != 13  # the pragma line
    # a default value is code (mutated); an annotation is not
    assert ("constant", "3", "4") in _changes(SOURCE)
    assert not operators.sites("def g(a: dict[str, 1] = None) -> 2: ...\n", "m")


def test_apply_changes_exactly_one_site_and_the_rest_byte_for_byte():
    for site in operators.sites(SOURCE, "m"):
        mutated = operators.apply(SOURCE, site)
        compile(mutated, "m.py", "exec")
        assert mutated != SOURCE
        diff = [line for line in operators.unified_diff(SOURCE, mutated, "m.py").splitlines()
                if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        removed = [d for d in diff if d.startswith("-")]
        assert len(removed) == 1, (site, diff)  # one line changed (every site here is one line)


def test_ids_are_unique_and_survive_an_unrelated_edit():
    before = {s.id: s for s in operators.sites(SOURCE, "m")}
    assert len(before) == len(operators.sites(SOURCE, "m"))
    edited = SOURCE.replace('__all__ = ["f"]\n', '__all__ = ["f"]\n\n# a comment\nLIMIT = 7\n')
    after = {s.id: s for s in operators.sites(edited, "m")}
    assert set(before) <= set(after)
    assert all(after[i].line == before[i].line + 3 for i in before if before[i].line > 4)
    site = next(iter(before.values()))
    assert operators.find(edited, "m", site.id).replacement == site.replacement


def test_module_that_does_not_parse_says_where():
    with pytest.raises(operators.MutationSourceError, match=r"pkg/bad\.py:2:\d+: cannot parse"):
        operators.sites("x = 1\ndef (:\n", "pkg.bad", "pkg/bad.py")


def test_string_building_is_not_arithmetic():
    assert not [s for s in operators.sites('s = "a" + "b"\nt = "%d" % 3\n', "m") if s.operator == "arithmetic"]
