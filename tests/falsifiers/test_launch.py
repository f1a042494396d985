"""pvlab.falsifiers.launch: W ranks with torchrun's environment; a failing, dying or hanging rank
raises within the timeout (never a hang, never a result), every rank is gone afterwards, and a
planted bug is active inside the ranks.

The rank targets live in this module: the ranks import it by name (launch passes sys.path on)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from pv import harness
from pvlab.falsifiers import launch

pytestmark = pytest.mark.slow  # each test starts Python processes that import torch

ENV = {"OMP_NUM_THREADS": "1"}


# ---- rank targets ---------------------------------------------------------------------------------

def _note_pid(workdir: str) -> None:
    # Written under a temporary name and renamed: the launcher may kill this rank mid-write once its
    # sibling fails, and a half-written pid file must not exist for _all_gone to read.
    final = Path(workdir, f"pid-{os.environ['RANK']}")
    partial = final.with_name(f".{final.name}.partial")
    partial.write_text(str(os.getpid()))
    os.replace(partial, final)


def report_rank() -> dict:
    """Joins the process group through env:// (as under torchrun) and all-reduces its rank."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://")
    total = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(total)
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "env_rank": int(os.environ["RANK"]),
            "sum_of_ranks": float(total)}


def rank_one_raises(workdir: str) -> dict:
    """Rank 1 raises; rank 0 waits for it in a barrier (which, alone, would wait forever)."""
    import torch.distributed as dist

    _note_pid(workdir)
    if os.environ["RANK"] == "1":
        raise ValueError("rank one broke on purpose")
    dist.init_process_group("gloo", init_method="env://")
    dist.barrier()
    return {}


def rank_one_hangs(workdir: str) -> dict:
    _note_pid(workdir)
    if os.environ["RANK"] == "1":
        while True:
            time.sleep(1)
    return {}


def rank_one_dies(workdir: str) -> dict:
    _note_pid(workdir)
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)
    return {}


def report_mutants() -> dict:
    from pvlab.falsifiers.mutants import planting
    from pvlab.runtime import distributed

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return {"active": planting.active(),
            "shard": distributed.shard_indices(10, rank=rank, world_size=world, seed=0, epoch=0)}


def failing_check(*, device: str) -> dict:
    """A check as pv calls it, whose ranks fail."""
    launch.run_ranks(rank_one_raises, world_size=2, kwargs={"workdir": os.environ["PV_TEST_WORKDIR"]},
                     timeout_s=120, environment=ENV)
    return {"world_size": 2}


# ---- tests ----------------------------------------------------------------------------------------

def _all_gone(workdir: Path) -> None:
    for file in workdir.glob("pid-*"):
        with pytest.raises(ProcessLookupError):
            os.kill(int(file.read_text()), 0)


def test_every_rank_gets_torchruns_environment_and_results_come_back_in_rank_order():
    results = launch.run_ranks(report_rank, world_size=2, timeout_s=180, environment=ENV)
    assert [r["rank"] for r in results] == [0, 1] == [r["env_rank"] for r in results]
    assert all(r["world_size"] == 2 and r["sum_of_ranks"] == 1.0 for r in results)


def test_a_failing_rank_raises_with_its_error_and_no_rank_survives(tmp_path):
    started = time.monotonic()
    with pytest.raises(launch.RankFailed, match=r"rank 1 of 2 failed: ValueError: rank one broke on purpose"):
        launch.run_ranks(rank_one_raises, world_size=2, kwargs={"workdir": str(tmp_path)}, timeout_s=300,
                         environment=ENV)
    assert time.monotonic() - started < 120  # raised when rank 1 died, not at the timeout
    _all_gone(tmp_path)


def test_a_hanging_rank_raises_at_the_timeout_and_is_killed(tmp_path):
    started = time.monotonic()
    # rank 0 may still be starting on a loaded machine; rank 1 is certainly still running
    with pytest.raises(launch.RanksTimedOut, match=r"rank\(s\) \[(0, )?1\] of 2 still running after 40 s"):
        launch.run_ranks(rank_one_hangs, world_size=2, kwargs={"workdir": str(tmp_path)}, timeout_s=40,
                         environment=ENV)
    assert time.monotonic() - started < 40 + 15
    _all_gone(tmp_path)


def test_a_rank_killed_by_a_signal_raises(tmp_path):
    with pytest.raises(launch.RankFailed, match=r"rank 1 of 2 failed: killed by signal 9"):
        launch.run_ranks(rank_one_dies, world_size=2, kwargs={"workdir": str(tmp_path)}, timeout_s=300,
                         environment=ENV)
    _all_gone(tmp_path)


def test_a_falsifier_whose_ranks_fail_is_an_error_not_a_pass(tmp_path, monkeypatch):
    monkeypatch.setenv("PV_TEST_WORKDIR", str(tmp_path))
    with pytest.raises(harness.FalsifierError, match="rank 1 of 2 failed"):
        harness.falsify(failing_check, {}, "world_size == 2", "cpu", falsifier="FALSIFY-TEST-001")
    assert harness.take_outcome().verdict == "ERROR"


def test_bad_arguments_are_refused_before_anything_starts():
    with pytest.raises(ValueError, match="world_size"):
        launch.run_ranks(report_rank, world_size=0)
    with pytest.raises(ValueError, match="module-level"):
        launch.run_ranks(lambda: {}, world_size=1)


def test_a_planted_bug_is_active_inside_every_rank():
    from pvlab.falsifiers.mutants import registry

    clean = launch.run_ranks(report_mutants, world_size=2, timeout_s=180, environment=ENV)
    assert [r["active"] for r in clean] == [[], []]
    assert not set(clean[0]["shard"]) & set(clean[1]["shard"])
    with registry()["every_rank_reads_the_same_shard"]():
        planted = launch.run_ranks(report_mutants, world_size=2, timeout_s=180, environment=ENV)
    assert [r["active"] for r in planted] == [["every_rank_reads_the_same_shard"]] * 2
    assert planted[0]["shard"] == planted[1]["shard"] == clean[0]["shard"]
