"""pvpack.checks.roundtrip: a trained model saved and loaded by the same runtime comes back bit for
bit on pvlab and on transformers (tiny-trained, CPU), and defects of the class reported on
transformers' own save and load (pvpack.adapters.transformers)."""

from __future__ import annotations

import pytest
import torch

from pvpack.checks import roundtrip

CALL = dict(device="cpu", subject="tiny-trained", path="reference", steps=2, lr=1e-3, rows=2)


def holds(seen: dict) -> bool:
    """FALSIFY-CHECKPOINT-RELOAD-001's prediction."""
    return (seen["missing_tensors"] == 0 and seen["extra_tensors"] == 0 and seen["dtype_changes"] == 0
            and seen["shape_changes"] == 0 and seen["state_max_abs_diff"] == 0
            and seen["logits_max_abs_diff"] <= 1e-6 * seen["logits_max_abs_ref"]
            and seen["trained_vs_subject"] > 0 and seen["tensors"] >= 1)


@pytest.mark.parametrize("runtime", ["pvlab", "transformers"])
def test_a_round_trip_is_exact(runtime):
    seen = roundtrip.saved_model_reloads_exactly(runtime=runtime, **CALL)
    assert holds(seen), seen


def _hf_save_through(monkeypatch, change):
    """The transformers adapter's save writes `change(state_dict)` instead of its weights."""
    from pvpack.adapters import transformers as adapter

    def save(self, directory):
        state = {name: change(name, tensor.detach().clone()) for name, tensor in self.model.state_dict().items()}
        self.model.save_pretrained(str(directory), state_dict=state, safe_serialization=True)

    monkeypatch.setattr(adapter.TransformersModel, "save", save)


def test_weights_saved_in_bfloat16_are_reported(monkeypatch):
    _hf_save_through(monkeypatch, lambda name, t: t.to(torch.bfloat16).to(t.dtype))
    seen = roundtrip.saved_model_reloads_exactly(runtime="transformers", **CALL)
    assert not holds(seen) and seen["state_max_abs_diff"] > 0


def test_a_bias_left_out_of_the_save_is_reported(monkeypatch):
    """A different defect: the Q projection's biases zeroed on save (an optional tensor written
    as a default); the reload differs where they were."""
    _hf_save_through(monkeypatch, lambda name, t: torch.zeros_like(t) if name.endswith("q_proj.bias") else t)
    seen = roundtrip.saved_model_reloads_exactly(runtime="transformers", **CALL)
    assert not holds(seen) and seen["logits_max_abs_diff"] > 0


def test_a_load_that_reopens_the_subject_is_reported(monkeypatch):
    """The reload ignores the directory it is given and opens the subject's own checkpoint: every
    tensor differs by what training moved (trained_vs_subject shows the steps did move them)."""
    from pvpack.adapters import transformers as adapter
    from pvpack.subjects import resolve

    original = adapter.TransformersAdapter.load
    subject = resolve("tiny-trained").checkpoint

    def load(self, checkpoint, **kwargs):
        return original(self, subject, **kwargs)

    monkeypatch.setattr(adapter.TransformersAdapter, "load", load)
    seen = roundtrip.saved_model_reloads_exactly(runtime="transformers", **CALL)
    assert not holds(seen) and seen["state_max_abs_diff"] == pytest.approx(seen["trained_vs_subject"])
