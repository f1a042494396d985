"""The release gate (`pv status --require-fresh`): every ship-blocking falsifier DISCHARGED.

A ship-blocking falsifier holds a release back unless the latest counted evidence on every
required cell is a fresh PASS: FALSIFIED, ERROR, STALE, PENDING, SKIP and PARTIAL all block.
Contracts set RETIRED or SUPERSEDED by hand are not released and do not count.
"""

from __future__ import annotations

from typing import Iterable

from pv.lifecycle import ContractStatus, DeviceState, FalsifierState


def ship_blockers(statuses: Iterable[ContractStatus]) -> list[str]:
    """One line per ship-blocking falsifier x cell that is not a fresh PASS, e.g.
    `FALSIFY-X-001 on cuda: STALE (code changed since: runtime.kernels)`."""
    lines = []
    for status in statuses:
        if status.hand_set:
            continue
        for f in status.falsifiers:
            if not f.falsifier.ship_blocking or f.state is FalsifierState.DISCHARGED:
                continue
            for d in f.devices:
                if d.state is DeviceState.PASS:
                    continue
                why = d.stale_reason() if d.state is DeviceState.STALE else (
                    (d.record.message.strip().splitlines() or [""])[0][:160] if d.record is not None else "no evidence")
                lines.append(f"{f.id} on {d.label}: {d.state.value}" + (f" ({why})" if why else ""))
    return lines
