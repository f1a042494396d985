"""The outcome of one falsifier test: one type from the check to the ledger record.

    harness.falsify()  creates it (what the check observed, the verdict, the code it ran)
    pv.plugin          carries it on the pytest item (`item.stash[OUTCOME]`), adds the test's
                       identity from its marker, and turns it into the ledger record here
                       (`to_record`), once
    pv run             receives it as one JSON line per finished test (`to_json`/`from_json`)

Nothing else builds a ledger record from a test, and nothing else carries its fields.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from pv.ledger import LedgerRecord, make_record


@dataclass
class Outcome:
    """What one falsifier test showed. Mutable while the test runs; recorded once."""

    falsifier: str | None
    device: str
    prediction: str
    verdict: str = "ERROR"  # PASS | FAIL | ERROR | SKIP; ERROR until something better is known
    observations: dict[str, Any] = field(default_factory=dict)
    margin: float | None = None
    message: str = ""
    duration_s: float = 0.0
    device_name: str | None = None
    seed: int | None = None
    mutant: str | None = None
    subject: str | None = None  # the model and data it drove (None: a falsifier without subjects)
    runtime: str | None = None  # the runtime it drove ([tool.pv] runtimes; None: no runtime dimension)
    runtime_version: str | None = None  # what the adapter says it drives, e.g. "transformers 4.57.1"
    runtime_binding: str | None = None  # its adapter's `module:factory` in [tool.pv] runtimes when it ran
    subject_digest: str | None = None  # an ad-hoc (path) subject's checkpoint digest (pv.subjects)
    code_digests: dict[str, str] | None = None  # module -> syntax-tree digest (pv.codebind)
    executed_code: dict[str, dict[str, str]] | None = None  # module -> unit -> digest (pv.execution)
    code_origins: dict[str, str] | None = None
    binding_problems: list[str] | None = None
    binding: str | None = None  # "modules": a timing check, untraced, bound to the units of the modules it can run (pv.timing)
    # The test's identity, from its `pv_falsifier` marker (the plugin fills these in).
    contract: str | None = None
    contract_version: str | None = None
    falsifier_sha256: str | None = None
    nodeid: str | None = None
    # What ran (pv.identity): the test's node, digest and its module's test templates (the plugin),
    # and what the harness judged.
    test_node: str | None = None
    test_sha256: str | None = None
    test_templates: list[str] | None = None
    judged_params: dict[str, Any] | None = None
    judged_tolerance: dict[str, Any] | None = None
    tolerance_table: dict[str, dict[str, float]] | None = None  # the whole table the check received
    session_code: dict[str, str] | None = None  # the workspace's other code loaded (pv.sessionbind; the plugin)
    planted_at: list[str] | None = None  # where the run's planted bug changed the bound packages (pv.mutation)
    # Set once the record is written.
    record_id: str | None = None
    ledger: str | None = None
    repeat: int | None = None  # which repetition of `pv run --repeat` (pv run sets it)

    def identify(self, marker: Mapping[str, Any], nodeid: str) -> None:
        """Take the identity the generated test declares in its marker."""
        self.contract = marker.get("contract")
        self.contract_version = marker.get("contract_version")
        self.subject = marker.get("subject", self.subject)
        self.runtime = marker.get("runtime") or self.runtime
        # a subject cell has its own definition hash; an ad-hoc subject's is the plain one
        self.falsifier_sha256 = (marker.get("subject_sha256") or {}).get(self.subject) or marker.get("sha256")
        self.falsifier = self.falsifier or marker.get("falsifier")
        self.device = marker.get("device") or self.device
        self.prediction = self.prediction or marker.get("prediction") or ""
        self.nodeid = nodeid

    def to_record(self, **provenance: Any) -> LedgerRecord:
        """The ledger record of this outcome; `provenance`: run_id, git_*, versions, host, time_utc."""
        return make_record(
            contract=self.contract or "?",
            contract_version=self.contract_version or "?",
            falsifier=self.falsifier or "?",
            falsifier_sha256=self.falsifier_sha256 or "?",
            device=self.device or "?",
            device_name=self.device_name,
            mutant=self.mutant,
            subject=self.subject,
            subject_digest=self.subject_digest,
            runtime=self.runtime,
            runtime_version=self.runtime_version,
            runtime_binding=self.runtime_binding,
            verdict=self.verdict,
            observations=dict(self.observations),
            prediction=self.prediction or "",
            margin=self.margin,
            message=self.message,
            duration_s=round(float(self.duration_s), 6),
            seed=self.seed,
            code_digests=self.code_digests,
            executed_code=self.executed_code,
            code_origins=self.code_origins,
            binding_problems=self.binding_problems,
            binding=self.binding,
            test_node=self.test_node,
            test_sha256=self.test_sha256,
            test_templates=self.test_templates,
            judged_params=self.judged_params,
            judged_tolerance=self.judged_tolerance,
            tolerance_table=self.tolerance_table,
            session_code=self.session_code,
            planted_at=self.planted_at,
            **provenance,
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Outcome":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
