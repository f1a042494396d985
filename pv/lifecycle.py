"""Lifecycle status computed from evidence: pure functions over contracts + ledger records.

Nothing here reads files or the clock, so every rule can be tested with hand-made records.
`pv status` (pv/status.py) and `pv validate` (declared vs computed, PV501) call in here.

The rules (docs/internals.md, "Lifecycle"):

* A record is *fresh* when its `falsifier_sha256` equals the falsifier's current
  `definition_sha256()`; otherwise it is *stale*. Records match a falsifier by contract id
  and falsifier id; the contract's version plays no part, so bumping it (promotion) keeps
  the evidence fresh.
* A falsifier's required *cells* are its subjects x its devices (its devices alone when it
  has no `subjects:`). A record belongs to the cell of its `subject` and `device`; a cell's
  definition hash is `definition_sha256(subject, subject_param)`. Records of other subjects
  (a user's `path:` checkpoint, a subject since dropped) never count toward a cell:
  `adhoc_cells` lists the path subjects' evidence separately.
* Per falsifier x required cell, the latest fresh non-mutant record decides ("latest" is
  the one appended last to the ledger; `time_utc` is shown, never used to order): PASS, FAIL,
  ERROR or SKIP; PENDING when there is none; STALE when only records for an older definition
  exist on that device. A SKIP never hides the FAIL or ERROR before it (that failure decides).
  Records for devices the falsifier does not require are ignored.
* Per falsifier: FALSIFIED if any device FAILs; ERROR if any device ERRORs (a failure too);
  DISCHARGED if PASS on every required device; PARTIAL if on some; STALE if the falsifier
  has only records of older definitions; PENDING otherwise. SKIP never discharges: a device
  whose latest record is a SKIP shows SKIP and counts as not passed.
* Mutant strength per falsifier x declared mutant, from fresh records run under that mutant,
  latest per required device: KILLED if the latest record on some device is a FAIL and the
  falsifier PASSes, fresh, on that cell without the bug (a check that fails on clean code
  "kills" every bug; such a FAIL is STALE, not counted) (many
  mutants act on one device only, e.g. `cuda_drops_qkv_bias`, so surviving on a device the
  mutant does not touch does not count against the falsifier); else ERROR if one errored;
  else SURVIVED if one passed; else NOT_RUN. A falsifier that declares no mutant is UNPROVEN.
  Only the cells of a runtime the bug is planted in count (`@mutant(..., runtimes=)`, asked of
  `code.mutant_meets`): a record under the bug on another runtime, where its code never runs,
  counts neither way; a declared bug that no cell of the falsifier meets is NO_CELL (not killed).
* Per contract: DRAFT (no fresh PASS/FAIL/ERROR on any falsifier) -> DRAFT_RED (a FALSIFIED
  or ERROR falsifier) -> DRAFT_PARTIAL_DISCHARGE (no failure, not all discharged, or a
  mutant not killed, or an UNPROVEN falsifier) -> ACTIVE_RUNTIME (every falsifier discharged
  on every required device, fresh, every declared mutant killed, no UNPROVEN falsifier).
  RETIRED and SUPERSEDED are set by hand and kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from pv import keypaths as K
from pv.codebind import BEFORE_BINDING
from pv.diagnostics import Diagnostic
from pv.identity import PLANTED_IN_CHECKS
from pv.ledger import LedgerRecord, Verdict
from pv.orphans import orphans  # noqa: F401 - re-exported: pv.lifecycle.orphans
from pv.runtimes import cell_runtime
from pv.schema import STATUS_RANK, Contract, FalsificationTest, LifecycleStatus
from pv.timing import note

if TYPE_CHECKING:  # pragma: no cover
    from pv.loader import LoadedContract

DEFINITION_CHANGED = "definition changed"
NOT_COUNTED = "not counted: "  # a stale_because entry: why the record is refused (pv.identity)
# Why a FAIL under a planted bug is not a kill: the falsifier does not PASS on that cell without it.
NO_CLEAN_PASS = "a FAIL under the bug is a kill only where the falsifier PASSes without it (here: {state})"
HAND_SET = frozenset({LifecycleStatus.RETIRED, LifecycleStatus.SUPERSEDED})


class DeviceState(str, Enum):
    """What the latest evidence says about one falsifier on one device."""

    PENDING = "PENDING"  # no record at all
    PASS = "PASS"
    FAIL = "FAIL"
    ERROR = "ERROR"
    SKIP = "SKIP"  # the device was absent: never a discharge
    STALE = "STALE"  # the latest record is for an older definition, or for code that has changed


class FalsifierState(str, Enum):
    PENDING = "PENDING"
    FALSIFIED = "FALSIFIED"
    ERROR = "ERROR"
    PARTIAL = "PARTIAL"
    DISCHARGED = "DISCHARGED"
    STALE = "STALE"


class MutantState(str, Enum):
    KILLED = "KILLED"  # the falsifier FAILed under the planted bug: it can detect it
    SURVIVED = "SURVIVED"  # the falsifier PASSed under the planted bug: it is blind to it
    ERROR = "ERROR"
    STALE = "STALE"  # the latest record under the bug ran other code than the tree's: re-run it
    NOT_RUN = "NOT_RUN"
    NO_CELL = "NO_CELL"  # the bug is planted in no runtime the falsifier runs on: it can never meet it


FAILING = frozenset({FalsifierState.FALSIFIED, FalsifierState.ERROR})
_FAILURES = frozenset({Verdict.FAIL, Verdict.ERROR})  # a record of these after a PASS overrules it
_SURVIVALS = frozenset({Verdict.PASS, Verdict.ERROR})  # under a planted bug: after a kill
_VERDICT_STATE = {
    Verdict.PASS: DeviceState.PASS,
    Verdict.FAIL: DeviceState.FAIL,
    Verdict.ERROR: DeviceState.ERROR,
    Verdict.SKIP: DeviceState.SKIP,
}


# --- results -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceEvidence:
    """What the latest evidence says about one cell: one device (x one subject)."""

    device: str
    state: DeviceState
    record: LedgerRecord | None = None  # the deciding record (the latest stale one when STALE)
    # Why a STALE device needs a re-run: "definition changed", "recorded before code binding",
    # or the modules whose code changed since the record.
    stale_because: tuple[str, ...] = ()
    subject: str | None = None  # None: the falsifier has no subjects
    runtime: str | None = None  # None: the falsifier has no `runtimes:`

    @property
    def label(self) -> str:
        """`cpu`, `cpu[tiny-trained]` for a subject's cell (as in the test's node id), and
        `cpu[tiny-trained]@transformers` for a runtime's."""
        label = self.device if self.subject is None else f"{self.device}[{self.subject}]"
        return label if self.runtime is None else f"{label}@{self.runtime}"

    def stale_reason(self) -> str:
        """Why this device's evidence is stale, in words."""
        why = list(self.stale_because)
        if why == [DEFINITION_CHANGED]:
            return "evidence for an older definition"
        if why == [BEFORE_BINDING]:
            return "recorded before code binding (no digest of the code it ran)"
        if len(why) == 1 and why[0].startswith(NOT_COUNTED):
            return why[0][len(NOT_COUNTED):]
        return "code changed since: " + ", ".join(why)


@dataclass(frozen=True)
class MutantEvidence:
    mutant: str
    state: MutantState
    devices: tuple[DeviceEvidence, ...] = ()  # latest fresh record under this mutant, per device

    @property
    def record(self) -> LedgerRecord | None:
        """The record that decided the state (for the dashboard's date/commit)."""
        wanted = {
            MutantState.KILLED: DeviceState.FAIL,
            MutantState.ERROR: DeviceState.ERROR,
            MutantState.SURVIVED: DeviceState.PASS,
        }.get(self.state)
        return next((d.record for d in self.devices if d.state is wanted), None)

    def stale_reasons(self, most: int | None = None) -> dict[str, str]:
        """Why each stale cell under this bug does not count, by cell label (empty: none is stale);
        `most`: name at most that many changed modules per cell (a timing record binds dozens)."""
        out = {}
        for d in self.devices:
            if d.state is DeviceState.STALE:
                why = d.stale_reason()
                if most is not None and why.startswith("code changed since: ") and len(d.stale_because) > most:
                    why = (f"code changed since: {', '.join(d.stale_because[:most])} "
                           f"and {len(d.stale_because) - most} more")
                out[d.label] = why
        return out


@dataclass(frozen=True)
class FalsifierStatus:
    contract: str
    falsifier: FalsificationTest
    sha256: str
    state: FalsifierState
    devices: tuple[DeviceEvidence, ...]  # in the order of `falsifier.devices`
    mutants: tuple[MutantEvidence, ...]  # in the order of `falsifier.mutants`

    @property
    def id(self) -> str:
        return self.falsifier.id

    @property
    def unproven(self) -> bool:
        """No planted bug was declared, so nothing shows this falsifier can fail."""
        return not self.falsifier.mutants

    @property
    def killed(self) -> int:
        return sum(m.state is MutantState.KILLED for m in self.mutants)

    @property
    def strength(self) -> str:
        """`UNPROVEN`, or `killed/declared`."""
        return "UNPROVEN" if self.unproven else f"{self.killed}/{len(self.mutants)}"

    @property
    def has_fresh_evidence(self) -> bool:
        return any(d.state in (DeviceState.PASS, DeviceState.FAIL, DeviceState.ERROR) for d in self.devices)

    def runtimes_discharged(self) -> list[str]:
        """The runtimes on which every required cell PASSes (the falsifier's `runtimes:` order)."""
        return [rt for rt in (self.falsifier.runtimes or []) if all(
            d.state is DeviceState.PASS for d in self.devices if d.runtime == rt)]

    def device(self, name: str) -> DeviceEvidence | None:
        return next((d for d in self.devices if d.device == name), None)

    def devices_in(self, *states: DeviceState) -> list[str]:
        return [d.label for d in self.devices if d.state in states]

    def device_passed(self, name: str) -> bool:
        """Every cell of device `name` (every subject) PASSes."""
        cells = [d for d in self.devices if d.device == name]
        return bool(cells) and all(d.state is DeviceState.PASS for d in cells)

    def explain(self) -> str:
        """One line: why this falsifier is where it is."""
        state = self.state
        if state is FalsifierState.DISCHARGED:
            return f"passed on {', '.join(self.devices_in(DeviceState.PASS))}{note(d.record for d in self.devices)}"
        if state is FalsifierState.FALSIFIED:
            return f"FAIL on {', '.join(self.devices_in(DeviceState.FAIL))}"
        if state is FalsifierState.ERROR:
            return f"ERROR on {', '.join(self.devices_in(DeviceState.ERROR))}"
        if state is FalsifierState.STALE:
            stale = [f"{d.label} ({d.stale_reason()})" for d in self.devices if d.state is DeviceState.STALE]
            return f"stale on {', '.join(stale)}: run it again"
        missing = [f"{d.label} ({d.state.value})" for d in self.devices if d.state is not DeviceState.PASS]
        if state is FalsifierState.PARTIAL:
            return f"passed on {', '.join(self.devices_in(DeviceState.PASS))}; not on {', '.join(missing)}"
        if all(d.state is DeviceState.PENDING for d in self.devices):
            return "no evidence yet"
        return f"no pass yet: {', '.join(missing)}"


@dataclass(frozen=True)
class ContractStatus:
    contract: Contract
    declared: LifecycleStatus
    evidence: LifecycleStatus  # what the evidence alone supports (one of the first four)
    falsifiers: tuple[FalsifierStatus, ...]
    blockers: tuple[str, ...] = field(default=())  # why it is not ACTIVE_RUNTIME

    @property
    def id(self) -> str:
        return self.contract.metadata.id

    @property
    def hand_set(self) -> bool:
        return self.declared in HAND_SET

    @property
    def computed(self) -> LifecycleStatus:
        """The status pv reports: RETIRED/SUPERSEDED are kept, the rest come from evidence."""
        return self.declared if self.hand_set else self.evidence

    @property
    def discharged(self) -> int:
        return sum(f.state is FalsifierState.DISCHARGED for f in self.falsifiers)

    @property
    def mutants_declared(self) -> int:
        return sum(len(f.mutants) for f in self.falsifiers)

    @property
    def mutants_killed(self) -> int:
        return sum(f.killed for f in self.falsifiers)

    @property
    def devices(self) -> list[str]:
        """Every device some falsifier requires, in a fixed order (cpu, cuda)."""
        return _device_order({d for f in self.falsifiers for d in f.falsifier.devices})

    def evidence_summary(self) -> str:
        """E.g. `4/4 falsifiers discharged on cpu,cuda; 6/6 mutants killed`."""
        text = (f"{self.discharged}/{len(self.falsifiers)} falsifiers discharged on "
                f"{','.join(self.devices)}; {self.mutants_killed}/{self.mutants_declared} mutants killed")
        failing = [f"{f.id} {f.explain()}" for f in self.falsifiers if f.state in FAILING]
        unproven = [f.id for f in self.falsifiers if f.unproven]
        if failing:
            text += "; " + "; ".join(failing)
        if unproven:
            text += f"; UNPROVEN (no mutant declared): {', '.join(unproven)}"
        return text


# --- computation -------------------------------------------------------------------------------

Indexed = tuple[int, LedgerRecord]  # ledger position, record


def _latest(items: Iterable[Indexed]) -> LedgerRecord | None:
    """The record appended last. The ledger's order decides, never the typed-in `time_utc`:
    a record dated 2099 is no later than the line after it."""
    best = max(items, key=lambda item: item[0], default=None)
    return None if best is None else best[1]


def _latest_counted(items: Iterable[Indexed], code: Any, falsifier: FalsificationTest,
                    passed_over: list[tuple[LedgerRecord, str]] | None = None) -> LedgerRecord | None:
    """The record appended last among those not `refused`: the same record as
    `_latest(item for item in items if refused(...) is None)`, but asked of the latest first, so
    the records it supersedes are never judged (judging one renders and digests the contract's
    generated test: it was most of a cold `pv validate` of this repository). `passed_over`, when
    given, receives (record, why refused) of each later record it passed over, latest first."""
    for _, record in sorted(items, key=lambda item: item[0], reverse=True):
        why = refused(record, code, falsifier)
        if why is None:
            return record
        if passed_over is not None:
            passed_over.append((record, why))
    return None


def _overruled_by(deciding: LedgerRecord, passed_over: list[tuple[LedgerRecord, str]], adverse: frozenset[Verdict],
                  code: Any, falsifier: FalsificationTest) -> tuple[LedgerRecord, str] | None:
    """The latest record appended after `deciding` that does not count but would have decided
    against it (`adverse`: a FAIL or ERROR after a PASS; a PASS or ERROR after a kill), on the
    code of the tree: (it, why it is stale), else None. A record that no longer counts is no
    evidence either way, so it cannot make the cell red; but it cannot leave the older record
    deciding either. An honest FAIL made not to count by a later contract edit (a sibling
    falsifier that ran beside it removed) would otherwise bring the PASS before it back."""
    for record, why in passed_over:
        if record.verdict in adverse and deciding.verdict not in adverse and not code_changes(record, code, falsifier):
            return record, (f"{NOT_COUNTED}a later {record.verdict.value} of it does not count ({why}), so the "
                            f"{deciding.verdict.value} before it cannot decide: run it again")
    return None


def _device_order(devices: Iterable[str]) -> list[str]:
    from pv.schema import DEVICES

    rank = {d: i for i, d in enumerate(DEVICES)}
    return sorted(set(devices), key=lambda d: (rank.get(d, len(rank)), d))


def group_records(records: Iterable[LedgerRecord]) -> dict[tuple[str, str], list[Indexed]]:
    """Records by (contract id, falsifier id), keeping their ledger position for ties."""
    groups: dict[tuple[str, str], list[Indexed]] = {}
    for index, record in enumerate(records):
        groups.setdefault((record.contract, record.falsifier), []).append((index, record))
    return groups


def code_changes(record: LedgerRecord, code: Any, falsifier: FalsificationTest | None = None) -> tuple[str, ...]:
    """Why the record's code is not the tree's (() when it is, or when `code` is None: a caller
    that does not judge code, e.g. a unit test of the other rules). A falsifier without
    `check:` runs no code, so its (ERROR) records cannot go stale by code."""
    if code is None or (falsifier is not None and falsifier.check is None):
        return ()
    return tuple(code.record_changes(record))


def refused(record: LedgerRecord, code: Any, falsifier: FalsificationTest) -> str | None:
    """Why a record never counts (pv.identity.EvidenceCheck.refuses: not the contract's generated
    test, or not its definition judged); None when it may, or `code` does not judge that."""
    refuses = getattr(code, "refuses", None)
    return None if refuses is None else refuses(record, falsifier)


def mutant_meets(code: Any, mutant: str, runtime: str | None) -> bool:
    """Whether the bug `mutant` is planted in the runtime of a cell (pv.identity.EvidenceCheck
    reads the mutants module's `runtimes=`); True when `code` does not judge that."""
    meets = getattr(code, "mutant_meets", None)
    return True if meets is None else meets(mutant, runtime)


def deciding_record(current: list[Indexed], code: Any, falsifier: FalsificationTest,
                    passed_over: list[tuple[LedgerRecord, str]] | None = None) -> LedgerRecord | None:
    """The record that decides a cell among its `current` records (those of the cell's definition),
    before its code is judged: the latest that counts, or, where that is a SKIP, the failure before
    it. `cell_evidence` then judges its code and whether a later record that does not count overrules it."""
    fresh = _latest_counted(current, code, falsifier, passed_over)
    if fresh is not None and fresh.verdict is Verdict.SKIP:
        # A SKIP says the device was absent and proves nothing, so it never hides a failure: a run
        # on a machine without the device appended after a FAIL would otherwise turn the cell from
        # red to SKIP with nothing run. The failure before it decides (STALE if its code changed).
        before = _latest_counted([(i, r) for i, r in current if r.verdict is not Verdict.SKIP], code, falsifier,
                                 passed_over)
        if before is not None and before.verdict in _FAILURES:
            fresh = before
    return fresh


def cell_evidence(device: str, subject: str | None, here: list[Indexed], sha: str, code: Any,
          falsifier: FalsificationTest, runtime: str | None = None) -> DeviceEvidence:
    """The evidence of one cell from its records (`here`: the cell's non-mutant records). A
    record `refused` never decides; when only such records are left the cell is STALE."""
    current = [(i, r) for i, r in here if r.falsifier_sha256 == sha]
    passed_over: list[tuple[LedgerRecord, str]] = []
    fresh = deciding_record(current, code, falsifier, passed_over)
    overruled = None if fresh is None else _overruled_by(fresh, passed_over, _FAILURES, code, falsifier)
    if overruled is not None:
        return DeviceEvidence(device, DeviceState.STALE, overruled[0], (overruled[1],), subject, runtime)
    if fresh is None and current:
        latest = _latest(current)
        return DeviceEvidence(device, DeviceState.STALE, latest, (NOT_COUNTED + str(refused(latest, code, falsifier)),),
                              subject, runtime)
    changed = () if fresh is None else code_changes(fresh, code, falsifier)
    if fresh is not None and changed:
        return DeviceEvidence(device, DeviceState.STALE, fresh, changed, subject, runtime)
    if fresh is not None:
        return DeviceEvidence(device, _VERDICT_STATE[fresh.verdict], fresh, subject=subject, runtime=runtime)
    if here:
        return DeviceEvidence(device, DeviceState.STALE, _latest(here), (DEFINITION_CHANGED,), subject, runtime)
    return DeviceEvidence(device, DeviceState.PENDING, subject=subject, runtime=runtime)


def cell_subject(record: LedgerRecord, cell_sha: dict[str | None, str]) -> str | None:
    """The subject of the cell a record belongs to. A record made before subjects (subject null)
    for a falsifier that now lists them belongs to the subject whose cell hash it carries: it
    ran the check with that subject in `params` (moving it to `subjects:` keeps the hash)."""
    if record.subject is not None or None in cell_sha:
        return record.subject
    return next((s for s, sha in cell_sha.items() if sha == record.falsifier_sha256), None)


Placed = tuple[int, LedgerRecord, "str | None", "str | None"]  # position, record, its subject, its runtime


def place_records(falsifier: FalsificationTest, records: Sequence[Indexed], subject_param: str = "subject",
                  ) -> tuple[list[tuple[str | None, str | None, str]], dict[str | None, str], list[Placed]]:
    """The falsifier's required cells (runtime, subject, device), each subject's definition hash,
    and the records that belong to a required cell, each with its subject and runtime."""
    sha = falsifier.definition_sha256()
    cells = falsifier.runtime_cells()
    required = set(cells)
    cell_sha = {s: sha if s is None else falsifier.definition_sha256(s, subject_param) for _, s, _ in cells}
    placed = [(i, r, cell_subject(r, cell_sha), cell_runtime(r.runtime, falsifier.runtimes)) for i, r in records]
    return cells, cell_sha, [(i, r, s, rt) for i, r, s, rt in placed if (rt, s, r.device) in required]


def cell_records(cells: Sequence[tuple[str | None, str | None, str]], relevant: Sequence[Placed],
                 ) -> list[tuple[str | None, str | None, str, list[Indexed]]]:
    """Per required cell (runtime, subject, device), its non-mutant records: what `cell_evidence` judges."""
    runtime = [(i, r, s, rt) for i, r, s, rt in relevant if r.mutant is None]
    return [(rt_, subject, device, [(i, r) for i, r, s, rt in runtime if (rt, s, r.device) == (rt_, subject, device)])
            for rt_, subject, device in cells]


def falsifier_status(contract_id: str, falsifier: FalsificationTest, records: Sequence[Indexed],
                     code: Any = None, subject_param: str = "subject") -> FalsifierStatus:
    """Status of one falsifier from the records of (contract id, falsifier id). `code`
    (pv.codebind.TreeDigests) says whether a record's code is the tree's; `subject_param`
    ([tool.pv]) names the parameter a subject fills, which its cell's definition hash covers."""
    sha = falsifier.definition_sha256()
    cells, cell_sha, relevant = place_records(falsifier, records, subject_param)
    devices = [cell_evidence(device, subject, here, cell_sha[subject], code, falsifier, rt_)
               for rt_, subject, device, here in cell_records(cells, relevant)]

    states = {d.state for d in devices}
    if DeviceState.FAIL in states:
        state = FalsifierState.FALSIFIED
    elif DeviceState.ERROR in states:
        state = FalsifierState.ERROR
    elif states == {DeviceState.PASS}:
        state = FalsifierState.DISCHARGED
    elif DeviceState.STALE in states:  # a re-run is owed before anything else can be said
        state = FalsifierState.STALE
    elif DeviceState.PASS in states:
        state = FalsifierState.PARTIAL
    else:
        state = FalsifierState.PENDING

    # A failure under a planted bug shows the falsifier can see it only where the falsifier PASSes
    # without the bug: on a cell that FAILs (or has no fresh PASS) without it, every bug "dies".
    clean = {(d.runtime, d.subject, d.device): d.state for d in devices}
    mutants = []
    for mutant in falsifier.mutants:
        under = [(i, r, s, rt) for i, r, s, rt in relevant if r.mutant == mutant and r.falsifier_sha256 == cell_sha[s]]
        per_device = []
        met = [cell for cell in cells if mutant_meets(code, mutant, cell[0])]
        for rt_, subject, device in met:
            passed_over: list[tuple[LedgerRecord, str]] = []
            latest = _latest_counted([(i, r) for i, r, s, rt in under if (rt, s, r.device) == (rt_, subject, device)],
                                     code, falsifier, passed_over)
            overruled = None if latest is None else _overruled_by(latest, passed_over, _SURVIVALS, code, falsifier)
            if overruled is not None:  # a later survival that no longer counts: not a kill on the older run
                per_device.append(DeviceEvidence(device, DeviceState.STALE, overruled[0], (overruled[1],), subject, rt_))
            elif latest is not None:
                changed = code_changes(latest, code, falsifier)
                state_here = DeviceState.STALE if changed else _VERDICT_STATE[latest.verdict]
                without_bug = clean.get((rt_, subject, device))
                if state_here is DeviceState.FAIL and without_bug is not DeviceState.PASS:
                    state_here, changed = DeviceState.STALE, (NOT_COUNTED + NO_CLEAN_PASS.format(
                        state="no record" if without_bug is None else without_bug.value),)
                per_device.append(DeviceEvidence(device, state_here, latest, changed, subject, rt_))
            elif passed_over and passed_over[0][1].startswith(PLANTED_IN_CHECKS):
                # killed, but only a bug of the check's own code: say so, never NOT_RUN
                record, why = passed_over[0]
                per_device.append(DeviceEvidence(device, DeviceState.STALE, record, (NOT_COUNTED + why,), subject, rt_))
        seen = {d.state for d in per_device}
        if DeviceState.FAIL in seen:
            mstate = MutantState.KILLED
        elif DeviceState.ERROR in seen:
            mstate = MutantState.ERROR
        elif DeviceState.PASS in seen:
            mstate = MutantState.SURVIVED
        elif DeviceState.STALE in seen:
            mstate = MutantState.STALE
        elif not met:
            mstate = MutantState.NO_CELL
        else:
            mstate = MutantState.NOT_RUN
        mutants.append(MutantEvidence(mutant, mstate, tuple(per_device)))

    return FalsifierStatus(contract_id, falsifier, sha, state, tuple(devices), tuple(mutants))


@dataclass(frozen=True)
class AdhocCell:
    """The latest evidence of one falsifier on a user's checkpoint (a `path:` subject) on one
    device. Never part of a contract's status."""

    contract: str
    falsifier: FalsificationTest
    subject: str
    subject_digest: str | None
    evidence: DeviceEvidence


def adhoc_cells(contracts: Iterable[Contract], records: Sequence[LedgerRecord], code: Any = None) -> list[AdhocCell]:
    """Per (falsifier, path subject, checkpoint digest, device): the latest non-mutant record,
    PASS/FAIL/ERROR/SKIP when it is for the falsifier's current definition and the tree's code,
    else STALE. A checkpoint rewritten at the same path has another digest: another row."""
    from pv.subjects import is_path_subject

    by_id = {(c.metadata.id, f.id): f for c in contracts for f in c.falsification_tests if f.subjects}
    groups: dict[tuple[str, str, str, str | None, str], list[Indexed]] = {}
    for index, r in enumerate(records):
        if r.mutant is None and is_path_subject(r.subject) and (r.contract, r.falsifier) in by_id:
            groups.setdefault((r.contract, r.falsifier, r.subject, r.subject_digest, r.device), []).append((index, r))
    out = []
    for (cid, fid, subject, digest, device), here in sorted(groups.items(), key=lambda kv: (
            kv[0][2], kv[0][3] or "", kv[0][0], kv[0][1], kv[0][4])):
        falsifier = by_id[(cid, fid)]
        cell = cell_evidence(device, subject, here, falsifier.definition_sha256(), code, falsifier)
        out.append(AdhocCell(cid, falsifier, subject, digest, cell))
    return out


def _in_parentheses(reasons: dict[str, str]) -> str:
    return " (" + "; ".join(f"{cell}: {why}" for cell, why in reasons.items()) + ")" if reasons else ""


def contract_status(
    contract: Contract,
    records: Iterable[LedgerRecord] | dict[tuple[str, str], list[Indexed]],
    code: Any = None,
    subject_param: str = "subject",
) -> ContractStatus:
    """Status of one contract. `records` is the ledger's records, or `group_records(...)` of them."""
    groups = records if isinstance(records, dict) else group_records(records)
    cid = contract.metadata.id
    falsifiers = tuple(falsifier_status(cid, f, groups.get((cid, f.id), []), code, subject_param)
                       for f in contract.falsification_tests)

    blockers: list[str] = []  # one line per falsifier that holds the contract back
    for f in falsifiers:
        parts = []
        if f.state is not FalsifierState.DISCHARGED:
            parts.append(f"{f.state.value} ({f.explain()})")
        if f.unproven:
            parts.append("UNPROVEN (declares no mutant, so nothing shows it can fail)")
        # a STALE bug says why (code changed, planted in check code only, no clean PASS): the kill
        # it once had does not count, and the line is where the dashboard's reader looks for it
        not_killed = [f"{m.mutant} {m.state.value}" + _in_parentheses(m.stale_reasons(most=3))
                      for m in f.mutants if m.state is not MutantState.KILLED]
        if not_killed:
            parts.append(f"mutants not killed: {', '.join(not_killed)}")
        if parts:
            blockers.append(f"{f.id}: {'; '.join(parts)}")

    if not any(f.has_fresh_evidence for f in falsifiers):
        evidence = LifecycleStatus.DRAFT
    elif any(f.state in FAILING for f in falsifiers):
        evidence = LifecycleStatus.DRAFT_RED
    elif blockers:
        evidence = LifecycleStatus.DRAFT_PARTIAL_DISCHARGE
    else:
        evidence = LifecycleStatus.ACTIVE_RUNTIME
    return ContractStatus(contract, contract.metadata.status, evidence, falsifiers, tuple(blockers))


def compute(contracts: Iterable[Contract], records: Iterable[LedgerRecord], code: Any = None,
            subject_param: str = "subject") -> list[ContractStatus]:
    """Statuses of many contracts, sorted by contract id."""
    groups = group_records(records)
    statuses = [contract_status(c, groups, code, subject_param) for c in contracts]
    return sorted(statuses, key=lambda s: s.id)
