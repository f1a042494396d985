"""The JSON form of a computed status (pv.statusjson)."""

from __future__ import annotations

from pv.lifecycle import contract_status
from lifecycle_records import contract, rec


def test_the_json_status_carries_each_cells_deciding_record():
    from pv.statusjson import to_json

    c = contract()
    payload = to_json(contract_status(c, [rec(c, "PASS")]))
    cell = payload["falsifiers"][0]["devices"]["cpu"]
    assert cell["state"] == "PASS" and cell["record"]["verdict"] == "PASS" and "record_id" in cell["record"]
    empty = to_json(contract_status(c, []))["falsifiers"][0]["devices"]["cpu"]
    assert empty["record"] is None
