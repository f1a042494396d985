"""What the dashboard owes, as shell assignments for scripts/gpu-owed.sh.

    python3 scripts/owed_cells.py SUBJECT   (reads `pv status --format json` from stdin)

Prints CUDA_IDS, CPU_IDS, RANDOM_IDS (falsifiers with a cell of SUBJECT, or of its random twin,
that is not a fresh PASS; a cpu cell of one runtime as ID@RUNTIME), TINY_IDS (falsifiers with a cuda cell of a small subject, or of none,
that is not a fresh PASS: a check edited since its last GPU run) and STRENGTH_IDS (falsifiers with a declared planted bug whose cuda
record on a small subject is not fresh). Falsifiers of the distributed-training contract are
left out: they need two GPUs in one host (scripts/gpu-distributed.sh).
"""
from __future__ import annotations

import json
import re
import shlex
import sys

CELL = re.compile(r"^(?P<device>cpu|cuda)(\[(?P<subject>[^\]]+)\])?(@(?P<runtime>.+))?$")
NEEDS_TWO_GPUS = {"distributed-training"}


def owed(status: dict, subject: str) -> dict[str, list[str]]:
    lists: dict[str, list[str]] = {"CUDA_IDS": [], "CPU_IDS": [], "RANDOM_IDS": [], "TINY_IDS": [], "STRENGTH_IDS": []}

    def add(name: str, falsifier: str) -> None:
        if falsifier not in lists[name]:
            lists[name].append(falsifier)

    for contract in status["contracts"]:
        if contract["id"] in NEEDS_TWO_GPUS:
            continue
        for falsifier in contract["falsifiers"]:
            for key, cell in falsifier.get("devices", {}).items():
                match = CELL.match(key)
                if not match or cell["state"] == "PASS":
                    continue
                if match["subject"] == subject and match["device"] == "cuda":
                    add("CUDA_IDS", falsifier["id"])
                elif match["subject"] == subject:
                    # one runtime per cpu cell: a host's eval of the 0.5B model takes minutes per
                    # runtime, and a cut call then loses one runtime's work, not every one's
                    add("CPU_IDS", falsifier["id"] + (f"@{match['runtime']}" if match["runtime"] else ""))
                elif match["subject"] == f"{subject}-random":
                    add("RANDOM_IDS", falsifier["id"])
                elif match["device"] == "cuda":
                    add("TINY_IDS", falsifier["id"])
            for planted in (falsifier.get("mutants") or {}).values():
                for key, state in planted["devices"].items():
                    match = CELL.match(key)
                    if (match and match["device"] == "cuda" and state != "FAIL"
                            and not (match["subject"] or "").startswith(subject)):
                        add("STRENGTH_IDS", falsifier["id"])
    return lists


def main() -> None:
    subject = sys.argv[1] if len(sys.argv) > 1 else "qwen2-0.5b-stdlib"
    for name, ids in owed(json.load(sys.stdin), subject).items():
        print(f"{name}={shlex.quote(' '.join(ids))}")


if __name__ == "__main__":
    main()
