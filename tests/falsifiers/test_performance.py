"""pvlab.falsifiers.performance: a GPU speed claim is never measured where it would not be evidence."""

from __future__ import annotations

import pytest
import torch

from pv.harness import DeviceUnavailable
from pvlab.falsifiers import performance, speed_vs_transformers

# Every timed claim about a named GPU goes through the same gate (performance._gpu_named).
GPU_CLAIMS = [performance.training_mfu, speed_vs_transformers.training_and_eval_vs_transformers]


@pytest.mark.parametrize("claim", [performance.decode_speed_vs_cpu, *GPU_CLAIMS], ids=lambda claim: claim.__name__)
def test_a_gpu_claim_is_not_measured_on_the_cpu(claim):
    with pytest.raises(DeviceUnavailable, match="nothing to measure on cpu"):
        claim(device="cpu", gpu="H100")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("claim", GPU_CLAIMS, ids=lambda claim: claim.__name__)
def test_no_gpu_is_device_unavailable_not_a_pass(claim):
    with pytest.raises(DeviceUnavailable, match="no CUDA GPU"):
        claim(device="cuda", gpu="H100")


@pytest.mark.parametrize("claim", GPU_CLAIMS, ids=lambda claim: claim.__name__)
def test_a_claim_about_one_gpu_model_is_not_measured_on_another(monkeypatch, claim):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(DeviceUnavailable, match="about a H100.*A100"):
        claim(device="cuda", gpu="H100")


def test_an_mfu_claim_needs_a_known_peak(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA Mystery 9000")
    with pytest.raises(ValueError, match="no dense bf16 peak"):
        performance.training_mfu(device="cuda", gpu="Mystery")
