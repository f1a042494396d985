"""Records that name a falsifier no contract has (pv.lifecycle re-exports `orphans`).

Such a record (a FAIL included) decides nothing, so `pv status` and `pv ledger check` show it
instead of dropping it. Kept apart from pv.lifecycle, which judges the records that do belong.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from pv.ledger import LedgerRecord
from pv.schema import Contract

__all__ = ["orphans"]


def orphans(contracts: Iterable[Contract], records: Sequence[LedgerRecord],
            incomplete: bool = False) -> list[tuple[int, LedgerRecord, str]]:
    """(ledger index, record, why) for every record that names a falsifier no contract has.

    Such a record (a FAIL included) decides nothing, so it must be shown, not dropped.
    `incomplete`: some contract files did not load, so a record for an unknown *contract* may
    belong to one of them and is not called an orphan (one for a known contract still is)."""
    known: dict[str, set[str]] = {}
    for contract in contracts:
        known.setdefault(contract.metadata.id, set()).update(f.id for f in contract.falsification_tests)
    owner = {fid: cid for cid, fids in known.items() for fid in fids}
    out = []
    for index, record in enumerate(records):
        if record.falsifier in known.get(record.contract, ()):
            continue
        if record.contract in known:
            why = f"contract {record.contract} has no falsifier {record.falsifier}"
        elif incomplete:
            continue
        else:
            why = f"no contract {record.contract}"
        if record.falsifier in owner:
            why += f" ({record.falsifier} belongs to {owner[record.falsifier]})"
        out.append((index, record, why))
    return out
