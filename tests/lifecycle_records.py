"""Hand-made contracts and records for the lifecycle tests (tests/test_lifecycle*.py): pv.lifecycle
is pure, so its tests build the evidence it judges."""

from __future__ import annotations

import itertools
from pathlib import Path

from pv.ledger import make_record
from pv.schema import Contract

_clock = itertools.count(1)


def contract(status: str = "DRAFT", falsifiers: list[dict] | None = None, cid: str = "demo") -> Contract:
    if falsifiers is None:
        falsifiers = [falsifier()]
    return Contract.model_validate({
        "metadata": {"id": cid, "version": "1.0.0", "kind": "pattern", "status": status,
                     "description": "demo"},
        "falsification_tests": falsifiers,
    })


def falsifier(fid: str = "FALSIFY-DEMO-001", devices=("cpu",), mutants=("m_one",), prediction="x < 1") -> dict:
    return {"id": fid, "rule": "r", "prediction": prediction, "devices": list(devices),
            "if_fails": "look", "mutants": list(mutants)}


def rec(c: Contract, verdict: str, device: str = "cpu", fid: str | None = None, mutant: str | None = None,
        sha: str | None = None, time: str | None = None, cid: str | None = None):
    f = c.falsifier(fid) if fid else c.falsification_tests[0]
    if time is None:  # strictly increasing: later calls are later evidence
        n = next(_clock)
        time = f"2026-01-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z"
    return make_record(
        contract=cid or c.metadata.id, contract_version=c.metadata.version, falsifier=f.id,
        falsifier_sha256=sha or f.definition_sha256(), device=device, mutant=mutant, verdict=verdict,
        observations={"x": 0.5}, prediction=f.prediction, margin=0.5, duration_s=0.1, time_utc=time,
    )


def checked(**kw) -> dict:
    """A falsifier bound to a check: its records are evidence about code."""
    return {**falsifier(**kw), "check": "checks.m:f"}


def bound(record, **digests):
    return record.model_copy(update={"code_digests": digests})


def subject_rec(c: Contract, verdict: str, subject: str | None, device: str = "cpu", mutant: str | None = None,
                digest: str | None = None, param: str = "checkpoint"):
    f = c.falsification_tests[0]
    sha = f.definition_sha256(subject, param) if subject and not subject.startswith("path:") else None
    return rec(c, verdict, device, mutant=mutant, sha=sha).model_copy(
        update={"subject": subject, "subject_digest": digest})


class FakeTree:
    """Stands in for pv.codebind.TreeDigests: the tree's current digest per module."""

    def __init__(self, **digests: str):
        self.digests = digests

    def changes(self, recorded):
        from pv.codebind import TreeDigests

        tree = TreeDigests(Path("/nonexistent"))
        tree._cache.update(self.digests)  # noqa: SLF001 - the same comparison, other digests
        return tree.changes(recorded)

    def record_changes(self, record):
        return self.changes(record.code_digests)


class PlantedIn:
    """The `code` pv.lifecycle is given, judging only where each bug is planted (pv.identity's
    EvidenceCheck reads it from the mutants module); the records' code always the tree's."""

    def __init__(self, planted: dict[str, tuple[str, ...]]):
        self.planted = planted

    def mutant_meets(self, mutant: str, runtime: str | None) -> bool:
        return (runtime or "pvlab") in self.planted.get(mutant, ("pvlab",))

    def record_changes(self, record) -> tuple[str, ...]:
        return ()
