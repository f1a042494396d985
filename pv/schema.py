"""The contract schema: the single source of truth.

Pydantic v2 models with `extra="forbid"` everywhere: a misspelt key (`predicton:`) is an
error, never silently dropped. The JSON Schema committed at pv/schema/contract.schema.json is
exported from these models (`python -m pv.schema --write`), and a test checks that it matches.

Key names follow the provable-contracts tradition (metadata, equations, proof_obligations,
falsification_tests with id/rule/prediction/if_fails) and add what makes a contract
executable: check, params, devices, mutants, tolerance, ship_blocking.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

SCHEMA_PATH = Path(__file__).parent / "schema" / "contract.schema.json"
# Where `pv schema --write` puts a project's own copy, which its contracts reference relatively
# (a path into pv's install would hold on one machine only).
PROJECT_SCHEMA = ".pv/contract.schema.json"


def schema_reference(contract_dir: Path, schema_file: Path) -> str:
    """What a contract in `contract_dir` writes after `$schema=` to name `schema_file`."""
    return os.path.relpath(schema_file, contract_dir).replace(os.sep, "/")

# --- identifiers -----------------------------------------------------------------------------

CONTRACT_ID_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"
"""Contract ids are kebab-case slugs; the file is named `<id>-v<major>.yaml`."""

FALSIFIER_ID_PATTERN = r"^FALSIFY-[A-Z0-9]+(-[A-Z0-9]+)*-[0-9]{3}$"
"""FALSIFY-<WORDS>-NNN, e.g. FALSIFY-CUDA-FORWARD-PARITY-001."""

OBLIGATION_ID_PATTERN = r"^[A-Z][A-Z0-9]*(-[A-Z0-9]+)*-[0-9]{3}$"
"""<PREFIX>-<WORDS>-NNN, e.g. APCFP-BND-001; must not start with FALSIFY-."""

SEMVER_PATTERN = (
    r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$"
)
CHECK_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
MUTANT_PATTERN = r"^[a-z][a-z0-9_]*$"
EQUATION_NAME_PATTERN = r"^[a-z_][a-z0-9_]*$"
SUBJECT_PATTERN = r"^[a-z0-9]+([.-][a-z0-9]+)*$"
"""A subject is named by a plain slug (tiny-trained, qwen2-0.5b-stdlib): it ends up in node ids,
records and the dashboard. A checkpoint given by path is a run-time subject (`path:<dir>`,
pv.subjects), never written in a contract."""

ContractId = Annotated[str, StringConstraints(pattern=CONTRACT_ID_PATTERN)]
FalsifierId = Annotated[str, StringConstraints(pattern=FALSIFIER_ID_PATTERN)]
ObligationId = Annotated[str, StringConstraints(pattern=OBLIGATION_ID_PATTERN)]
SemVer = Annotated[str, StringConstraints(pattern=SEMVER_PATTERN)]
NonEmpty = Annotated[str, StringConstraints(min_length=1)]
MutantName = Annotated[str, StringConstraints(pattern=MUTANT_PATTERN)]
SubjectName = Annotated[str, StringConstraints(pattern=SUBJECT_PATTERN)]
RUNTIME_PATTERN = r"^[a-z0-9][a-z0-9_.-]*$"
RuntimeName = Annotated[str, StringConstraints(pattern=RUNTIME_PATTERN)]
OBSERVATION_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
ObservationName = Annotated[str, StringConstraints(pattern=OBSERVATION_PATTERN)]

# Values a check may receive as params: plain JSON-like data, nothing executable.
ParamScalar = str | int | float | bool | None
ParamValue = ParamScalar | list[ParamScalar] | dict[str, ParamScalar]


class Strict(BaseModel):
    """Base: unknown keys are errors, values are not coerced between types."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --- closed sets -----------------------------------------------------------------------------


class LifecycleStatus(str, Enum):
    """Where a contract stands. The first four are computed from evidence; the last two are
    set by hand."""

    DRAFT = "DRAFT"
    DRAFT_RED = "DRAFT_RED"
    DRAFT_PARTIAL_DISCHARGE = "DRAFT_PARTIAL_DISCHARGE"
    ACTIVE_RUNTIME = "ACTIVE_RUNTIME"
    RETIRED = "RETIRED"
    SUPERSEDED = "SUPERSEDED"


# Order of how much a status claims; `pv validate` flags a declared status above the evidence.
STATUS_RANK = {
    LifecycleStatus.DRAFT: 0,
    LifecycleStatus.DRAFT_RED: 1,
    LifecycleStatus.DRAFT_PARTIAL_DISCHARGE: 2,
    LifecycleStatus.ACTIVE_RUNTIME: 3,
}


class ContractKind(str, Enum):
    KERNEL = "kernel"  # one numerical kernel against a reference (rmsnorm, rope, ...)
    PATTERN = "pattern"  # a behaviour of the runtime (eval methodology, bias application)
    PARITY = "parity"  # two backends or devices agree
    INVARIANT = "invariant"  # a property that holds at every step (finite loss, grad norm)


class ObligationType(str, Enum):
    INVARIANT = "invariant"
    BOUND = "bound"
    EQUIVALENCE = "equivalence"
    MONOTONICITY = "monotonicity"
    CONSERVATION = "conservation"
    ORDERING = "ordering"
    LINEARITY = "linearity"
    IDEMPOTENCY = "idempotency"
    SYMMETRY = "symmetry"
    SOUNDNESS = "soundness"
    COMPLETENESS = "completeness"
    LIVENESS = "liveness"


Device = Literal["cpu", "cuda"]
DEVICES: tuple[str, ...] = ("cpu", "cuda")


# --- parts of a contract ---------------------------------------------------------------------


ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")  # fullmatch: no trailing newline, ASCII digits only


class ChangelogEntry(Strict):
    version: SemVer
    # YAML reads an unquoted 2026-11-22 as a date; a quoted one arrives as text. Both are fine.
    date: Annotated[datetime.date, Field(strict=False, description="ISO date, YYYY-MM-DD")]
    change: NonEmpty

    @field_validator("date", mode="before")
    @classmethod
    def _iso_date_only(cls, value: Any) -> Any:
        """Only YYYY-MM-DD. Lax pydantic would also read `date: 0` as 1970-01-01, a number as a
        Unix time, and a YAML timestamp as its day."""
        if isinstance(value, datetime.datetime):
            raise ValueError(f"{value.isoformat(sep=' ')} is a timestamp; write the day only, YYYY-MM-DD")
        if isinstance(value, datetime.date) or (isinstance(value, str) and ISO_DATE.fullmatch(value)):
            return value
        raise ValueError(f"{value!r} is not a date; write YYYY-MM-DD, e.g. 2026-11-22")


class Metadata(Strict):
    id: ContractId
    version: SemVer
    kind: Annotated[ContractKind, Field(strict=False)]
    status: Annotated[LifecycleStatus, Field(strict=False)] = Field(
        description="Declared status. pv checks it never claims more than the evidence."
    )
    description: NonEmpty
    references: list[NonEmpty] = Field(default_factory=list)
    depends_on: list[ContractId] = Field(default_factory=list)
    changelog: list[ChangelogEntry] = Field(default_factory=list)


class Equation(Strict):
    formula: NonEmpty = Field(description="Documentation: the equation in ordinary notation (‖x‖₂, ∑, ≈ welcome); never parsed.")
    domain: str | None = None
    codomain: str | None = None
    invariants: list[NonEmpty] = Field(default_factory=list)


class DtypeTolerance(Strict):
    # Finite and >= 0: an .inf or .nan tolerance disarms every comparison that uses it.
    rtol: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    atol: Annotated[float, Field(ge=0, allow_inf_nan=False)]


class Tolerance(Strict):
    """Per-falsifier override of the per-dtype defaults (torch.testing's table).

    `source` is mandatory: a tolerance nobody can justify is a tolerance tuned to pass.
    """

    source: NonEmpty = Field(description="How the numbers were chosen (measurement, paper, ...).")
    float64: DtypeTolerance | None = None
    float32: DtypeTolerance | None = None
    bfloat16: DtypeTolerance | None = None
    float16: DtypeTolerance | None = None


class ProofObligation(Strict):
    # The JSON Schema states the FALSIFY- exclusion too, so an editor agrees with pv.
    id: ObligationId = Field(json_schema_extra={"not": {"pattern": "^FALSIFY-"}})
    type: Annotated[ObligationType, Field(strict=False)]
    property: NonEmpty
    formal: str | None = None
    tolerance: Annotated[float, Field(ge=0)] | None = None
    falsifiers: list[FalsifierId] = Field(
        default_factory=list, description="Falsifiers whose discharge discharges this obligation."
    )

    @field_validator("id")
    @classmethod
    def _not_a_falsifier_id(cls, value: str) -> str:
        if value.startswith("FALSIFY-"):
            raise ValueError("obligation ids must not start with FALSIFY- (that prefix is for falsifiers)")
        return value


class FalsificationTest(Strict):
    id: FalsifierId
    rule: NonEmpty = Field(description="The claim, in words.")
    prediction: NonEmpty = Field(
        description="Boolean expression over the check's observations; false means falsified."
    )
    check: Annotated[str, StringConstraints(pattern=CHECK_PATTERN)] | None = Field(
        default=None, description="module:function inside an allowed package."
    )
    params: dict[str, ParamValue] = Field(default_factory=dict)
    devices: list[Device] = Field(min_length=1, description="Every device the falsifier must pass on.")
    subjects: list[SubjectName] | None = Field(
        default=None, min_length=1,
        description="The named subjects (model and data) the falsifier must pass on; each fills the check "
                    "parameter named by [tool.pv] subject_param. Order-free, like devices.")
    runtimes: list[RuntimeName] | None = Field(
        default=None, min_length=1,
        description="The training runtimes ([tool.pv] runtimes) the falsifier must pass on; each fills the "
                    "check's `runtime` parameter with its adapter. The first is the one records written "
                    "before records named a runtime count for. Order-free otherwise, like devices.")
    if_fails: NonEmpty = Field(description="What a failure means and where to look.")
    ship_blocking: bool = False
    mutants: list[MutantName] = Field(
        default_factory=list, description="Planted bugs this falsifier must kill."
    )
    tolerance: Tolerance | None = None
    counter_example_classes: list[NonEmpty] = Field(default_factory=list)
    timing_observations: list[ObservationName] | None = Field(
        default=None, min_length=1,
        description="The observations the prediction reads that are timings (tokens/s, a speed-up, MFU). "
                    "The check then runs without the line tracer, which would slow what it times, and its "
                    "record is bound to every function and the module-level code of the modules it can run "
                    "(pv.timing; a sibling planted-bug module without its bugs): any edit of one stales it. "
                    "Each name must be one the prediction reads.")

    @field_validator("devices", "mutants", "subjects", "runtimes", "timing_observations")
    @classmethod
    def _no_repeats(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        seen = [v for i, v in enumerate(value) if v in value[:i]]
        if seen:
            raise ValueError(f"listed twice: {', '.join(sorted(set(seen)))}")
        return value

    def definition_sha256(self, subject: str | None = None, subject_param: str = "subject") -> str:
        """Hash of what decides this falsifier's verdict: evidence for an older definition is STALE.

        Covered: id, check, params, prediction and the tolerance numbers. Not covered: prose
        (rule, if_fails, counter_example_classes, tolerance.source), ship_blocking, the list of
        devices (a PASS on cpu stays a PASS on cpu when cuda is added), the list of subjects
        (the same for subjects) and the declared mutants (declaring a planted bug changes
        nothing about the runtime's evidence).

        With `subject`: the hash of one subject's cell, whose check is called with the subject
        in `subject_param` ([tool.pv] subject_param) — exactly the hash of a falsifier that
        wrote `params: {<subject_param>: <subject>, ...}` by hand, so moving a subject from
        `params` to `subjects:` keeps its evidence fresh.
        """
        params = self.params if subject is None else {**self.params, subject_param: subject}
        tolerance = self.tolerance.model_dump(mode="json", exclude={"source"}) if self.tolerance else None
        decisive = {"id": self.id, "check": self.check, "params": params, "prediction": self.prediction,
                    "tolerance": tolerance}
        canonical = json.dumps(decisive, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def cells(self) -> list[tuple[str | None, str]]:
        """(subject, device) of every required cell: subjects x devices, or devices alone (subject
        None) for a falsifier without `subjects:`."""
        return [(s, d) for s in (self.subjects or [None]) for d in self.devices]

    def runtime_cells(self) -> list[tuple[str | None, str | None, str]]:
        """(runtime, subject, device) of every required cell: runtimes x subjects x devices
        (runtime None for a falsifier without `runtimes:`)."""
        return [(rt, s, d) for rt in (self.runtimes or [None]) for s, d in self.cells()]


class Contract(Strict):
    metadata: Metadata
    equations: dict[Annotated[str, StringConstraints(pattern=EQUATION_NAME_PATTERN)], Equation] = Field(
        default_factory=dict
    )
    proof_obligations: list[ProofObligation] = Field(default_factory=list)
    falsification_tests: list[FalsificationTest] = Field(min_length=1)

    def falsifier(self, falsifier_id: str) -> FalsificationTest | None:
        return next((f for f in self.falsification_tests if f.id == falsifier_id), None)


# --- JSON Schema export ----------------------------------------------------------------------


def json_schema() -> dict[str, Any]:
    schema = Contract.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://pv.dev/schema/contract.schema.json"
    schema["title"] = "pv contract"
    return schema


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


def _main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pv.schema", description=__doc__)
    parser.add_argument("--write", action="store_true", help=f"write {SCHEMA_PATH.name}")
    args = parser.parse_args(argv)
    if args.write:
        SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
        from pv.atomic import write_text

        write_text(SCHEMA_PATH, json_schema_text())
        print(f"wrote {SCHEMA_PATH}")
    else:
        print(json_schema_text(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
