"""pvlab.falsifiers.performance: a GPU speed claim is never measured where it would not be evidence."""

from __future__ import annotations

import pytest
import torch

from pv.harness import DeviceUnavailable
from pvlab.falsifiers import performance


def test_a_gpu_claim_is_not_measured_on_the_cpu():
    with pytest.raises(DeviceUnavailable, match="nothing to measure on cpu"):
        performance.decode_speed_vs_cpu(device="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_no_gpu_is_device_unavailable_not_a_pass():
    with pytest.raises(DeviceUnavailable, match="no CUDA GPU"):
        performance.training_mfu(device="cuda", gpu="H100")


def test_a_claim_about_one_gpu_model_is_not_measured_on_another(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(DeviceUnavailable, match="about a H100.*A100"):
        performance.training_mfu(device="cuda", gpu="H100")


def test_an_mfu_claim_needs_a_known_peak(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA Mystery 9000")
    with pytest.raises(ValueError, match="no dense bf16 peak"):
        performance.training_mfu(device="cuda", gpu="Mystery")
