"""pv.ledger_latest: the subset of the ledger a status can pick, cached across runs, gives the
same status as the whole ledger."""

from __future__ import annotations

import itertools
import random

from pv import ledger, lifecycle
from pv.ledger_latest import latest_records
from pv.schema import Contract

_clock = itertools.count(1)


def _contract() -> Contract:
    return Contract.model_validate({
        "metadata": {"id": "demo", "version": "1.0.0", "kind": "pattern", "status": "DRAFT", "description": "d"},
        "falsification_tests": [
            {"id": "FALSIFY-A-001", "rule": "r", "prediction": "x < 1", "devices": ["cpu", "cuda"],
             "if_fails": "look", "mutants": ["m_one", "m_two"]},
            {"id": "FALSIFY-B-001", "rule": "r", "prediction": "y < 1", "devices": ["cpu"],
             "if_fails": "look", "mutants": ["m_one"], "subjects": ["tiny", "big"]},
        ],
    })


def _random_record(rng: random.Random, c: Contract):
    f = rng.choice(c.falsification_tests)
    subject = rng.choice([None, *(f.subjects or [])])
    shas = [f.definition_sha256(), "1" * 64, *(f.definition_sha256(s) for s in f.subjects or [])]
    n = next(_clock)
    return ledger.make_record(
        contract=rng.choice(["demo", "demo", "other"]), contract_version="1.0.0", falsifier=f.id,
        falsifier_sha256=rng.choice(shas), device=rng.choice(["cpu", "cuda"]), subject=subject,
        mutant=rng.choice([None, None, "m_one", "m_two", "m_undeclared"]),
        verdict=rng.choice(["PASS", "FAIL", "ERROR", "SKIP"]), observations={"x": n}, prediction=f.prediction,
        margin=0.5, duration_s=0.1, time_utc=f"2026-01-01T00:{n // 60 % 60:02d}:{n % 60:02d}Z")


def _wanted(c: Contract):
    return {(c.metadata.id, f.id): (set(lifecycle.cell_hashes(f).values()), set(f.mutants))
            for f in c.falsification_tests}


def _status(c: Contract, records) -> dict:
    return lifecycle.to_json(lifecycle.contract_status(c, records))


def test_the_subset_gives_the_status_the_whole_ledger_gives_as_the_ledger_grows(tmp_path):
    c = _contract()
    path = tmp_path / "ledger.jsonl"
    rng = random.Random(7)
    for _ in range(6):  # each round appends; the cache is read and extended each time
        ledger.append(path, [_random_record(rng, c) for _ in range(60)])
        whole = ledger.read(path).records
        subset = latest_records(path, tmp_path, _wanted(c))
        assert len(subset) < len(whole)
        assert _status(c, subset) == _status(c, whole)
        assert latest_records(path, None, _wanted(c)) == subset  # with no cache: the same records


def test_an_edited_ledger_misses_the_cache_and_is_read_again(tmp_path):
    c = _contract()
    path = tmp_path / "ledger.jsonl"
    first = ledger.make_record(contract="demo", contract_version="1.0.0", falsifier="FALSIFY-A-001",
                               falsifier_sha256=c.falsification_tests[0].definition_sha256(), device="cpu",
                               verdict="PASS", observations={}, prediction="x < 1", duration_s=0.1,
                               time_utc="2026-01-01T00:00:00Z")
    ledger.append(path, [first])
    assert [r.verdict.value for r in latest_records(path, tmp_path, _wanted(c))] == ["PASS"]
    path.write_bytes(path.read_bytes().replace(b'"PASS"', b'"FAIL"'))  # same size, other bytes
    assert [r.verdict.value for r in latest_records(path, tmp_path, _wanted(c))] == ["FAIL"]


def test_malformed_and_torn_lines_are_skipped_as_read_skips_them(tmp_path):
    c = _contract()
    path = tmp_path / "ledger.jsonl"
    rng = random.Random(3)
    good = [_random_record(rng, c) for _ in range(20)]
    ledger.append(path, good[:10])
    with open(path, "ab") as handle:  # a later malformed line with a record's key must not hide it
        handle.write(b'{"contract": "demo", "falsifier": "FALSIFY-A-001"}\nnot json\n' + b"[" * 200 + b"\n")
    ledger.append(path, good[10:])
    with open(path, "ab") as handle:
        handle.write(good[0].to_line().rstrip(b"\n"))  # a whole record without its newline
    whole = ledger.read(path).records
    assert _status(c, latest_records(path, tmp_path, _wanted(c))) == _status(c, whole)
    assert _status(c, latest_records(path, tmp_path, _wanted(c))) == _status(c, whole)  # from the cache
