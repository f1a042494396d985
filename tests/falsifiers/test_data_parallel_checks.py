"""The data-parallel checks end to end through their ranks. Each falsifier's clean PASS is
generated_tests/test_distributed_training.py (run by ./dev test) and each declared planted bug's
kill is `pv strength --contract distributed-training`; these tests pin what neither shows: that
the observations name the distribution, that a bug planted in the check's process changes what
the ranks compute, and that a rank that cannot run makes the check raise (ERROR), not pass."""

from __future__ import annotations

import pytest

from falsifier_helpers import observe
from pvlab.falsifiers import launch
from pvlab.falsifiers.mutants import registry

pytestmark = pytest.mark.slow  # starts two ranks per call (tens of seconds on two busy cores)

CONTRACT = "distributed-training"


def test_shards_pass_clean_and_fail_when_every_rank_reads_the_same_shard():
    clean, judged = observe(CONTRACT, "FALSIFY-DIST-SHARD-001")
    assert judged.holds and clean["world_size"] == 2 and clean["backend"] == "gloo"
    with registry()["every_rank_reads_the_same_shard"]():
        broken, judged = observe(CONTRACT, "FALSIFY-DIST-SHARD-001")
    assert not judged.holds
    assert broken["shard_overlap"] > 0 and broken["shard_covered"] < broken["shard_expected"]


def test_a_check_whose_ranks_cannot_start_raises():
    # world size 2 with a per-rank batch that cannot fill one global batch: the ranks raise
    with pytest.raises(launch.RankFailed, match="DataError"):
        observe(CONTRACT, "FALSIFY-DIST-SHARD-001", batch_size=10_000)


def test_fewer_gpus_than_ranks_is_a_skip_not_a_failing_rank(monkeypatch):
    # Seen on a one-GPU H100: rank 1 raised "LOCAL_RANK 1 but only 1 GPU(s)" and every check
    # ERRORed. A machine that cannot hold the ranks cannot run the claim: DeviceUnavailable.
    import torch

    from pv.harness import DeviceUnavailable
    from pvlab.falsifiers import data_parallel

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(launch, "run_ranks", lambda *a, **k: pytest.fail("ranks started on too few GPUs"))
    with pytest.raises(DeviceUnavailable, match="2 ranks on cuda need 2 GPUs"):
        data_parallel._launch(lambda: None, "cuda", 2, 10.0)
