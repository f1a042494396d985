"""pv.automutate.results: the append-only results file (torn lines, latest wins), freshness
(module digest, judging falsifiers, a KILLED line kept while its killer is unchanged), the
marked equivalents and the scores they are left out of."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pv.automutate import results as store


def line(mutant_id: str, result: str, module: str = "pkg.a", **extra) -> dict:
    return {"kind": "mutant", "id": mutant_id, "result": result, "module": module, "module_digest": "d1",
            "suite": "s1", "killed_by": "F-1" if result == "KILLED" else None, "definitions": {"F-1": "h1"},
            "contracts": ["c1"], **extra}


def test_latest_line_wins_and_a_torn_line_is_counted_not_fatal(tmp_path: Path):
    path = tmp_path / "mutation.jsonl"
    store.append(path, [line("m1", "SURVIVED"), line("m2", "KILLED")])
    with path.open("ab") as handle:
        handle.write(b'{"kind": "mutant", "id": "m3", "res')  # a writer killed mid-line
    store.append(path, [line("m1", "KILLED")])  # starts on a fresh line
    got = store.read(path)
    assert got.torn == 1
    assert got.mutants["m1"]["result"] == "KILLED" and set(got.mutants) == {"m1", "m2"}
    assert all(json.loads(x) for x in path.read_text().splitlines()[-1:])


def test_freshness():
    defs = {"F-1": "h1", "F-2": "h2"}
    assert store.is_fresh(line("m", "SURVIVED"), "d1", "s1", defs)
    assert not store.is_fresh(line("m", "SURVIVED"), "d2", "s1", defs)  # the module changed
    assert not store.is_fresh(line("m", "SURVIVED"), "d1", "s2", defs)  # a falsifier added or redefined
    assert store.is_fresh(line("m", "KILLED"), "d1", "s2", defs)  # a kill holds while its killer is unchanged
    assert not store.is_fresh(line("m", "KILLED"), "d1", "s1", {"F-1": "changed"})


def test_unwritable_path_is_a_clear_error(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(store.ResultsError, match="cannot write the mutation results to"):
        store.check_writable(blocker / "mutation.jsonl")


def test_equivalents_need_a_reason_and_leave_the_score(tmp_path: Path):
    path = tmp_path / "eq.toml"
    assert store.read_equivalents(path) == {}
    path.write_text('[mutants.m1]\nreason = "x * 1.0 and x / 1.0 are the same float"\n')
    marks = store.read_equivalents(path)
    assert marks == {"m1": "x * 1.0 and x / 1.0 are the same float"}
    tally = store.tallies([line("m1", "SURVIVED"), line("m2", "KILLED"), line("m3", "ERROR")], marks, "module")
    t = tally["pkg.a"]
    assert (t.counts["KILLED"], t.counts["SURVIVED"], t.counts["ERROR"], t.equivalent) == (1, 0, 1, 1)
    assert t.score == 1.0 and t.judged == 1
    path.write_text('[mutants.m1]\nreason = ""\n')
    with pytest.raises(store.ResultsError, match="needs a non-empty `reason`"):
        store.read_equivalents(path)
    path.write_text("not toml [")
    with pytest.raises(store.ResultsError, match="not valid TOML"):
        store.read_equivalents(path)


def test_per_contract_tally_counts_a_line_for_each_contract():
    lines = [line("m1", "KILLED", contracts=["a", "b"]), line("m2", "SURVIVED", contracts=["b"])]
    got = store.tallies(lines, {}, "contracts")
    assert got["a"].score == 1.0 and got["b"].score == 0.5
