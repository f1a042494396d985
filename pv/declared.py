"""Declared vs computed: a contract's typed-in `metadata.status` against its evidence (PV501).

`overclaim` says why a declared status claims more than the computed one. `pv validate` asks it
of every contract that declares more than DRAFT, and computing a contract's whole status judges
every record that decides anything, planted-bug records included, against the code it ran: most
of what a cold `pv validate` of a repository with a large ledger costs. Most declared statuses
need far less to be cleared, so `cannot_overclaim` decides from as few judged records as it can
and the whole status is computed only where it cannot (then to explain the finding):

* DRAFT_RED, RETIRED and SUPERSEDED never overclaim (`overclaim` flags none of them);
* DRAFT overclaims only when the evidence is red: a cell whose deciding record is a fresh FAIL
  or ERROR. Only those records are judged against the code;
* DRAFT_PARTIAL_DISCHARGE overclaims when the evidence is red or holds nothing fresh: the red
  check above, plus the PASS records judged one by one until a fresh one is found;
* ACTIVE_RUNTIME needs every cell and every planted bug: the whole status, always.

The shortcut only chooses which cells to judge: it finds each cell's deciding record as
`pv.lifecycle` does (`deciding_record`: refused records never decide, a SKIP never hides the
failure before it) and judges the cells that could decide the claim with `pv.lifecycle.cell_evidence`
itself. tests/test_declared.py compares it with the whole computation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from pv import keypaths as K
from pv.diagnostics import Diagnostic
from pv.ledger import LedgerRecord, Verdict
from pv.lifecycle import (FAILING, HAND_SET, ContractStatus, DeviceState, Indexed, cell_evidence, cell_records, contract_status,
                          deciding_record, group_records, place_records)
from pv.schema import STATUS_RANK, Contract, LifecycleStatus

if TYPE_CHECKING:  # pragma: no cover
    from pv.loader import LoadedContract

_RED = (Verdict.FAIL, Verdict.ERROR)


def overclaim(status: ContractStatus) -> str | None:
    """Why the declared status claims more than the evidence supports, or None.

    Claiming more means: declaring anything but DRAFT_RED while the evidence is red (a
    falsified or errored falsifier must not hide behind DRAFT or a green status), or declaring
    DRAFT_PARTIAL_DISCHARGE / ACTIVE_RUNTIME above what the evidence supports. Declaring
    less than the evidence (e.g. DRAFT with everything discharged) is allowed: it lags, and
    `pv status --promote` catches it up. RETIRED/SUPERSEDED are set by hand and never flagged.
    """
    declared, evidence = status.declared, status.evidence
    if declared in HAND_SET:
        return None
    if evidence is LifecycleStatus.DRAFT_RED and declared is not LifecycleStatus.DRAFT_RED:
        red = [f"{f.id} {f.explain()}" for f in status.falsifiers if f.state in FAILING]
        return f"the evidence is red ({'; '.join(red)})"
    if declared in (LifecycleStatus.DRAFT_PARTIAL_DISCHARGE, LifecycleStatus.ACTIVE_RUNTIME):
        if STATUS_RANK[declared] > STATUS_RANK[evidence]:
            if evidence is LifecycleStatus.DRAFT:
                return "there is no fresh evidence (every falsifier PENDING or STALE)"
            return " / ".join(status.blockers) or "the evidence does not support it"
    return None


def cannot_overclaim(contract: Contract, groups: dict[tuple[str, str], list[Indexed]], code: Any = None,
                     subject_param: str = "subject") -> bool:
    """True when the evidence shows that `contract`'s declared status claims no more than it
    (so `overclaim(contract_status(...))` is None); False when only the whole status can say."""
    declared = contract.metadata.status
    if declared in HAND_SET or declared is LifecycleStatus.DRAFT_RED:
        return True
    if declared not in (LifecycleStatus.DRAFT, LifecycleStatus.DRAFT_PARTIAL_DISCHARGE):
        return False
    need_fresh = declared is LifecycleStatus.DRAFT_PARTIAL_DISCHARGE
    cid = contract.metadata.id
    for falsifier in contract.falsification_tests:
        cells, cell_sha, relevant = place_records(falsifier, groups.get((cid, falsifier.id), []), subject_param)
        for runtime, subject, device, here in cell_records(cells, relevant):
            sha = cell_sha[subject]
            deciding = deciding_record([(i, r) for i, r in here if r.falsifier_sha256 == sha], code, falsifier)
            # Only a cell decided by a failure can be red, and only one decided by a PASS fresh: those
            # are judged as the whole status judges them (their code; a later record overruling them)
            if deciding is None or not (deciding.verdict in _RED or (need_fresh and deciding.verdict is Verdict.PASS)):
                continue
            state = cell_evidence(device, subject, here, sha, code, falsifier, runtime).state
            if state in (DeviceState.FAIL, DeviceState.ERROR):
                return False  # red: the whole status says why
            need_fresh = need_fresh and state is not DeviceState.PASS
    return not need_fresh


def declared_status_diagnostics(
    loaded_contracts: Iterable[LoadedContract],
    records: Iterable[LedgerRecord] | dict[tuple[str, str], list[Indexed]], code: Any = None,
    subject_param: str = "subject",
) -> list[Diagnostic]:
    """PV501 for every contract whose declared `metadata.status` claims more than its evidence.

    `loaded_contracts` are pv.loader results (those whose schema failed are skipped);
    `records` are the ledger's records (`pv.ledger.read(ws.ledger).records`), or
    `group_records(...)` of them (a caller judging contracts one at a time groups them once).
    """
    groups = records if isinstance(records, dict) else group_records(records)
    out = []
    for loaded in loaded_contracts:
        if loaded is None or loaded.contract is None:
            continue
        if cannot_overclaim(loaded.contract, groups, code, subject_param):
            continue
        status = contract_status(loaded.contract, groups, code, subject_param)
        reason = overclaim(status)
        if reason is None:
            continue
        line, col = loaded.position(K.STATUS.at())  # where pv.validation places a replayed finding too
        demote = " --allow-demote" if STATUS_RANK.get(status.declared, 0) > STATUS_RANK[status.evidence] else ""
        out.append(Diagnostic(
            path=loaded.display_path, line=line, col=col, code="PV501",
            message=(f"declared status {status.declared.value} claims more than the evidence, "
                     f"which supports {status.evidence.value}: {reason}"),
            hint=(f"run the falsifiers (pv run), or set the status from the evidence: "
                  f"pv status --promote{demote} {status.id}"),
        ))
    return out
