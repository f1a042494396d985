"""pv.ledgerindex: the groups of a few contracts from a remembered index are the groups a full
read of the ledger gives, and any index that does not fit the ledger's bytes is a miss."""

from __future__ import annotations

import json

import pytest

from pv import cache, ledger, ledgerindex, readlog
from pv.lifecycle import group_records


def record(contract: str, i: int, **fields):
    base = dict(contract=contract, contract_version="1.0.0", falsifier=f"FALSIFY-{contract.upper()}-00{i % 2}",
                falsifier_sha256="0" * 64, device="cpu", verdict="PASS", prediction="x < 1",
                observations={"x": 0.5, "i": i}, margin=0.5, duration_s=0.1,
                time_utc=f"2026-11-22T00:00:{i % 60:02d}.000000Z", run_id=f"run-{contract}-{i}")
    base.update(fields)
    return ledger.make_record(**base)


def _ledger(path):
    a0, a1, b0 = record("a", 0), record("a", 1), record("b", 2)
    lines = [a0.to_line(), record("b", 1).to_line(), b"not json\n", a1.to_line(),
             a0.to_line(),  # a replayed copy of a's first record: no record
             b0.model_copy(update={"record_id": a1.record_id}).to_line(),  # b's line under a's id: no record either
             json.dumps({"contract": "a"}).encode() + b"\n",  # malformed
             record("c", 3).to_line(), record("a", 4).to_line()]
    path.write_bytes(b"".join(lines) + b'{"torn": ')
    return path


def _plain(groups, contracts):
    return {k: [(i, r.model_dump()) for i, r in v] for k, v in groups.items() if k[0] in contracts}


def _full(path, contracts):
    return _plain(group_records(ledger.read(path).records), contracts)


@pytest.fixture
def no_full_read(monkeypatch):
    """Fails the test if the whole ledger is parsed."""
    def refuse(data):
        raise AssertionError("the whole ledger was parsed")

    monkeypatch.setattr(ledger, "parse", refuse)


@pytest.fixture(autouse=True)
def fresh_memo(monkeypatch):
    monkeypatch.setattr(readlog, "_DIGEST_MEMO", {})
    monkeypatch.delenv("PV_NO_CACHE", raising=False)


def test_a_remembered_index_gives_the_groups_of_a_full_read(tmp_path, monkeypatch):
    path = _ledger(tmp_path / "ledger.jsonl")
    first = ledgerindex.groups(tmp_path, path, ["a"])  # a miss: the whole ledger read, the index written
    assert (tmp_path / ledgerindex.INDEX_FILE).exists()
    expected = {c: _full(path, {c}) for c in ("a", "b", "c", "z")}
    assert _plain(first, {"a"}) == expected["a"] and expected["a"] and expected["b"]
    monkeypatch.setattr(ledger, "parse", lambda data: pytest.fail("the whole ledger was parsed"))
    for contracts in (["a"], ["b"], ["c", "a"], ["z"]):
        readlog._DIGEST_MEMO.clear()  # once read whole and hashed here, once with the run's hash (pread)
        assert _plain(ledgerindex.groups(tmp_path, path, contracts), set(contracts)) == \
            {k: v for c in contracts for k, v in expected[c].items()}
        assert _plain(ledgerindex.groups(tmp_path, path, contracts), set(contracts)) == \
            {k: v for c in contracts for k, v in expected[c].items()}


def test_an_appended_record_is_seen(tmp_path):
    path = _ledger(tmp_path / "ledger.jsonl")
    ledgerindex.groups(tmp_path, path, ["a"])
    ledger.append(path, [record("a", 9)])  # after the torn line: on a line of its own
    groups = ledgerindex.groups(tmp_path, path, ["a"])
    assert _plain(groups, {"a"}) == _full(path, {"a"})
    assert any(r.observations["i"] == 9 for v in groups.values() for _, r in v)
    readlog._DIGEST_MEMO.clear()
    assert _plain(ledgerindex.groups(tmp_path, path, ["a"]), {"a"}) == _full(path, {"a"})


def _resign(tmp_path, change):
    index_file = tmp_path / ledgerindex.INDEX_FILE
    data = json.loads(cache.verified(index_file.read_bytes()))
    change(data)
    index_file.write_bytes(cache.sign(json.dumps(data).encode()))


@pytest.mark.parametrize("damage", ["garbage", "unsigned", "truncated", "other-contract", "shifted", "bad-span",
                                    "not-a-list", "other-version"])
def test_an_index_that_does_not_fit_is_a_miss_never_an_answer(tmp_path, damage):
    path = _ledger(tmp_path / "ledger.jsonl")
    ledgerindex.groups(tmp_path, path, ["a"])
    index_file = tmp_path / ledgerindex.INDEX_FILE
    if damage == "garbage":
        index_file.write_bytes(b"\x00garbage")
    elif damage == "unsigned":
        body = cache.verified(index_file.read_bytes())
        index_file.write_bytes(cache.SIGNATURE_PREFIX + b"0" * 64 + b"\n" + body)
    elif damage == "truncated":
        index_file.write_bytes(index_file.read_bytes()[:-20])
    elif damage == "other-contract":  # a's entry names b's lines
        _resign(tmp_path, lambda d: d["contracts"].__setitem__("a", d["contracts"]["b"]))
    elif damage == "shifted":
        _resign(tmp_path, lambda d: [s.__setitem__(1, s[1] + 1) for s in d["contracts"]["a"]])
    elif damage == "bad-span":
        _resign(tmp_path, lambda d: d["contracts"]["a"].append([0, 10**9, 10**9 + 5]))
    elif damage == "not-a-list":
        _resign(tmp_path, lambda d: d["contracts"].__setitem__("a", {"x": 1}))
    else:
        _resign(tmp_path, lambda d: d.__setitem__("version", "another pv"))
    for _ in range(2):
        assert _plain(ledgerindex.groups(tmp_path, path, ["a"]), {"a"}) == _full(path, {"a"})
        readlog._DIGEST_MEMO.clear()


def test_a_dropped_record_in_a_forged_index_is_never_believed_unsigned(tmp_path):
    """An index names the lines; only a signed one is read (a shipped .pv-cache proves nothing)."""
    path = _ledger(tmp_path / "ledger.jsonl")
    ledgerindex.groups(tmp_path, path, ["a"])
    index_file = tmp_path / ledgerindex.INDEX_FILE
    data = json.loads(cache.verified(index_file.read_bytes()))
    data["contracts"]["a"] = data["contracts"]["a"][:1]
    index_file.write_bytes(cache.SIGNATURE_PREFIX + b"1" * 64 + b"\n" + json.dumps(data).encode())
    assert _plain(ledgerindex.groups(tmp_path, path, ["a"]), {"a"}) == _full(path, {"a"})


def test_pv_no_cache_reads_the_whole_ledger_and_writes_nothing(tmp_path, monkeypatch):
    path = _ledger(tmp_path / "ledger.jsonl")
    monkeypatch.setenv("PV_NO_CACHE", "1")
    assert _plain(ledgerindex.groups(tmp_path, path, ["a"]), {"a", "b", "c"}) == _full(path, {"a", "b", "c"})
    assert not (tmp_path / ".pv-cache").exists()


def test_no_ledger_no_groups(tmp_path):
    assert ledgerindex.groups(tmp_path, tmp_path / "absent.jsonl", ["a"]) == {}
