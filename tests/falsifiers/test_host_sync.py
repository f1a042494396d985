"""pvlab.falsifiers.host_sync: the host-read counter sees every way a tensor's value reaches
Python, and nothing else."""

from __future__ import annotations

import pytest
import torch

from pvlab.falsifiers import host_sync
from pv.harness import DeviceUnavailable


def test_every_kind_of_value_read_is_counted_and_device_work_is_not():
    x = torch.arange(6.0)
    with host_sync.HostReads() as seen:
        y = (x * 2).sum()                     # device work: no read
        torch.isfinite(x).all()
        y.item(), float(y), int(y), bool(y > 0), x.tolist()
    assert sorted(seen.reads) == sorted(["item", "__float__", "__int__", "__bool__", "tolist"])


def test_the_cuda_sync_count_is_refused_without_cuda():
    with pytest.raises(DeviceUnavailable):
        host_sync.training_step_device_syncs(device="cpu")
