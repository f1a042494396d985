"""pv.replay: an unchanged `pv validate` run is replayed, any change to an input is seen, and a
stored run nobody but pv on this account signed is never believed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pv import cache, readlog, replay
from pv.config import load_workspace
from pv_validate_ws import parse_output

PROBE = ("import sys\nfrom pv.cli import main\n"
         "try:\n    main(sys.argv[1:])\nexcept SystemExit as exc:\n    code = exc.code\n"
         "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'click', 'pydantic', 'jsonschema', 'yaml', 'z3', 'torch'})\n"
         "print('EXIT', code, 'LOADED', heavy)\n")


@pytest.fixture
def checks(monkeypatch):
    """Counts the validations the command really runs (a replay runs none)."""
    import pv.validation as command  # pv.validation.checked_report runs it, for click and for `pv` itself

    calls: list[int] = []
    real = command.validate

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(command, "validate", counting)
    return calls


def test_an_unchanged_run_is_replayed_with_the_same_report(vworkspace, checks):
    vworkspace.contract(("check: falsifiers.demo:measure", "check: falsifiers.demo:needs_extra"))
    first = vworkspace.run()
    assert first.exit_code == 1 and "PV314" in first.output and "2 errors" in first.output, first.output
    second = vworkspace.run()
    assert len(checks) == 1, "the second run validated again"
    assert (second.exit_code, second.output) == (first.exit_code, first.output)
    as_json = vworkspace.run("--format", "json", "-q")  # printing options reuse the same run
    assert len(checks) == 1 and json.loads(as_json.output)["errors"] == 2


def _edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


EDITS = {
    "the contract": (lambda ws: _edit(ws.contracts / "demo-forward-v1.yaml", "batches: 2", "batches: 2, extra: 1"),
                     "PV313"),
    "a bound check module": (lambda ws: _edit(ws.root / "falsifiers" / "demo.py",
                                              "checkpoint, batches=1, tolerance=None", "checkpoint, tolerance=None"),
                             "PV313"),
    "the mutants module": (lambda ws: _edit(ws.root / "falsifiers" / "mutants.py", '"drops_bias"', '"other"'),
                           "PV309"),
    "[tool.pv] in pyproject": (lambda ws: _edit(ws.root / "pyproject.toml", '"falsifiers.mutants"', '"falsifiers.gone"'),
                               "PV309"),
    "a new contract in the dir": (lambda ws: ws.contract(name="copy-v1.yaml"), "PV301"),
    "a module that did not exist": (lambda ws: ws.write("falsifiers/demo/__init__.py", "x = 1\n"), "PV312"),
}


@pytest.mark.parametrize("what", sorted(EDITS))
def test_any_change_to_an_input_validates_again(vworkspace, checks, what):
    vworkspace.contract()
    assert vworkspace.run().exit_code == 0
    assert vworkspace.run().exit_code == 0 and len(checks) == 1  # replayed
    edit, code = EDITS[what]
    edit(vworkspace)
    result = vworkspace.run()
    assert len(checks) == 2, f"a change to {what} was replayed over"
    assert result.exit_code == 1 and code in {d.code for d in parse_output(result.output)}, result.output


def test_a_change_to_pv_itself_validates_again(vworkspace, checks, monkeypatch):
    vworkspace.contract()
    vworkspace.run()
    monkeypatch.setitem(replay._DIGESTS, "pv", "another pv")
    vworkspace.run()
    assert len(checks) == 2


def _forge(ws, signed: bool) -> None:
    """A stored run for the current inputs that says "valid" (as anyone can write it: the key
    is computed from public facts), signed with this account's secret or not."""
    workspace = load_workspace(ws.root)
    files = workspace.contract_files()
    key = replay.run_key(workspace, files, files, replay.options(None, "pv"))
    body = json.dumps({"version": replay.REPLAY_VERSION, "key": key, "inputs": [],
                       "report": {"files": 1, "contracts": 1, "falsifiers": 1, "diagnostics": []}}).encode()
    path = ws.root / replay.RUNS_DIR / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(cache.sign(body) if signed else cache.SIGNATURE_PREFIX + b"0" * 64 + b"\n" + body)


def test_a_forged_stored_run_never_makes_a_broken_contract_valid(vworkspace, checks, monkeypatch, tmp_path):
    vworkspace.contract(("check: falsifiers.demo:measure", "check: falsifiers.demo:needs_extra"))
    _forge(vworkspace, signed=False)
    result = vworkspace.run()
    assert result.exit_code == 1 and "PV314" in result.output and len(checks) == 1
    # signed by another account (another secret): just as foreign
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "someone-else"))
    monkeypatch.setattr(cache, "_SECRETS", {})
    _forge(vworkspace, signed=True)
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setattr(cache, "_SECRETS", {})
    result = vworkspace.run()
    assert result.exit_code == 1 and "PV314" in result.output and len(checks) == 2
    # the control: the same forgery signed with this account's secret would be believed, so
    # what refused the two above is the signature alone
    _forge(vworkspace, signed=True)
    assert vworkspace.run().exit_code == 0 and len(checks) == 2


def test_a_truncated_or_corrupt_stored_run_is_a_miss(vworkspace, checks):
    vworkspace.contract()
    vworkspace.run()
    (stored,) = (vworkspace.root / replay.RUNS_DIR).glob("*.json")
    data = stored.read_bytes()
    for text in (data[: len(data) // 2], data[:-1] + b"x", b"", b"\n\n", data.replace(b'"contracts":1', b'"contracts":9')):
        stored.write_bytes(text)
        result = vworkspace.run()
        assert result.exit_code == 0 and "1 contracts" in result.output, result.output
    assert len(checks) == 6


def test_nothing_is_stored_or_replayed_with_pv_no_cache(vworkspace, checks, monkeypatch):
    monkeypatch.setenv("PV_NO_CACHE", "1")
    vworkspace.contract()
    vworkspace.run()
    vworkspace.run()
    assert len(checks) == 2 and not (vworkspace.root / replay.RUNS_DIR).exists()


def test_an_internal_error_is_never_stored(vworkspace, monkeypatch):
    from pv import crosscheck

    def broken(loaded, *args):
        raise RuntimeError("a bug in pv")

    monkeypatch.setattr(crosscheck, "mutants", broken)
    vworkspace.contract()
    assert "PV199" in vworkspace.run().output
    assert not list((vworkspace.root / replay.RUNS_DIR).glob("*.json"))


def test_a_file_that_changes_while_it_is_read_makes_the_run_unrecordable(tmp_path):
    target = tmp_path / "a.yaml"
    target.write_text("one")
    recorder = readlog.Recorder(tmp_path, [target])
    assert recorder.inputs() is not None
    target.write_text("three")  # another size: the run may have read either text
    assert recorder.inputs() is None


def test_the_recorder_sees_reads_listings_and_probes(tmp_path):
    (tmp_path / "here.txt").write_text("x")
    recorder = readlog.start(tmp_path, [])
    try:
        (tmp_path / "here.txt").read_text()
        (tmp_path / "absent.py").is_file()
        list(tmp_path.glob("*.txt"))
    finally:
        readlog.stop(recorder)
    assert os.stat is readlog._real_stat  # restored
    inputs = {(what, where) for what, where, _ in recorder.inputs()}
    assert ("file", str(tmp_path / "here.txt")) in inputs
    assert ("kind", f"stat:{tmp_path / 'absent.py'}") in inputs
    assert ("listing", str(tmp_path)) in inputs


def _tested_pv(env=None) -> dict:
    """`env` (default os.environ) with the pv these tests import first on the path: a child in a
    workspace elsewhere would otherwise import whichever pv is installed."""
    import pv

    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(pv.__file__)),
                                         *filter(None, [env.get("PYTHONPATH")])])
    return env


def _pv(root, *args, env=None):
    done = subprocess.run([sys.executable, "-c", PROBE, "validate", *args], cwd=root, capture_output=True,
                          text=True, timeout=120, env=_tested_pv(env))
    tail = done.stdout.rsplit("EXIT", 1)
    assert len(tail) == 2, done.stdout + done.stderr
    return tail[0], "EXIT " + tail[1].strip()


@pytest.mark.parametrize("broken", [False, True])
def test_a_replay_imports_nothing_that_checks(vworkspace, broken):
    """The pre-commit hook's fast path: no click, pydantic, jsonschema, PyYAML, z3 or torch."""
    vworkspace.contract(*([("check: falsifiers.demo:measure", "check: falsifiers.demo:needs_extra")] if broken else []))
    first, status = _pv(vworkspace.root, "-q")
    code = 1 if broken else 0
    assert status.startswith(f"EXIT {code} LOADED") and "click" in status, first + status
    second, status = _pv(vworkspace.root, "-q")
    assert status == f"EXIT {code} LOADED []", status
    assert second == first


def test_inputs_read_in_worker_processes_are_recorded(vworkspace):
    """Large sets are checked in forked workers: what they read is an input too."""
    for n in range(3):
        vworkspace.contract(("id: demo-forward", f"id: demo-{n}"), ("DEMO-BND-001", f"DEMO-BND-00{n}"),
                            ("FALSIFY-DEMO-FORWARD-001", f"FALSIFY-DEMO-{n}00-001"),
                            ("FALSIFY-DEMO-FORWARD-001", f"FALSIFY-DEMO-{n}00-001"), name=f"demo-{n}-v1.yaml")
    env = {**os.environ, "PV_JOBS": "2"}
    before, status = _pv(vworkspace.root, env=env)
    assert status.startswith("EXIT 0"), before
    stored = next((vworkspace.root / replay.RUNS_DIR).glob("*.json")).read_bytes()
    inputs = {where for what, where, _ in json.loads(stored.split(b"\n", 1)[1])["inputs"] if what == "file"}
    assert {str(vworkspace.contracts / f"demo-{n}-v1.yaml") for n in range(3)} <= inputs
    assert str(vworkspace.root / "falsifiers" / "demo.py") in inputs
    _edit(vworkspace.root / "falsifiers" / "demo.py", "checkpoint, batches=1, tolerance=None", "checkpoint, tolerance=None")
    after, status = _pv(vworkspace.root, env=env)
    assert status.startswith("EXIT 1") and "PV313" in after, after


@pytest.fixture
def judged(monkeypatch) -> list[str]:
    """The ids of the contracts whose evidence (PV501) is judged, in order, across runs."""
    from pv import declared

    ids: list[str] = []
    real = declared.declared_status_diagnostics

    def counting(loaded, *args, **kwargs):
        ids.extend(c.contract.metadata.id for c in loaded)
        return real(loaded, *args, **kwargs)

    monkeypatch.setattr(declared, "declared_status_diagnostics", counting)
    return ids


def _two_claiming(ws):
    """Two contracts that declare more than their (absent) evidence: PV501 on each."""
    for n in (1, 2):
        ws.contract(("id: demo-forward", f"id: demo-{n}"), ("status: DRAFT", "status: ACTIVE_RUNTIME"),
                    ("DEMO-BND-001", f"DEMO-BND-00{n}"), ("FALSIFY-DEMO-FORWARD-001", f"FALSIFY-DEMO-{n}00-001"),
                    ("FALSIFY-DEMO-FORWARD-001", f"FALSIFY-DEMO-{n}00-001"), name=f"demo-{n}-v1.yaml")


def test_each_contracts_evidence_is_judged_again_only_when_its_inputs_change(vworkspace, judged):
    _two_claiming(vworkspace)
    first = vworkspace.run()
    assert first.output.count("PV501") == 2 and sorted(judged) == ["demo-1", "demo-2"], first.output
    # an edit to one contract: the whole run is checked again, the other's evidence replayed
    _edit(vworkspace.contracts / "demo-1-v1.yaml", "The forward pass", "The forward")
    second = vworkspace.run()
    assert second.output == first.output and judged[2:] == ["demo-1"], (judged, second.output)
    # the ledger is an input of every contract's share
    vworkspace.write("evidence/ledger.jsonl", "")
    assert vworkspace.run().output == first.output and sorted(judged[3:]) == ["demo-1", "demo-2"]
    # a forged part (unsigned) is never believed
    for stored in (vworkspace.root / replay.PARTS_DIR).glob("*.json"):
        body = stored.read_bytes().split(b"\n", 1)[1]
        data = json.loads(body)
        data["diagnostics"] = []
        stored.write_bytes(cache.SIGNATURE_PREFIX + b"0" * 64 + b"\n" + json.dumps(data).encode())
    _edit(vworkspace.contracts / "demo-2-v1.yaml", "The forward pass", "The forward")  # no whole-run replay
    assert vworkspace.run().output.count("PV501") == 2 and sorted(judged[5:]) == ["demo-1", "demo-2"]


def test_old_stored_runs_age_out(vworkspace, monkeypatch):
    monkeypatch.setattr(replay, "MAX_RUNS", 2)
    for n in range(3):
        vworkspace.contract(("id: demo-forward", f"id: demo-{n}"), ("DEMO-BND-001", f"DEMO-BND-00{n}"),
                            ("FALSIFY-DEMO-FORWARD-001", f"FALSIFY-DEMO-{n}00-001"),
                            ("FALSIFY-DEMO-FORWARD-001", f"FALSIFY-DEMO-{n}00-001"), name=f"demo-{n}-v1.yaml")
        assert vworkspace.run(f"contracts/demo-{n}-v1.yaml").exit_code == 0  # one stored run per selection
    assert len(list((vworkspace.root / replay.RUNS_DIR).glob("*.json"))) == 2


def test_the_parts_of_a_run_look_at_a_shared_input_once(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("x")
    inputs = [["kind", f"stat:{tmp_path / 'g'}", "missing"], ["listing", str(tmp_path), readlog.listing_digest(str(tmp_path))],
              ["file", str(tmp_path / "f"), readlog.file_digest(str(tmp_path / "f"))]]
    looked: list[str] = []
    real = replay._now
    monkeypatch.setattr(replay, "_now", lambda what, where: (looked.append(what), real(what, where))[1])
    seen: dict = {}
    assert replay.unchanged(inputs, seen) and replay.unchanged(inputs, seen)
    assert sorted(looked) == ["file", "kind", "listing"]
    (tmp_path / "g").write_text("now here")
    assert replay.unchanged(inputs, seen)  # within one look: as first found
    assert not replay.unchanged(inputs) and not replay.unchanged(inputs, {})


def test_a_digest_is_shared_only_while_the_file_stays_as_it_was_hashed(tmp_path, monkeypatch):
    monkeypatch.setattr(readlog, "_DIGEST_MEMO", {})
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(b"one\n")
    st = os.stat(path)
    assert readlog.digest_of_read(str(path), st) is None
    digest = readlog.file_digest(str(path))
    assert readlog.digest_of_read(str(path), st) == digest
    with open(path, "ab") as handle:
        handle.write(b"two\n")
    st = os.stat(path)
    assert readlog.digest_of_read(str(path), st) is None
    data = path.read_bytes()
    import hashlib

    assert readlog.digest_of_read(str(path), st, data) == hashlib.sha256(data).hexdigest()
    assert readlog.digest_of_read(str(path), st) == hashlib.sha256(data).hexdigest() == readlog.file_digest(str(path))
    assert readlog.digest_of_read(str(path), st, data[:-1]) == hashlib.sha256(data[:-1]).hexdigest()  # a short read


# `pv` itself (main() with no arguments, as the console script calls it), reporting what it loaded
# `pv` itself ends with os._exit once its report is out (pv.cli._end): here that exit is a
# SystemExit with its status, so the probe can say what was loaded
PROCESS_PROBE = ("import os\ndef _exit(code):\n    raise SystemExit(code)\nos._exit = _exit\n"
                 + PROBE.replace("main(sys.argv[1:])", "main()"))


@pytest.mark.parametrize("args", [[], ["-q"], ["--format", "json"], ["--format=json", "-q"], ["--no-strict-bindings"],
                                  ["contracts/demo-forward-v1.yaml"]])
@pytest.mark.parametrize("check", ["needs_extra", "mesuré"])
@pytest.mark.parametrize("cached", [False, True], ids=["PV_NO_CACHE", "cached"])
def test_pv_itself_checks_a_plain_command_line_without_click_and_prints_what_click_prints(vworkspace, args, check,
                                                                                        cached):
    """A plain `pv validate` command line: `pv` checks it without importing click
    (pv.replay.fast_validate with check) and prints, byte for byte and with the same exit
    status, what the click command prints; output that is not plain ASCII (a check named
    `mesuré`) goes through click.echo itself. Anything else is click's to say."""
    vworkspace.contract(("check: falsifiers.demo:measure", f"check: falsifiers.demo:{check}"))
    env = _tested_pv({**os.environ, **({} if cached else {"PV_NO_CACHE": "1"})})
    with_click = subprocess.run([sys.executable, "-c", PROBE, "validate", *args], cwd=vworkspace.root,
                                capture_output=True, timeout=120, env=env)
    shown_by_click, status_with_click = with_click.stdout.rsplit(b"EXIT", 1)
    assert status_with_click.startswith(b" 1 LOADED") and b"'click'" in status_with_click
    itself = subprocess.run([sys.executable, "-c", PROCESS_PROBE, "validate", *args], cwd=vworkspace.root,
                            capture_output=True, timeout=120, env=env)
    shown, status = itself.stdout.rsplit(b"EXIT", 1)
    assert shown == shown_by_click and itself.stderr == with_click.stderr
    assert status.startswith(b" 1 LOADED"), shown + status
    assert (b"'click'" in status) == (not shown.isascii()), status  # only to print what is not ASCII
    assert shown.isascii() == (check.isascii() or "json" in " ".join(args))  # (json escapes it)
    plain = subprocess.run([sys.executable, "-c", PROCESS_PROBE, "validate", "-q", "falsifiers"], cwd=vworkspace.root,
                           capture_output=True, timeout=120, env=env)  # no contract file there: click says so
    assert b"Usage:" in plain.stderr and plain.stdout.startswith(b"EXIT 2 LOADED") and b"'click'" in plain.stdout


def test_a_contracts_evidence_is_replayed_after_an_edit_of_its_comments_or_layout(vworkspace, judged, monkeypatch):
    """A PV501 share is keyed by the contract's data: a comment or layout edit replays it, and its
    findings stand where a full check puts them (positions are the one thing the bytes decide)."""
    _two_claiming(vworkspace)
    first = vworkspace.run()
    assert first.output.count("PV501") == 2 and len(judged) == 2, first.output
    path = vworkspace.contracts / "demo-1-v1.yaml"
    text = path.read_text()
    # comments above metadata.status and a blank line: the finding moves down three lines
    first_line, rest = text.split("\n", 1)
    path.write_text(f"{first_line}\n# a comment\n\n# another\n{rest}# and one at the end\n")
    edited = vworkspace.run()
    assert judged[2:] == [], judged  # nothing judged again
    monkeypatch.setenv("PV_NO_CACHE", "1")
    cold = vworkspace.run()
    assert edited.output == cold.output and edited.exit_code == cold.exit_code == 1, (edited.output, cold.output)
    assert edited.output != first.output  # the positions moved
    monkeypatch.delenv("PV_NO_CACHE")
    # a data edit is judged again
    _edit(path, "The forward pass", "The forward")
    assert vworkspace.run().output.count("PV501") == 2 and judged[-1] == "demo-1", judged
