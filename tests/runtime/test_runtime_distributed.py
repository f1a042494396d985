"""runtime.distributed without ranks (the sampler, the loss scale, refusals) and, slow, a real
`torchrun --nproc-per-node 2 -m pvlab.runtime pretrain` whose consolidated directory transformers
opens. The distributed equivalences themselves are falsified by contracts/distributed-training-v1.yaml
(pvlab/falsifiers/data_parallel.py); their checks are tested in tests/falsifiers/test_data_parallel_checks.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pvlab.runtime import distributed
from pvlab.runtime.errors import ArgumentError
from pvlab.runtime.errors import ArgumentError, DataError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("num_items,world_size", [(25, 2), (24, 2), (10, 3), (7, 1), (5, 8)])
def test_shards_are_disjoint_and_cover_the_epoch(num_items, world_size):
    for epoch in range(3):
        shards = [distributed.shard_indices(num_items, rank=r, world_size=world_size, seed=4, epoch=epoch)
                  for r in range(world_size)]
        flat = [i for shard in shards for i in shard]
        assert sorted(flat) == list(range(num_items))            # disjoint, and every item once
        assert max(map(len, shards)) - min(map(len, shards)) <= 1


def test_epochs_are_reshuffled_and_seeded():
    first = distributed.shard_indices(50, rank=0, world_size=2, seed=0, epoch=0)
    assert first == distributed.shard_indices(50, rank=0, world_size=2, seed=0, epoch=0)
    assert first != distributed.shard_indices(50, rank=0, world_size=2, seed=0, epoch=1)
    assert first != distributed.shard_indices(50, rank=0, world_size=2, seed=1, epoch=0)


def test_the_ranks_batches_at_a_step_are_the_single_process_global_batch():
    """What makes W ranks x B equal to 1 process x W*B, and a resume on another world size exact."""
    windows = torch.arange(60 * 5).view(60, 5)
    single = distributed.RankWindows(windows, rank=0, world_size=1, batch_size=6, seed=3)
    ranks = [distributed.RankWindows(windows, rank=r, world_size=2, batch_size=3, seed=3) for r in range(2)]
    for _ in range(single.steps_per_epoch * 2 + 1):                       # across an epoch boundary
        assert sorted(single.next_indices()) == sorted(i for r in ranks for i in r.next_indices())
    resumed = distributed.RankWindows(windows, rank=0, world_size=1, batch_size=6, seed=3, position=4)
    again = distributed.RankWindows(windows, rank=0, world_size=1, batch_size=6, seed=3)
    for _ in range(4):
        again.next_indices()
    assert resumed.next_indices() == again.next_indices()


def test_loss_scale_makes_the_average_the_global_token_mean():
    # ranks with 3 and 5 tokens: W * t / T per rank, then DDP divides the sum by W
    scales = [distributed.loss_scale(t, 8, 2) for t in (3, 5)]
    means = [1.0, 2.0]
    assert sum(s * m for s, m in zip(scales, means)) / 2 == pytest.approx((3 * 1.0 + 5 * 2.0) / 8)


def test_refusals(monkeypatch):
    for name in distributed.TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ArgumentError, match="not started by torchrun"):
        distributed.init("cpu")
    with pytest.raises(ArgumentError, match="rank 2 outside a world of 2"):
        distributed.shard_indices(10, rank=2, world_size=2, seed=0, epoch=0)
    with pytest.raises(DataError, match="cannot fill one global batch"):
        distributed.RankWindows(torch.zeros(3, 5, dtype=torch.long), rank=0, world_size=2, batch_size=2, seed=0)


@pytest.mark.slow
def test_torchrun_pretrain_writes_a_directory_transformers_opens(tmp_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    out = tmp_path / "ckpt"
    # PYTHONFAULTHANDLER: a rank that dies of a signal prints where it was. Once in this project's
    # runs (2026-11-25, the whole suite on two busy cores) rank 1 died of SIGABRT ("terminate called
    # without an active exception") after training; it passed 11 times alone, loaded or not.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "-m", "pvlab.runtime", "pretrain",
                          "--config", "tiny", "--steps", "3", "--batch-size", "4", "--seq-len", "32",
                          "--documents", "300", "--eval-every", "3", "--strategy", "fsdp",
                          "--micro-batch-size", "1", "--out", str(out), "--quiet"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("wrote ") == 1                                   # rank 0 reports, once
    results = json.loads((out / "runtime.json").read_text())["results"]
    assert results["world_size"] == 2 and results["backend"] == "gloo" and results["strategy"] == "fsdp"
    assert results["accumulation_steps"] == 2                               # 4 rows / 2 ranks / 1 row
    assert (out / "sharded" / "trainer.json").is_file()
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out)
    logits = model(input_ids=torch.tensor([[1, 2, 3, 4]])).logits
    assert logits.shape == (1, 4, 512) and bool(torch.isfinite(logits).all())


@pytest.mark.parametrize("batch_size,world_size,micro_batch_size,per_rank", [
    (4, 2, None, 1), (4, 2, 1, 2), (8, 2, 2, 2), (8, 4, 2, 1),
    (4, 2, 3, None),   # a rank's 2 rows are not whole micro-batches of 3
    (5, 2, 1, None),   # the global batch does not split over the ranks
    (4, 2, 0, None),
])
def test_micro_batch_size_means_rows_per_forward_under_torchrun_too(batch_size, world_size, micro_batch_size,
                                                                    per_rank):
    from pvlab.runtime.cli import _micro_batches_per_rank

    if per_rank is None:
        with pytest.raises(ArgumentError, match="--micro-batch-size"):
            _micro_batches_per_rank(batch_size, world_size, micro_batch_size)
    else:
        assert _micro_batches_per_rank(batch_size, world_size, micro_batch_size) == per_rank


def test_the_old_accumulation_steps_option_is_refused_naming_its_replacement(tmp_path):
    from click.testing import CliRunner

    from pvlab.runtime.cli import main

    result = CliRunner().invoke(main, ["pretrain", "--accumulation-steps", "2", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--accumulation-steps was replaced by --micro-batch-size" in result.output
    assert not (tmp_path / "x").exists()
    assert "--accumulation-steps" not in CliRunner().invoke(main, ["pretrain", "--help"]).output  # hidden
