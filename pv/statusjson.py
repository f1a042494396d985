"""A computed contract status as plain JSON (`pv status --format json`): split out of
pv.lifecycle, which computes the status, by concern."""

from __future__ import annotations

from typing import Any

from pv.ledger import LedgerRecord
from pv.declared import overclaim
from pv.lifecycle import ContractStatus


def to_json(status: ContractStatus, display_path: str | None = None) -> dict[str, Any]:
    """A plain, deterministic dict of a contract's computed status (for `--format json`)."""

    def record_json(record: LedgerRecord | None) -> dict[str, Any] | None:
        if record is None:
            return None
        return {
            "record_id": record.record_id, "verdict": record.verdict.value, "time_utc": record.time_utc,
            "git_commit": record.git_commit, "git_dirty": record.git_dirty, "observations": record.observations,
            "margin": record.margin, "message": record.message, "device_name": record.device_name,
            "git_commit_source": record.git_commit_source, "merged_from": record.merged_from,
            "binding": record.binding,  # "modules": timed untraced, bound to the units of the modules it can run (pv.timing)
        }

    return {
        "id": status.id,
        "path": display_path,
        "version": status.contract.metadata.version,
        "declared": status.declared.value,
        "evidence": status.evidence.value,
        "computed": status.computed.value,
        "overclaim": overclaim(status),
        "blockers": list(status.blockers),
        "falsifiers": [
            {
                "id": f.id,
                "state": f.state.value,
                "ship_blocking": f.falsifier.ship_blocking,
                "sha256": f.sha256,
                "prediction": f.falsifier.prediction,
                "strength": f.strength,
                # keyed `cpu`, or `cpu[tiny-trained]` for a subject's cell
                "devices": {d.label: {"device": d.device, "subject": d.subject, "state": d.state.value,
                                      "stale_because": list(d.stale_because), "record": record_json(d.record)}
                            for d in f.devices},
                "mutants": {
                    m.mutant: {
                        "state": m.state.value,
                        "devices": {d.label: d.state.value for d in m.devices},
                        "stale_because": m.stale_reasons(),  # cell -> why its record does not count
                    }
                    for m in f.mutants
                },
            }
            for f in status.falsifiers
        ],
    }
