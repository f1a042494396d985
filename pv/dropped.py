"""Failures on cells a falsifier does not require: shown, so narrowing a claim never hides one.

A falsifier's required cells are its runtimes x subjects x devices (pv.lifecycle), and only
they decide its status. A contract may narrow its claim (drop `cuda` from `devices:`, a subject,
a runtime) and the dashboard then judges the narrower claim, rightly: the list of devices is not
part of the falsifier's definition hash (a PASS on cpu stays a PASS when cuda is added). But a
fresh FAIL on the cell it dropped is still an observation of the runtime: dropping the cell after
it failed would turn the dashboard green with nothing fixed. So, as records of an unknown
falsifier are listed (pv.orphans), a cell outside the required ones whose deciding record is a
FAIL or an ERROR of the falsifier's current definition, on the tree's code, is listed with the
contract: judged exactly as a required cell is (`pv.lifecycle.cell_evidence`: refused records never
decide, a SKIP never hides the failure before it, a record of changed code is stale). Records
under a planted bug and records of a user's checkpoint (`path:` subjects, listed apart) are not
cells of this kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from pv.ledger import LedgerRecord
from pv.lifecycle import DeviceState, cell_evidence, cell_subject, group_records
from pv.runtimes import cell_runtime
from pv.schema import Contract

__all__ = ["DroppedFailure", "failures_outside_cells"]


@dataclass(frozen=True)
class DroppedFailure:
    contract: str
    falsifier: str
    runtime: str | None
    subject: str | None
    device: str
    record: LedgerRecord

    def where(self) -> str:
        return (f"{self.device}" + (f"[{self.subject}]" if self.subject else "")
                + (f"@{self.runtime}" if self.runtime else ""))


def failures_outside_cells(contracts: Iterable[Contract], records: Sequence[LedgerRecord], code: Any = None,
                           subject_param: str = "subject") -> list[DroppedFailure]:
    """Per falsifier, each cell (runtime, subject, device) with records but not required whose
    evidence, judged as a required cell's, is FAIL or ERROR."""
    from pv.subjects import is_path_subject

    groups = group_records(records)
    out = []
    for contract in contracts:
        cid = contract.metadata.id
        for falsifier in contract.falsification_tests:
            required = set(falsifier.runtime_cells())
            base = falsifier.definition_sha256()
            cell_sha = {s: base if s is None else falsifier.definition_sha256(s, subject_param)
                        for _, s, _ in required}
            outside: dict[tuple[str | None, str | None, str], list[tuple[int, LedgerRecord]]] = {}
            for index, record in groups.get((cid, falsifier.id), []):
                if record.mutant is not None or is_path_subject(record.subject):
                    continue
                key = (cell_runtime(record.runtime, falsifier.runtimes), cell_subject(record, cell_sha), record.device)
                if key not in required:
                    outside.setdefault(key, []).append((index, record))
            for (runtime, subject, device), here in sorted(outside.items(), key=lambda kv: str(kv[0])):
                sha = base if subject is None else falsifier.definition_sha256(subject, subject_param)
                evidence = cell_evidence(device, subject, here, sha, code, falsifier, runtime)
                if evidence.state in (DeviceState.FAIL, DeviceState.ERROR):
                    out.append(DroppedFailure(cid, falsifier.id, runtime, subject, device, evidence.record))
    return out


def warning_lines(dropped: Sequence[DroppedFailure], limit: int = 50) -> list[str]:
    """The dashboard's warning (markdown quote lines) for `dropped`; none when it is empty."""
    from pv.markdown import md_code, md_text

    if not dropped:
        return []
    return [
        f"> **Warning:** {len(dropped)} cell(s) that no falsifier requires any more hold a FAIL or ERROR of its "
        "current definition on today's code: the contract's claim was narrowed (a device, subject or runtime "
        "dropped), not the failure fixed. They decide nothing below.",
        ">",
        *[f"> - {md_code(d.falsifier)} ({md_code(d.contract)}) on {md_text(d.where())}: {d.record.verdict.value} "
          f"at {md_code((d.record.git_commit or '')[:7])}" for d in dropped[:limit]],
        *([f"> - … and {len(dropped) - limit} more"] if len(dropped) > limit else []),
        "",
    ]
