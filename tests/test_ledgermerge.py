"""The ledger in git: two branches' evidence merges as the union of their records (pv.ledgermerge)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from pv import ledgermerge
from pv_workspace import falsifier, make_workspace


def line(rid: str, time: str, falsifier_id: str = "F") -> bytes:
    return json.dumps({"record_id": rid, "time_utc": time, "falsifier": falsifier_id}).encode()


def ledger(*lines: bytes) -> bytes:
    return b"".join(x + b"\n" for x in lines)


BASE = ledger(line("r0", "2026-01-01T00:00:00Z"))


def test_the_union_keeps_the_prefix_and_each_sides_order_whichever_way_it_merges():
    ours = BASE + ledger(line("a1", "2026-01-02T00:00:00Z"), line("a2", "2026-01-01T12:00:00Z"))
    theirs = BASE + ledger(line("b1", "2026-01-01T18:00:00Z"), b'{"torn', line("b2", "2026-01-03T00:00:00Z"))
    merged = ledgermerge.merge(BASE, ours, theirs)
    assert merged == ledgermerge.merge(BASE, theirs, ours)  # deterministic, whichever side is ours
    ids = [json.loads(x)["record_id"] if x.startswith(b'{"record') else x.decode()
           for x in merged.splitlines()]
    assert ids == ["r0", "b1", '{"torn', "a1", "a2", "b2"]  # a side's own order is never changed
    assert merged.startswith(BASE)


def test_a_record_both_sides_have_is_kept_once():
    shared = line("s", "2026-01-02T00:00:00Z")
    merged = ledgermerge.merge(BASE, BASE + ledger(shared), BASE + ledger(shared, line("b", "2026-01-04T00:00:00Z")))
    assert merged.count(b'"s"') == 1 and merged.endswith(ledger(line("b", "2026-01-04T00:00:00Z")))


def test_a_side_that_rewrote_history_is_a_conflict():
    with pytest.raises(ledgermerge.RewrittenHistory):
        ledgermerge.merge(BASE, ledger(line("x", "2026-01-01T00:00:00Z")), BASE)


def test_gitattributes_line_is_added_once():
    text = ledgermerge.gitattributes_text("*.png binary")
    assert text.startswith("*.png binary\n") and text.endswith("evidence/ledger.jsonl merge=pv-ledger\n")
    assert ledgermerge.gitattributes_text(text) is None


def git(cwd, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_two_branches_that_each_record_evidence_merge_without_conflict(tmp_path):
    ws = make_workspace(tmp_path)
    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001"), falsifier("FALSIFY-DEMO-002", prediction="val_loss < 1"),
                             falsifier("FALSIFY-DEMO-003", prediction="x > 1", check="basic:boom")])
    ws.generate()
    root = ws.root
    (root / ".gitattributes").write_text(ledgermerge.gitattributes_text(None))
    git(root, "init", "-q", "-b", "main")
    pv = f"{sys.executable} -m pv.cli"
    git(root, "config", "merge.pv-ledger.driver", f"{pv} ledger merge --git-driver %O %A %B")

    def record(selection: str) -> None:
        proc = ws.pytest("generated_tests", "-k", selection, "--pv-ledger", str(ws.ledger))
        assert "record(s) appended" in proc.stdout, proc.stdout

    record("demo_001")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base evidence")
    base = ws.ledger.read_bytes()
    git(root, "checkout", "-qb", "gpu")
    record("demo_002")
    git(root, "commit", "-qam", "gpu evidence")
    gpu = ws.ledger.read_bytes()
    git(root, "checkout", "-q", "main")
    record("demo_003 or demo_001")
    git(root, "commit", "-qam", "cpu evidence")
    cpu = ws.ledger.read_bytes()

    git(root, "merge", "-q", "--no-edit", "gpu")  # no conflict: the driver wrote the union
    merged = ws.ledger.read_bytes()
    assert merged.startswith(base) and sorted(merged.splitlines()) == sorted(
        base.splitlines() + cpu[len(base):].splitlines() + gpu[len(base):].splitlines())

    status = subprocess.run([sys.executable, "-m", "pv.cli", "status", "--format", "json"], cwd=root,
                            env=ws.env(), capture_output=True, text=True)
    concatenated = root / "evidence" / "ledger.jsonl"
    concatenated.write_bytes(cpu + gpu[len(base):])  # the records of both, one after the other
    again = subprocess.run([sys.executable, "-m", "pv.cli", "status", "--format", "json"], cwd=root,
                           env=ws.env(), capture_output=True, text=True)
    assert status.returncode == again.returncode and status.stdout == again.stdout, status.stderr
    assert '"FALSIFY-DEMO-002"' in status.stdout and '"FALSIFY-DEMO-003"' in status.stdout
