"""The dashboard's kill matrix (pv.killmatrix): one row per falsifier, one column per declared bug."""

from __future__ import annotations

from types import SimpleNamespace

from pv.killmatrix import kill_matrix_section
from pv.lifecycle import contract_status
from lifecycle_records import PlantedIn, contract, falsifier, rec


def test_a_bug_no_cell_meets_shows_as_no_cell_and_off_runtime_records_are_not_counted():
    c = contract(falsifiers=[dict(falsifier(mutants=("pvlab_bug", "liger_bug")), runtimes=["pvlab", "hf"],
                                  check="p.m:f")])
    off_runtime_pass = rec(c, "PASS", mutant="pvlab_bug").model_copy(update={"runtime": "hf"})
    clean_pass = rec(c, "PASS")  # the default runtime (pvlab) without the bug: a FAIL under it can be a kill
    status = contract_status(c, [clean_pass, rec(c, "FAIL", mutant="pvlab_bug"), off_runtime_pass],
                             PlantedIn({"liger_bug": ("liger",)}))
    text = "\n".join(kill_matrix_section([SimpleNamespace(status=status)]))
    row = next(line for line in text.splitlines() if line.startswith("| `FALSIFY-DEMO-001`"))
    assert row.split("|")[2:5] == [" 1/2 ", " **NO CELL** ", " KILLED "], row  # columns sorted: liger_bug, pvlab_bug
    assert "counts neither way" in text
