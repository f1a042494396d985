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


def test_a_named_ledger_that_does_not_exist_is_a_usage_error(ws):
    """`pv ledger check typo.jsonl` must not say "no ledger yet" and exit 0 (the default ledger
    of a new project may be missing; a file the user names may not)."""
    for verb in ("check", "show"):
        result = CliRunner().invoke(main, ["ledger", verb, "typo.jsonl"])
        assert result.exit_code == 2 and "typo.jsonl: no such ledger file" in result.output
    assert pv("check").exit_code == 0  # the project's own, not written yet: fine


def test_merge_refuses_an_input_that_is_not_a_regular_file(ws):
    import os

    import threading

    fifo = os.path.abspath("incoming.jsonl")  # absolute: later tests chdir elsewhere
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    done = threading.Event()

    # a writer that only ever comes if pv opens the FIFO, so that a regression ends (merging
    # nothing, exit 0) instead of hanging the suite
    def writer() -> None:
        while not done.is_set():  # each read pv makes gets an empty file
            open(fifo, "wb").close()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        result = CliRunner().invoke(main, ["ledger", "merge", "incoming.jsonl"])
    finally:
        # Stop the writer: it must not outlive the test (it once kept creating incoming.jsonl in
        # whatever directory a later test of the same worker had made current).
        done.set()
        release = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets a writer blocked in open() return
        thread.join(timeout=10)
        os.close(release)
    assert not thread.is_alive()
    assert result.exit_code == 2 and "incoming.jsonl is not a regular file" in result.output


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
    assert "evidence/ledger.jsonl:3: replayed record: repeats the record of line 1" in result.output
    assert "duplicate record_id" not in result.output  # one problem per line, said once


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


# --- attacks (issue 18): order, time, orphans, garbage ---------------------------------------


NESTED = b"[" * 994 + b"]" * 994 + b"\n"  # deeper than Python's recursive JSON decoder goes


def test_a_line_of_994_nested_brackets_is_garbage_and_the_rest_is_read(tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, [record(1)])
    with open(path, "ab") as handle:
        handle.write(NESTED)
        handle.write(b'{"observations": ' + b'{"a": ' * 40 + b"1" + b"}" * 40 + b"}\n")  # deep, but valid JSON
    ledger.append(path, [record(2)])
    contents = ledger.read(path)
    assert [r.observations["i"] for r in contents.records] == [1, 2]
    assert [p.line for p in contents.problems] == [2, 3]
    assert all(p.message.startswith("garbage line (nested more than") for p in contents.problems)
    assert contents.lines == [1, 4]


def test_check_show_and_status_report_the_nested_line_without_a_traceback(ws):
    ledger.append(ws.ledger, [record(1, falsifier_sha256=ws.sha["FALSIFY-DEMO-001"])])
    with open(ws.ledger, "ab") as handle:
        handle.write(NESTED)
    runner = CliRunner()
    check = runner.invoke(main, ["ledger", "check"])
    assert check.exit_code == 1 and isinstance(check.exception, SystemExit)  # exit 1, not a crash
    assert "evidence/ledger.jsonl:2: garbage line (nested more than 16 levels deep" in check.output
    show = runner.invoke(main, ["ledger", "show"])
    assert show.exit_code == 0 and "Traceback" not in show.output and "1 record(s)" in show.output
    assert "1 bad line(s) in the ledger" in show.output
    status = runner.invoke(main, ["status", "--stdout"])
    assert status.exit_code == 0, status.output
    assert "> - line 2: garbage line (nested more than 16 levels deep" in status.output


def test_a_malformed_time_is_a_malformed_record_never_1970(tmp_path):
    path = tmp_path / "ledger.jsonl"
    line = json.loads(record(1).to_line())
    for bad in ("yesterday", "0", "2026-11-22", "2026-11-22T03:01:02", "2026-13-40T00:00:00Z"):
        with open(path, "ab") as handle:
            handle.write(json.dumps({**line, "time_utc": bad}).encode() + b"\n")
    contents = ledger.read(path)
    assert contents.records == [] and len(contents.problems) == 5
    assert all("time_utc" in p.message for p in contents.problems)
    with pytest.raises(ValueError, match="not ISO 8601 UTC"):
        record(1, time_utc="yesterday")


@pytest.mark.parametrize("text", ["yesterday", "0", "2026-11-22", "2026-13-40T00:00:00Z", "2026-02-30T00:00:00Z",
                                  "2026-11-22T24:00:00Z", "2026-11-22T03:01:60.5Z", "2026-11-22T03:01:02.123456Z",
                                  "2024-02-29T23:59:59Z"])
def test_a_record_refuses_exactly_the_times_parse_time_refuses_and_says_the_same(text):
    """The record's validator checks without attaching the zone (pv.ledger._naive_time): the same
    texts accepted, the same message where refused."""
    try:
        parse_time_says = str(ledger.parse_time(text))
    except ValueError as exc:
        parse_time_says = f"refused: {exc}"
    try:
        record(1, time_utc=text)
        validator_says = "accepted"
    except ValueError as exc:
        validator_says = f"refused: {exc.errors()[0]['ctx']['error']}"
    assert validator_says == ("accepted" if not parse_time_says.startswith("refused") else parse_time_says)


def test_merge_refuses_a_record_from_the_future(ws, tmp_path):
    gpu = tmp_path / "gpu.jsonl"
    ledger.append(gpu, [record(1, falsifier_sha256=ws.sha["FALSIFY-DEMO-001"]),
                        record(2, falsifier_sha256=ws.sha["FALSIFY-DEMO-001"], time_utc="2099-01-01T00:00:00Z")])
    result = pv("merge", str(gpu))
    assert result.exit_code == 1
    assert "gpu.jsonl:2: record" in result.output and "is dated 2099-01-01T00:00:00Z, in the future" in result.output
    assert "refusing to merge" in result.output and not ws.ledger.exists()


def test_merge_refuses_a_malformed_time(ws, tmp_path):
    gpu = tmp_path / "gpu.jsonl"
    line = json.loads(record(1, falsifier_sha256=ws.sha["FALSIFY-DEMO-001"]).to_line())
    gpu.write_text(json.dumps({**line, "time_utc": "yesterday"}) + "\n")
    result = pv("merge", str(gpu))
    assert result.exit_code == 1 and "gpu.jsonl:1: malformed record: time_utc" in result.output
    assert not ws.ledger.exists()


def test_merged_records_stay_identifiable_and_come_after_what_is_here(ws, tmp_path):
    here = record(1, falsifier_sha256=ws.sha["FALSIFY-DEMO-001"], verdict="FAIL", time_utc="2026-11-22T10:00:00Z")
    ledger.append(ws.ledger, [here])
    gpu = tmp_path / "gpu.jsonl"
    ledger.append(gpu, [record(2, falsifier_sha256=ws.sha["FALSIFY-DEMO-001"], time_utc="2026-11-22T09:00:00Z")])
    result = pv("merge", str(gpu))
    assert result.exit_code == 0, result.output
    assert "dated before the latest record here" in result.output  # the order decides: said aloud
    records = ledger.read(ws.ledger).records
    assert records[0].merged_from is None
    origin = records[1].merged_from
    assert origin["file"] == "gpu.jsonl" and len(origin["file_sha256"]) == 64
    ledger.parse_time(origin["merged_utc"])


def test_check_lists_orphan_records_a_fail_included(ws):
    ledger.append(ws.ledger, [
        record(1, falsifier_sha256=ws.sha["FALSIFY-DEMO-001"]),
        record(2, falsifier="FALSIFY-GHOST-001", verdict="FAIL"),
        record(3, contract="nobody", verdict="PASS"),
    ])
    result = pv("check")
    assert result.exit_code == 1
    assert ("evidence/ledger.jsonl:2: orphan record: contract demo has no falsifier FALSIFY-GHOST-001 "
            "(FAIL on cpu)") in result.output
    assert ("evidence/ledger.jsonl:3: orphan record: no contract nobody (FALSIFY-DEMO-001 belongs to demo) "
            "(PASS on cpu)") in result.output
    status = CliRunner().invoke(main, ["status", "--stdout"])
    assert "2 ledger record(s) name a falsifier that no contract has, 1 of them FAIL or ERROR" in status.output
    assert "> - line 2: `FALSIFY-GHOST-001` FAIL on cpu: contract demo has no falsifier FALSIFY-GHOST-001" in status.output


def test_check_flags_a_record_dated_in_the_future(ws):
    ledger.append(ws.ledger, [record(1, falsifier_sha256=ws.sha["FALSIFY-DEMO-001"], time_utc="2099-01-01T00:00:00Z")])
    result = pv("check")
    assert result.exit_code == 1 and "is dated 2099-01-01T00:00:00Z, in the future" in result.output


def test_a_version_2_record_without_a_subject_still_reads(tmp_path):
    """Records from before subjects (ledger schema 2) read with subject null."""
    record = ledger.make_record(contract="c", contract_version="1.0.0", falsifier="FALSIFY-X-001",
                                falsifier_sha256="0" * 64, device="cpu", verdict="PASS", prediction="x < 1",
                                duration_s=0.1, time_utc="2026-11-22T03:01:02Z")
    data = json.loads(record.to_line())
    assert data["subject"] is None and data["runtime"] is None and data["schema_version"] == ledger.LEDGER_SCHEMA_VERSION == 10
    old = {k: v for k, v in data.items() if k not in ("subject", "subject_digest", "runtime", "runtime_version")}
    old["schema_version"] = 2
    path = tmp_path / "l.jsonl"
    path.write_text(json.dumps(old) + "\n" + json.dumps({**data, "subject": "path:/c", "subject_digest": "ab",
                                                           "record_id": "1" * 32}) + "\n")
    contents = ledger.read(path)
    assert not contents.problems and [r.subject for r in contents.records] == [None, "path:/c"]


@pytest.mark.parametrize("version", [99, 0, -5])
def test_a_record_of_an_unknown_schema_version_is_a_bad_line_not_evidence(tmp_path, version):
    """A PASS a newer pv (or a hand edit) wrote in a format this pv does not know must not
    count: it is reported, with the version, and left out of the records."""
    record = ledger.make_record(contract="c", contract_version="1.0.0", falsifier="FALSIFY-X-001",
                                falsifier_sha256="0" * 64, device="cpu", verdict="PASS", prediction="x < 1",
                                duration_s=0.1, time_utc="2026-11-22T03:01:02Z")
    path = tmp_path / "l.jsonl"
    path.write_text(json.dumps({**json.loads(record.to_line()), "schema_version": version}) + "\n")
    contents = ledger.read(path)
    assert contents.records == []
    assert [p.line for p in contents.problems] == [1]
    assert f"ledger schema version {version} is not one this pv reads" in contents.problems[0].message


def test_a_line_json_cannot_read_is_reported_without_an_empty_location(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text('{"margin": 1' + "0" * 5000 + "}\n")  # over Python's 4,300-digit limit
    (problem,) = ledger.read(path).problems
    assert problem.message.startswith("malformed record: Exceeds the limit")


def test_a_record_is_one_line_of_json_with_sorted_keys():
    line = record(0).to_line()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    keys = list(json.loads(line))
    assert keys == sorted(keys)  # the same record is the same bytes, whichever pv wrote it


def test_a_wide_record_and_brackets_in_text_are_not_garbage(tmp_path):
    """The nesting scanner counts depth, not brackets: a record with many shallow lists, and
    text full of brackets and escaped quotes, reads back whole."""
    path = tmp_path / "l.jsonl"
    wide = record(1, observations={f"o{i}": [[i], {"k": [i]}] for i in range(20)},
                  message='[[[[{{{{ "\\" ' * 10)
    ledger.append(path, [wide])
    assert ledger.MAX_DEPTH < wide.to_line().count(b"[") + wide.to_line().count(b"{")
    contents = ledger.read(path)
    assert not contents.problems and contents.records == [wide]


def test_whatever_pv_writes_reads_back_however_deep_the_observation(tmp_path):
    """A check may return nested observations; the record keeps what is deeper than a record
    may nest as text, so the reader never drops it as garbage."""
    deep: object = 1.5
    for _ in range(40):
        deep = [deep]
    path = tmp_path / "l.jsonl"
    written = record(1, observations={"deep": deep, "x": 0.5}, judged_params={"p": deep})
    ledger.append(path, [written])
    contents = ledger.read(path)
    assert not contents.problems and len(contents.records) == 1
    assert contents.records[0].observations["x"] == 0.5
    assert isinstance(contents.records[0].observations["deep"], list)
    assert "[[1.5]]" in json.dumps(contents.records[0].observations["deep"])


def test_a_line_nested_past_the_limit_is_garbage(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text('{"a": ' + "[" * (ledger.MAX_DEPTH + 1) + "]" * (ledger.MAX_DEPTH + 1) + "}\n")
    assert [p.message.split(" (")[0] for p in ledger.read(path).problems] == ["garbage line"]


def test_only_an_unterminated_last_line_is_torn_a_bad_line_before_it_is_corrupt(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_bytes(record(1).to_line() + b"{not json\n" + record(2).to_line()[:40])
    assert [(p.line, p.message) for p in ledger.read(path).problems] == [
        (2, "corrupt line (not JSON)"), (3, "torn last line (a writer crashed mid-record)")]


def test_append_leaves_no_descriptor_of_the_ledger_open(tmp_path, monkeypatch):
    opened = []
    real_open = ledger.os.open

    def recording_open(*args, **kwargs):
        opened.append(real_open(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(ledger.os, "open", recording_open)
    record = ledger.make_record(contract="demo", contract_version="1.0.0", falsifier="F", falsifier_sha256="0" * 64,
                                device="cpu", verdict="PASS", observations={}, prediction="x < 1", margin=None,
                                duration_s=0.0, time_utc="2026-01-01T00:00:00Z")
    assert ledger.append(tmp_path / "ledger.jsonl", [record]) == 1
    monkeypatch.undo()
    assert len(opened) == 1
    try:
        still_open = ledger.os.fstat(opened[0]).st_ino == (tmp_path / "ledger.jsonl").stat().st_ino
    except OSError:  # closed (EBADF)
        still_open = False
    assert not still_open


def test_a_version_1_record_still_reads(tmp_path):
    """Every schema version from 1 to this pv's is read; 0 is none."""
    record = ledger.make_record(contract="c", contract_version="1.0.0", falsifier="FALSIFY-X-001",
                                falsifier_sha256="0" * 64, device="cpu", verdict="PASS", prediction="x < 1",
                                duration_s=0.1, time_utc="2026-11-22T03:01:02Z")
    data = json.loads(record.to_line())
    path = tmp_path / "l.jsonl"
    path.write_text(json.dumps({**data, "schema_version": 1}) + "\n")
    contents = ledger.read(path)
    assert not contents.problems and [r.schema_version for r in contents.records] == [1]

def test_replayed_records_are_found_by_id_or_whole_content_whatever_else_they_share(tmp_path):
    """Records that share everything the outline compares but differ in content are kept; a
    copy under a new id, and an id reused with other content, are replayed (the first line named)."""
    first = record(1)
    same_outline_other_content = record(1, observations={"x": 0.25, "i": 1})
    copy_new_id = ledger.LedgerRecord.model_validate({**first.model_dump(), "record_id": "f" * 32})
    id_reused = record(3, record_id=first.record_id)
    copy_of_second = ledger.LedgerRecord.model_validate({**same_outline_other_content.model_dump(), "record_id": "e" * 32})
    path = tmp_path / "l.jsonl"
    ledger.append(path, [first, same_outline_other_content, copy_new_id, id_reused, record(2), copy_of_second])
    contents = ledger.read(path)
    assert contents.lines == [1, 2, 5]
    assert [(p.line, p.message.split(":")[1].strip()) for p in contents.problems] == [
        (3, "repeats the record of line 1 (same record id, or same run, time and content); ignored"),
        (4, "repeats the record of line 1 (same record id, or same run, time and content); ignored"),
        (6, "repeats the record of line 2 (same record id, or same run, time and content); ignored")]
