"""The evidence ledger: concurrent appends, torn lines, and `pv ledger check|show|merge`."""

from __future__ import annotations

import json
import multiprocessing

import pytest
from click.testing import CliRunner

from pv import ledger
from pv.cli import main
from pv.loader import load_contract
from pv_workspace import falsifier, make_workspace


def record(i: int = 0, **fields):
    base = dict(contract="demo", contract_version="1.0.0", falsifier="FALSIFY-DEMO-001", falsifier_sha256="0" * 64,
                device="cpu", verdict="PASS", prediction="x < 1", observations={"x": 0.5, "i": i}, margin=0.5,
                duration_s=0.1, time_utc=f"2026-11-22T00:00:{i % 60:02d}.000000Z")
    base.update(fields)
    return ledger.make_record(**base)


def _writer(args):
    path, worker, count = args
    for i in range(count):
        # single-record appends maximise interleaving opportunities; a fat payload makes torn
        # writes likely if the lock or the single write were missing
        ledger.append(path, [record(i, run_id=f"w{worker}", message="x" * 3000)])
    return count


def test_concurrent_writers_lose_and_interleave_nothing(tmp_path):
    path = tmp_path / "ledger.jsonl"
    workers, per_worker = 4, 150
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers) as pool:
        assert sum(pool.map(_writer, [(str(path), w, per_worker) for w in range(workers)])) == workers * per_worker
    contents = ledger.read(path)
    assert contents.problems == []
    assert len(contents.records) == workers * per_worker
    assert len({r.record_id for r in contents.records}) == workers * per_worker
    for w in range(workers):  # each writer's records are all there, in its own order
        mine = [r.observations["i"] for r in contents.records if r.run_id == f"w{w}"]
        assert mine == list(range(per_worker))
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_torn_last_line_is_reported_and_an_append_does_not_corrupt_it(tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, [record(1), record(2)])
    before = path.read_bytes()
    with open(path, "ab") as handle:
        handle.write(record(3).to_line()[:57])  # a writer died mid-record
    contents = ledger.read(path)
    assert len(contents.records) == 2
    assert [(p.line, p.message) for p in contents.problems] == [(3, "torn last line (a writer crashed mid-record)")]

    assert ledger.append(path, [record(4), record(5)]) == 2
    assert path.read_bytes().startswith(before)  # earlier records byte-for-byte intact
    contents = ledger.read(path)
    assert [r.observations["i"] for r in contents.records] == [1, 2, 4, 5]
    assert [p.line for p in contents.problems] == [3]  # still reported, now as a corrupt middle line
    assert "corrupt line" in contents.problems[0].message


def test_malformed_record_is_reported_with_its_line(tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, [record(1)])
    with open(path, "ab") as handle:
        handle.write(b'{"verdict": "MAYBE"}\n')
    ledger.append(path, [record(2)])
    contents = ledger.read(path)
    assert len(contents.records) == 2 and contents.problems[0].line == 2
    assert contents.problems[0].message.startswith("malformed record")


def test_non_finite_values_survive_as_text(tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, [record(1, observations={"loss": float("nan"), "g": float("inf")}, margin=float("-inf"))])
    r = ledger.read(path).records[0]
    assert r.observations == {"loss": "nan", "g": "inf"} and r.margin is None


# --- pv ledger ... ---------------------------------------------------------------------------


@pytest.fixture
def ws(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path)
    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001"), falsifier("FALSIFY-DEMO-002")])
    monkeypatch.chdir(ws.root)
    loaded, _ = load_contract(ws.contracts / "demo-v1.yaml")
    ws.sha = {f.id: f.definition_sha256() for f in loaded.contract.falsification_tests}
    return ws


def pv(*args):
    return CliRunner().invoke(main, ["ledger", *args], catch_exceptions=False)


def test_check_reports_torn_lines_with_line_numbers(ws):
    assert pv("check").exit_code == 0  # no ledger yet is fine
    ledger.append(ws.ledger, [record(1), record(2)])
    result = pv("check")
    assert result.exit_code == 0 and "ok, 2 record(s)" in result.output
    with open(ws.ledger, "ab") as handle:
        handle.write(b'{"schema_version": 1, "rec')
    result = pv("check")
    assert result.exit_code == 1
    assert "evidence/ledger.jsonl:3: torn last line" in result.output


def test_check_reports_duplicate_record_ids(ws):
    r = record(1)
    ledger.append(ws.ledger, [r, record(2), r])
    result = pv("check")
    assert result.exit_code == 1
    assert f"evidence/ledger.jsonl:3: duplicate record_id {r.record_id} (first at line 1)" in result.output


def test_show_filters_and_limits(ws):
    ledger.append(ws.ledger, [record(i, falsifier="FALSIFY-DEMO-001" if i % 2 else "FALSIFY-DEMO-002",
                                     verdict="FAIL" if i == 3 else "PASS", git_commit="abcdef1234567",
                                     git_dirty=True) for i in range(1, 8)])
    result = pv("show", "--falsifier", "FALSIFY-DEMO-001", "--last", "2")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].split() == ["TIME", "(UTC)", "FALSIFIER", "DEVICE", "MUTANT", "VERDICT", "MARGIN", "COMMIT", "RUN"]
    assert len(lines) == 4 and "2 of 4 matching record(s); --last 0 shows all" in lines[-1]
    assert "abcdef123*" in lines[1]
    result = pv("show", "--json", "--last", "0")
    assert len(result.output.splitlines()) == 7
    result = pv("show", "--falsifier", "FALSIFY-DEMO-01")
    assert "no records for falsifier 'FALSIFY-DEMO-01'; did you mean" in result.output


def test_merge_is_idempotent_and_append_only(ws, tmp_path):
    mine = [record(1, falsifier_sha256=ws.sha["FALSIFY-DEMO-001"])]
    ledger.append(ws.ledger, mine)
    before = ws.ledger.read_bytes()
    gpu = tmp_path / "gpu.jsonl"
    theirs = [record(i, device="cuda", falsifier_sha256=ws.sha["FALSIFY-DEMO-001"]) for i in range(3)]
    ledger.append(gpu, theirs + mine)  # the GPU file also holds a record we already have

    result = pv("merge", str(gpu))
    assert result.exit_code == 0, result.output
    assert "merged 3 new record(s) into evidence/ledger.jsonl; 1 already present" in result.output
    after = ws.ledger.read_bytes()
    assert after.startswith(before)
    result = pv("merge", str(gpu), str(gpu))
    assert result.exit_code == 0 and "merged 0 new record(s)" in result.output
    assert ws.ledger.read_bytes() == after
    assert [r.record_id for r in ledger.read(ws.ledger).records] == [r.record_id for r in mine + theirs]


def test_merge_refuses_stale_records_unless_allowed(ws, tmp_path):
    gpu = tmp_path / "gpu.jsonl"
    fresh = record(1, falsifier_sha256=ws.sha["FALSIFY-DEMO-001"])
    old = record(2, falsifier_sha256="f" * 64)
    gone = record(3, falsifier="FALSIFY-GONE-001", falsifier_sha256="e" * 64)
    ledger.append(gpu, [fresh, old, gone])
    result = pv("merge", str(gpu))
    assert result.exit_code == 1
    assert "FALSIFY-DEMO-001 cpu PASS" in result.output and "definition changed since" in result.output
    assert "FALSIFY-GONE-001" in result.output and "no such falsifier now" in result.output
    assert "refusing to merge: 2 record(s)" in result.output
    assert not ws.ledger.exists()  # all or nothing
    result = pv("merge", str(gpu), "--allow-stale")
    assert result.exit_code == 0 and "merged 3 new record(s)" in result.output and "2 of them stale" in result.output


def test_merge_refuses_a_torn_input(ws, tmp_path):
    gpu = tmp_path / "gpu.jsonl"
    ledger.append(gpu, [record(1, falsifier_sha256=ws.sha["FALSIFY-DEMO-001"])])
    with open(gpu, "ab") as handle:
        handle.write(b'{"half')
    result = pv("merge", str(gpu))
    assert result.exit_code == 1 and "gpu.jsonl:2: torn last line" in result.output
    assert not ws.ledger.exists()


def test_merge_into_a_torn_ledger_keeps_the_fragment_isolated(ws, tmp_path):
    ledger.append(ws.ledger, [record(1, falsifier_sha256=ws.sha["FALSIFY-DEMO-001"])])
    with open(ws.ledger, "ab") as handle:
        handle.write(b'{"torn')
    before = ws.ledger.read_bytes()
    gpu = tmp_path / "gpu.jsonl"
    ledger.append(gpu, [record(2, device="cuda", falsifier_sha256=ws.sha["FALSIFY-DEMO-002"],
                               falsifier="FALSIFY-DEMO-002")])
    result = pv("merge", str(gpu))
    assert result.exit_code == 0 and "bad line(s)" in result.output
    assert ws.ledger.read_bytes().startswith(before)
    contents = ledger.read(ws.ledger)
    assert len(contents.records) == 2 and [p.line for p in contents.problems] == [2]
