"""The transformers + Liger adapter where Liger cannot run (no CUDA, no triton, no liger-kernel
installed): its fast path is a SKIP naming why, never a pass and never a silent fallback; its
reference path is plain transformers; Liger's module-level rebindings stay scoped to the fast
model (tested with a stand-in patch function, as liger-kernel is not installed here)."""

from __future__ import annotations

import types

import pytest
import torch

from pvpack import subjects
from pvpack.adapters import liger
from pvpack.checks import forward
from pvpack.protocol import FAST, REFERENCE, CapabilityMissing, Runtime

import pack_tiny


@pytest.fixture
def subject_dir(tmp_path):
    return pack_tiny.subject(tmp_path)


def test_the_fast_path_on_the_cpu_is_a_skip_naming_triton_and_cuda(subject_dir):
    runtime = Runtime(liger.LigerAdapter(), "liger")
    with pytest.raises(CapabilityMissing) as missing:
        runtime.load(subjects.read(subject_dir).checkpoint, device="cpu", path=FAST)
    assert missing.value.capability == "fast_path"
    assert str(missing.value) == ("runtime 'liger' lacks capability 'fast_path': Liger's kernels are Triton kernels "
                                  "and need a CUDA GPU; the device is cpu")


def test_a_pack_check_on_the_fast_path_skips_through_pvs_harness_signal(subject_dir):
    from pv.harness import CapabilityMissing as HarnessSkip

    with pytest.raises(HarnessSkip, match="lacks capability 'fast_path'.*Triton"):
        forward.forward_sanity(runtime=liger.LigerAdapter(), device="cpu", subject=str(subject_dir), path=FAST)


@pytest.mark.skipif(torch.cuda.is_available(), reason="asserts the reason given on a machine without a GPU")
def test_on_cuda_without_a_gpu_the_reason_is_the_missing_gpu():
    assert liger.unavailable("cuda").startswith("no CUDA GPU on this machine")


def test_a_missing_package_is_named_with_its_install_command(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    real = liger.importlib.util.find_spec
    monkeypatch.setattr(liger.importlib.util, "find_spec",
                        lambda name, *a: None if name == "liger_kernel" else real(name, *a))
    assert liger.unavailable("cuda") == "liger_kernel is not installed (pip install liger-kernel)"


def test_the_reference_path_is_plain_transformers(subject_dir):
    runtime = Runtime(liger.LigerAdapter(), "liger")
    model = runtime.load(subjects.read(subject_dir).checkpoint, device="cpu", path=REFERENCE)
    assert type(model.model) is liger.hf.TransformersModel
    assert model.model.model.config._attn_implementation == "eager"
    assert runtime.version().startswith("transformers ") and " + liger-kernel" in runtime.version()


def test_liger_module_level_rebindings_are_active_only_around_the_fast_model():
    module = types.ModuleType("modeling_fake")
    module.apply_rotary_pos_emb = original_rope = object()
    module.FakeRMSNorm = original_norm = type("FakeRMSNorm", (), {})
    seen = {}

    def apply(*, model, rope, rms_norm, **_):
        seen["model"] = model
        module.apply_rotary_pos_emb = "liger rope"
        module.FakeRMSNorm = "LigerRMSNorm"
        module.added_by_liger = "new name"

    model = torch.nn.Linear(1, 1)
    patch = liger.ScopedPatch(module, apply, model, rope=True, rms_norm=True)
    assert seen["model"] is model
    assert module.apply_rotary_pos_emb is original_rope and module.FakeRMSNorm is original_norm
    assert not hasattr(module, "added_by_liger")
    with patch.active():
        assert (module.apply_rotary_pos_emb, module.FakeRMSNorm, module.added_by_liger) == (
            "liger rope", "LigerRMSNorm", "new name")
    assert module.apply_rotary_pos_emb is original_rope and module.FakeRMSNorm is original_norm
    assert not hasattr(module, "added_by_liger")


def test_a_failing_liger_patch_leaves_transformers_untouched():
    module = types.ModuleType("modeling_fake")
    module.apply_rotary_pos_emb = original = object()

    def apply(**_):
        module.apply_rotary_pos_emb = "half-applied"
        raise AssertionError("cross_entropy and fused_linear_cross_entropy cannot both be True.")

    with pytest.raises(AssertionError):
        liger.ScopedPatch(module, apply, torch.nn.Linear(1, 1))
    assert module.apply_rotary_pos_emb is original
