"""The status report: every contract's lifecycle status computed from the evidence ledger, and
the figures the dashboard, `pv status --format json` and the terminal summary show.

    report, loaded = gather(workspace)     # the only I/O: contracts, the ledger, the tree's code
    summary(report)                        # the numbers at the top of the dashboard

build_report is pure (contracts + records -> Report); pv.statusmarkdown renders it as
docs/STATUS.md, pv.commands.status is the CLI verb.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pv import ledger as ledger_mod
from pv.config import Workspace
from pv.declared import overclaim
from pv.dropped import failures_outside_cells
from pv.ledger import LedgerProblem, LedgerRecord
from pv.lifecycle import (
    AdhocCell,
    ContractStatus,
    DeviceEvidence,
    DeviceState,
    FalsifierState,
    FalsifierStatus,
    adhoc_cells,
    compute,
    orphans,
)
from pv.loader import LoadedContract, load_contract
from pv.schema import DEVICES, STATUS_RANK, LifecycleStatus

STATUS_ORDER = [
    LifecycleStatus.ACTIVE_RUNTIME,
    LifecycleStatus.DRAFT_PARTIAL_DISCHARGE,
    LifecycleStatus.DRAFT_RED,
    LifecycleStatus.DRAFT,
    LifecycleStatus.RETIRED,
    LifecycleStatus.SUPERSEDED,
]
COMPUTABLE = [s.value for s in STATUS_RANK]


# --- gathering (the only I/O) --------------------------------------------------------------------


# --- gathering (the only I/O) --------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    path: str  # as the user would type it, relative to the workspace root
    status: ContractStatus


@dataclass
class Report:
    entries: list[Entry]
    ledger_path: str = "evidence/ledger.jsonl"
    ledger_problems: list[LedgerProblem] = field(default_factory=list)
    load_failures: list[tuple[str, str]] = field(default_factory=list)  # (path, first problem)
    # Records naming a falsifier no contract has: (ledger line, record, why). They decide nothing.
    orphans: list[tuple[int, LedgerRecord, str]] = field(default_factory=list)
    # Evidence on users' own checkpoints (`pv run --subject-path`): shown, never counted.
    adhoc: list[AdhocCell] = field(default_factory=list)
    # FAILs and ERRORs on cells no falsifier requires any more (pv.dropped): shown, never counted.
    dropped: list = field(default_factory=list)
    # What judged the records (pv.identity.EvidenceCheck; None: nothing did): the HTML
    # dashboard's margin histories leave out the records it refuses, as the cells do.
    code: Any = None

    @property
    def live(self) -> list[Entry]:
        """Entries whose contracts count towards the summary (not RETIRED/SUPERSEDED)."""
        return [e for e in self.entries if not e.status.hand_set]


def build_report(
    loaded: list[LoadedContract], failures: list[tuple[str, str]], records: list[LedgerRecord],
    ledger_path: str, ledger_problems: list[LedgerProblem], lines: list[int] | None = None,
    code: Any = None, subject_param: str = "subject",
) -> Report:
    """Pure: contracts (already loaded) + records -> report, sorted by contract id, then path.
    `lines`: each record's ledger line (default: its position); `code`: the tree's module
    digests (pv.codebind.TreeDigests) that decide whether a record's code is current."""
    usable = [lc for lc in loaded if lc.contract is not None]
    contracts = [lc.contract for lc in usable]
    statuses = compute(contracts, records, code, subject_param)  # type: ignore[arg-type]
    by_contract = {id(lc.contract): lc.display_path for lc in usable}
    entries = sorted((Entry(by_contract[id(s.contract)], s) for s in statuses), key=lambda e: (e.status.id, e.path))
    lines = lines if lines is not None else list(range(1, len(records) + 1))
    lost = [(lines[i], r, why) for i, r, why in orphans(contracts, records, incomplete=bool(failures))]  # type: ignore[arg-type]
    return Report(entries, ledger_path, sorted(ledger_problems, key=lambda p: p.line), sorted(failures), lost,
                  adhoc_cells(contracts, records, code),  # type: ignore[arg-type]
                  failures_outside_cells(contracts, records, code, subject_param), code)  # type: ignore[arg-type]


def load_all(ws: Workspace) -> tuple[list[LoadedContract], list[tuple[str, str]]]:
    loaded, failures = [], []
    for path in ws.contract_files():
        lc, problems = load_contract(path, ws.rel(path))
        problems = [p for p in problems if p.severity.value == "error"]  # e.g. a duplicate key: not judged
        if lc is None or lc.contract is None or problems:
            first = problems[0].format().splitlines()[0] if problems else "cannot be loaded"
            failures.append((ws.rel(path), first))
        else:
            loaded.append(lc)
    # Records name a contract by its id: judged against one of two files declaring it (pv validate's
    # PV301), they would be judged against whichever loaded last, so neither is judged.
    from pv.crosscheck import unique_ids

    twice = {d.path: d.format().splitlines()[0] for d in unique_ids(loaded) if d.code == "PV301"}
    failures += [(path, problem) for path, problem in twice.items()]
    return [lc for lc in loaded if lc.display_path not in twice], failures


def gather(ws: Workspace) -> tuple[Report, list[LoadedContract]]:
    loaded, failures = load_all(ws)
    from pv.identity import EvidenceCheck  # the tree's code, and whether what ran is the contract's

    contents = ledger_mod.read(ws.ledger)
    report = build_report(loaded, failures, contents.records, ws.rel(ws.ledger), contents.problems,
                          contents.lines, EvidenceCheck(ws, loaded), ws.subject_param)
    return report, loaded


# --- the figures ---------------------------------------------------------------------------------


def stale_rows(report: Report) -> list[tuple[Entry, FalsifierStatus, DeviceEvidence]]:
    """Every falsifier x required device whose deciding evidence is stale: the re-runs owed."""
    return [(e, f, d) for e in report.live for f in e.status.falsifiers for d in f.devices
            if d.state is DeviceState.STALE]



def open_ship_blocking(report: Report) -> list[tuple[Entry, FalsifierStatus]]:
    found = [
        (e, f) for e in report.live for f in e.status.falsifiers
        if f.falsifier.ship_blocking and f.state is not FalsifierState.DISCHARGED
    ]
    order = {s: i for i, s in enumerate([FalsifierState.FALSIFIED, FalsifierState.ERROR, FalsifierState.STALE,
                                         FalsifierState.PARTIAL, FalsifierState.PENDING])}
    return sorted(found, key=lambda ef: (order.get(ef[1].state, 9), ef[0].status.id, ef[1].id))



def summary(report: Report) -> dict[str, Any]:
    """The numbers at the top of the dashboard (and in `--format json`)."""
    per_status = {s.value: 0 for s in STATUS_ORDER}
    for e in report.entries:
        per_status[e.status.computed.value] += 1
    falsifiers = [f for e in report.live for f in e.status.falsifiers]
    per_device = {}
    for device in DEVICES:
        needing = [f for f in falsifiers if device in f.falsifier.devices]
        if needing:
            passed = sum(f.device_passed(device) for f in needing)  # every subject's cell
            per_device[device] = {"discharged": passed, "total": len(needing)}
    falsifier_states = {s.value: sum(f.state is s for f in falsifiers) for s in FalsifierState}
    declared = sum(len(f.mutants) for f in falsifiers)
    killed = sum(f.killed for f in falsifiers)
    return {
        "contracts": len(report.entries),
        "contracts_per_status": per_status,
        "falsifiers": len(falsifiers),
        "falsifiers_per_state": falsifier_states,
        "discharged_per_device": per_device,
        "mutants": {"killed": killed, "declared": declared, "unproven_falsifiers": sum(f.unproven for f in falsifiers)},
        "open_ship_blocking": [f.id for _, f in open_ship_blocking(report)],
        "overclaims": [e.status.id for e in report.entries if overclaim(e.status)],
        "stale": [{"falsifier": f.id, "subject": d.subject, "device": d.device, "why": list(d.stale_because)}
                  for _, f, d in stale_rows(report)],
        "orphan_records": len(report.orphans),
        "failures_outside_required_cells": len(report.dropped),
        "checkpoint_rows": len(report.adhoc),
    }



def score(killed: int, declared: int) -> str:
    return f"{killed}/{declared} ({100 * killed // declared}%)" if declared else "0/0"
