"""scripts/owed_cells.py, what scripts/gpu-owed.sh runs: the falsifiers with a cell of the scale
subject (or its random twin) that is not a PASS, per device; the falsifiers whose declared planted
bug has a cuda record on a small subject that is not a kill; nothing of a contract that needs two
GPUs; and shell text that round-trips through a shell."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("pv_owed_cells", ROOT / "scripts" / "owed_cells.py")
owed_cells = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(owed_cells)

S = "qwen2-0.5b-stdlib"


def falsifier(fid, devices, mutants=None):
    return {"id": fid, "devices": {key: {"state": state} for key, state in devices.items()},
            "mutants": {name: {"devices": cells} for name, cells in (mutants or {}).items()}}


STATUS = {"contracts": [
    {"id": "parity", "falsifiers": [
        falsifier("F-1", {f"cuda[{S}]@pvlab": "PASS", f"cuda[{S}]@transformers": "STALE", f"cpu[{S}]@pvlab": "PENDING",
                          f"cpu[{S}]@transformers": "PASS", "cpu[tiny-trained]@pvlab": "STALE"},
                  {"bug": {"cuda[tiny-trained]@pvlab": "STALE", "cpu[tiny-trained]@pvlab": "FAIL"}}),
        falsifier("F-2", {f"cuda[{S}]@pvlab": "PASS", f"cpu[{S}]@pvlab": "PASS"},
                  {"bug": {"cuda[tiny-trained]@pvlab": "FAIL", f"cuda[{S}]@pvlab": "STALE"}}),
        falsifier("F-3", {f"cuda[{S}-random]": "PENDING", "cuda": "STALE"}, {"other": {"cuda": "PASS"}}),
        falsifier("F-4", {f"cpu[{S}]": "STALE"}),
    ]},
    {"id": "distributed-training", "falsifiers": [
        falsifier("F-DIST", {"cuda": "STALE"}, {"bug": {"cuda": "STALE"}})]},
]}


def test_owed_cells_per_device_subject_and_planted_bug():
    lists = owed_cells.owed(STATUS, S)
    assert lists["CUDA_IDS"] == ["F-1"]            # a STALE runtime of the scale subject; F-2 is all PASS
    # a cpu cell names its runtime (F-1 owes pvlab's, not transformers'); F-4's cell has none
    assert lists["CPU_IDS"] == ["F-1@pvlab", "F-4"]
    assert lists["RANDOM_IDS"] == ["F-3"]
    assert lists["TINY_IDS"] == ["F-3"]           # its subjectless cuda cell is STALE; F-1's tiny cell is cpu
    # F-1: a stale tiny cuda pair; F-3: a surviving (PASS) cuda pair; F-2's stale pair is of the scale
    # subject (planted by SCALE_BUGS, not by the small subjects' strength run); F-DIST needs two GPUs
    assert lists["STRENGTH_IDS"] == ["F-1", "F-3"]


def test_the_printed_assignments_round_trip_through_a_shell():
    printed = subprocess.run([sys.executable, str(ROOT / "scripts" / "owed_cells.py"), S], input=json.dumps(STATUS),
                             capture_output=True, text=True, check=True).stdout
    echoed = subprocess.run(["bash", "-c", printed + 'echo "$CUDA_IDS|$STRENGTH_IDS"'], capture_output=True,
                            text=True, check=True).stdout
    assert echoed.strip() == "F-1|F-1 F-3"
