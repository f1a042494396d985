"""Work `pv validate` does in forked children (pv.forked) reports exactly what one process
reports: the files shared between processes, the per-file checks beside PV501, PV501's
contracts in two halves, models built again from the data, and the process's own quick end."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pv_validate_ws import make_vworkspace


def _pv_env(**extra: str) -> dict:
    import pv

    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(pv.__file__)),
                                         *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter (no test runner's threads: pv.forked may fork there)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          env=_pv_env(**env))


# --- pv.forked ------------------------------------------------------------------------------------


def test_a_child_hands_its_value_back_and_a_failed_child_is_computed_here():
    done = _python("""
        import os, sys
        from pv.forked import Forked, available
        assert available()
        parent = os.getpid()
        child = Forked(lambda: (os.getpid(), [1, {"a": 2.5}]))
        assert child.forked
        pid, value = child.result()
        assert pid != parent and value == [1, {"a": 2.5}]
        # a child that raises, dies or hands back what does not pickle: the value is computed here
        def raises():
            if os.getpid() != parent:
                raise ValueError("in the child")
            return "here"
        assert Forked(raises).result() == "here"
        assert Forked(lambda: os._exit(3) if os.getpid() != parent else "here").result() == "here"
        assert Forked(lambda: (lambda: 1) if os.getpid() != parent else "here").result() == "here"
        assert Forked(lambda: os.getpid(), here=lambda: "fallback").result() != "fallback"
        # what raises here too raises here, as without a child
        try:
            Forked(lambda: 1 / 0).result()
        except ZeroDivisionError:
            print("raised")
        """)
    assert done.returncode == 0 and done.stdout.strip() == "raised", done.stderr


def test_a_core_is_free_where_fewer_tasks_run_than_there_are_cores(monkeypatch, tmp_path):
    from pv import forked

    monkeypatch.delenv("PV_JOBS", raising=False)
    real_open = open

    def loadavg(running: int):
        def fake(path, *args, **kwargs):
            if path == "/proc/loadavg":
                path = tmp_path / "loadavg"
                path.write_text(f"0.50 0.40 0.30 {running}/90 1234\n")
            return real_open(path, *args, **kwargs)
        return fake

    monkeypatch.setattr(forked.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr("builtins.open", loadavg(1))
    assert forked.idle_core()  # this process alone
    monkeypatch.setattr("builtins.open", loadavg(2))
    assert not forked.idle_core()  # another task holds the other core
    monkeypatch.setenv("PV_JOBS", "2")
    assert forked.idle_core()  # asked for


def test_a_child_of_this_process_still_running_leaves_its_core_counted_free():
    """A child whose value this process has not read yet is not another's load: while it runs
    (state R) it is not counted among the runnable tasks, once read it is gone from the count."""
    done = _python("""
        import os, time
        from pv import forked
        assert forked.available()
        forked.os.sched_getaffinity = lambda pid: {0, 1}
        real_open = open
        running = [2]  # this process and its spinning child

        def fake(path, *args, **kwargs):
            if path == "/proc/loadavg":
                import io
                return io.BytesIO(f"0.5 0.4 0.3 {running[0]}/90 1234".encode())
            return real_open(path, *args, **kwargs)

        import builtins
        builtins.open = fake
        parent = os.getpid()
        child = forked.Forked(lambda: [time.time() for _ in range(3_000_000)][:0] if os.getpid() != parent else None)
        assert child.forked
        deadline = time.time() + 5  # a fresh child is runnable at once; allow for a scheduler hiccup
        while not forked._runnable(child._pid) and time.time() < deadline:
            time.sleep(0.001)
        free_beside_child = forked.idle_core()
        running[0] = 3  # a third task, not ours: the machine's other core is busy
        busy = forked.idle_core()
        child.result()
        running[0] = 2  # the child's value read: a second task is another's
        after = forked.idle_core()
        print(free_beside_child, busy, after, forked._CHILDREN)
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "False", "set()"], done.stdout


def test_no_child_is_forked_where_one_process_is_asked_for_or_threads_run():
    done = _python("""
        import os, threading, time
        from pv.forked import Forked, available
        parent = os.getpid()
        assert not available() and Forked(os.getpid).result() == parent
        """, PV_JOBS="1")
    assert done.returncode == 0, done.stderr
    done = _python("""
        import os, threading
        from pv.forked import Forked, available
        stop = threading.Event()
        threading.Thread(target=stop.wait).start()
        try:
            assert not available() and Forked(os.getpid).result() == os.getpid()
        finally:
            stop.set()
        """)
    assert done.returncode == 0, done.stderr


# --- a file checked in a child travels without its model --------------------------------------------


def test_a_file_without_its_model_counts_and_builds_it_again_from_its_data(tmp_path, monkeypatch):
    ws = make_vworkspace(tmp_path, monkeypatch)
    path, _ = ws.contract(("status: DRAFT", "status: ACTIVE_RUNTIME"))
    from pv.loader import load_contract
    from pv.schema import Contract, LifecycleStatus

    loaded, problems = load_contract(path)
    assert loaded is not None and loaded.contract is not None and not problems
    model = loaded.contract
    loaded.node = None
    loaded.without_model()
    sent = pickle.loads(pickle.dumps(loaded))
    assert "contract" not in sent.__dict__
    built: list[int] = []
    real = Contract.model_validate
    monkeypatch.setattr(Contract, "model_validate", classmethod(lambda cls, data: built.append(1) or real(data)))
    assert sent.accepted() == (1, LifecycleStatus.ACTIVE_RUNTIME) and not built  # counted without a model
    assert sent.contract == model and built == [1]
    assert sent.contract is sent.contract and built == [1]  # built once
    assert sent.accepted() == (1, LifecycleStatus.ACTIVE_RUNTIME)
    with pytest.raises(AttributeError):
        sent.no_such_attribute  # noqa: B018
    rejected, _ = load_contract(ws.write("contracts/bad-v1.yaml", "metadata: {id: 3}\n"))
    rejected.without_model()
    assert rejected.contract is None and rejected.accepted() is None


# --- pv validate: forked children report what one process does ------------------------------------------


def _claiming_workspace(tmp_path, monkeypatch, files: int):
    """Contracts that claim more than DRAFT (PV501, no ledger evidence), with per-file findings
    (a parameter the check does not take in every file, an unknown mutant, a misspelt key) and a
    cross-file one (a duplicate falsifier id)."""
    ws = make_vworkspace(tmp_path, monkeypatch)
    statuses = ["ACTIVE_RUNTIME", "DRAFT_PARTIAL_DISCHARGE", "DRAFT", "DRAFT_RED"]
    for n in range(files):
        replacements = [("id: demo-forward", f"id: demo-{n}"), ("status: DRAFT", f"status: {statuses[n % 4]}"),
                        ("DEMO-BND-001", f"DEMO-BND-{n:03d}"), ("batches: 2", f"batches: 2, extra{n}: 1")]
        if n % 3:
            replacements.append(("FALSIFY-DEMO-FORWARD-001", f"FALSIFY-DEMO-{n:03d}-001"))
            replacements.append(("FALSIFY-DEMO-FORWARD-001", f"FALSIFY-DEMO-{n:03d}-001"))
        if n % 5 == 1:
            replacements.append(("mutants: [drops_bias]", "mutants: [drops_bais]"))
        if n % 7 == 2:
            replacements.append(("    rule:", "    rul:"))
        ws.contract(*replacements, name=f"demo-{n}-v1.yaml")
    return ws


@pytest.mark.parametrize("files", [9, 230])
def test_checks_in_forked_children_report_byte_for_byte_what_one_process_reports(tmp_path, monkeypatch, files):
    """With nothing remembered (PV_NO_CACHE=1): a few files are loaded here, their checks run in a
    child beside PV501, whose contracts are judged here and in a child; many files are checked
    in this process and a child, each taking the next chunk. The output and the exit status
    are those of one process (PV_JOBS=1)."""
    ws = _claiming_workspace(tmp_path, monkeypatch, files)
    monkeypatch.delenv("PV_JOBS", raising=False)
    outputs = {}
    # one process; as many as pv picks (forking, a core taken as free); two
    idle = "import pv.forked\npv.forked.idle_core = lambda: True\nfrom pv.cli import main\nmain()\n"
    for jobs in ("1", "", "2"):
        for args in ([], ["--format", "json"]):
            done = subprocess.run([sys.executable, "-c", idle, "validate", *args],
                                  cwd=ws.root, capture_output=True, timeout=300,
                                  env=_pv_env(PV_NO_CACHE="1", **({"PV_JOBS": jobs} if jobs else {})))
            outputs[(jobs, tuple(args))] = (done.returncode, done.stdout, done.stderr)
    for jobs in ("", "2"):
        for args in ([], ["--format", "json"]):
            assert outputs[(jobs, tuple(args))] == outputs[("1", tuple(args))], (jobs, args)
    status, out, _ = outputs[("1", ())]
    assert status == 1 and b"PV501" in out and b"PV309" in out and b"PV302" in out, out[-2000:]


def test_tokens_hand_each_number_to_exactly_one_process():
    done = _python("""
        import os
        from pv.forked import Forked, Tokens, tokens
        parent = os.getpid()
        pool = Tokens(3000)
        def take():
            taken = []
            for n in iter(pool.take, None):
                taken.append(n)
                if os.getpid() != parent:
                    sum(range(2000))  # both processes take, at different paces
            return taken
        children = [Forked(take) for _ in range(3)]
        mine = take()
        theirs = [child.result() for child in children]
        everything = mine + [n for part in theirs for n in part]
        assert sorted(everything) == list(range(3000)), len(everything)
        assert all(part == sorted(part) for part in [mine, *theirs])  # each takes them in order
        assert sum(1 for part in theirs if part) >= 1
        assert pool.take() is None
        assert tokens(Tokens.MAX_TOKENS + 1) is None and Tokens(0).take() is None
        # a pipe that cannot hold them (one page, as the kernel gives a user past its limit): none, no hang
        import fcntl
        real_pipe = os.pipe
        def small_pipe():
            r, w = real_pipe()
            fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ
            return r, w
        os.pipe = small_pipe
        assert tokens(2000) is None and tokens(1000).take() == 0
        """)
    assert done.returncode == 0, done.stderr


def test_pv501_shares_are_reported_in_the_order_one_loop_meets_them(tmp_path, monkeypatch):
    """_Judge.in_order puts the shares back in todo's order; where a process stopped at a failure,
    the first failure in that order is raised, as the loop would have met it; a contract a child
    took and did not hand back is judged here."""
    from pv.validation import _Judge

    judge = _Judge.__new__(_Judge)
    judged_here: list[str] = []

    def share(contract):
        judged_here.append(contract)
        if contract == "boom":
            raise KeyError(contract)
        return [f"d-{contract}"]

    judge.share = share
    todo = [(f"c{n}", "") for n in range(6)]
    parent = ({0: ["d-c0"], 2: ["d-c2"], 5: ["d-c5"]}, None)
    child = ({1: ["d-c1"], 3: ["d-c3"]}, None)
    assert judge.in_order(todo, [parent, child]) == ["d-c0", "d-c1", "d-c2", "d-c3", "d-c4"] + ["d-c5"]
    assert judged_here == ["c4"]  # nobody handed it back: judged here
    judged_here.clear()
    assert judge.in_order(todo, [parent, None]) == [f"d-c{n}" for n in range(6)] and judged_here == ["c1", "c3", "c4"]
    failing = ({0: ["d-c0"]}, (2, KeyError("parent's"))), ({1: ["d-c1"]}, (4, KeyError("child's")))
    with pytest.raises(KeyError) as raised:
        judge.in_order(todo, list(failing))
    assert raised.value.args == ("parent's",)
    todo[1] = ("boom", "")
    with pytest.raises(KeyError) as raised:  # the child's contract 1 lost, and it raises here first
        judge.in_order(todo, [failing[0], None])
    assert raised.value.args == ("boom",)


def test_pv501_judged_after_warming_says_what_it_says_cold_and_a_failed_warming_changes_nothing(tmp_path, monkeypatch):
    """_Judge.warm (before the split: the mutants scan and the template, inherited by the child)
    only answers early what the judging asks; where it fails, the judging meets it as before."""
    from pv import codegen
    from pv.config import load_workspace
    from pv.ledgerindex import groups
    from pv.validation import _Judge, _load_one, display

    ws = _claiming_workspace(tmp_path, monkeypatch, 4)
    monkeypatch.setenv("PV_NO_CACHE", "1")
    workspace = load_workspace(Path.cwd())
    from pv.crosscheck import Context

    ctx = Context(workspace)
    loaded = [_load_one((Path(os.path.abspath(p)), p, display(p), True), ctx)[0] for p in workspace.contract_files()]
    claiming = [c for c in loaded if c is not None and c.contract is not None]
    grouped = groups(workspace.root, workspace.ledger, [c.contract.metadata.id for c in claiming])

    def judged(warm) -> list:
        judge = _Judge(workspace, grouped)
        warm(judge)
        return [d.format() for c in claiming for d in judge.share(c)]

    cold = judged(lambda judge: None)
    assert any("PV501" in d for d in cold)
    assert judged(_Judge.warm) == cold

    def fails():
        raise RuntimeError("no templates here")

    monkeypatch.setattr(codegen, "_environment", fails)
    assert judged(_Judge.warm) == judged(lambda judge: None)
    assert ws is not None


# --- the process ends as soon as its report is out ------------------------------------------------


def test_pv_ends_with_its_status_and_whole_output_and_runs_exit_handlers_that_are_there(tmp_path, monkeypatch):
    ws = _claiming_workspace(tmp_path, monkeypatch, 3)
    plain = subprocess.run([sys.executable, "-c", "from pv.cli import main; main()", "validate"], cwd=ws.root,
                           capture_output=True, timeout=120, env=_pv_env(PV_NO_CACHE="1"))
    assert plain.returncode == 1 and plain.stdout.rstrip().endswith(b"warnings")
    handler = ("import atexit, sys\natexit.register(lambda: sys.stderr.write('handler ran\\n'))\n"
               "from pv.cli import main\nmain()\n")
    done = subprocess.run([sys.executable, "-c", handler, "validate"], cwd=ws.root, capture_output=True, timeout=120,
                          env=_pv_env(PV_NO_CACHE="1"))
    assert (done.returncode, done.stdout) == (1, plain.stdout) and b"handler ran" in done.stderr
    ws.write("contracts/demo-1-v1.yaml", "")  # nothing else: the run is clean but for an empty file
    for name in ("demo-0-v1.yaml", "demo-2-v1.yaml"):
        (ws.contracts / name).unlink()
    ws.contract()
    clean = subprocess.run([sys.executable, "-c", "from pv.cli import main; main()", "validate", "-q",
                            "contracts/demo-forward-v1.yaml"], cwd=ws.root, capture_output=True, timeout=120,
                           env=_pv_env(PV_NO_CACHE="1"))
    assert clean.returncode == 0 and clean.stdout.endswith(b"0 errors, 0 warnings\n"), clean.stdout + clean.stderr
