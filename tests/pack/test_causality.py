"""pvpack.checks.causality: the future changes no logit of the past, on pvlab's runtime and on
transformers (tiny-trained, CPU), and the defects of the class reported on transformers' own
attention (a mask one key too wide, no mask) and on a whole-row computation."""

from __future__ import annotations

import pytest
import torch

from pvpack.checks import causality

CALL = dict(device="cpu", subject="tiny-trained", path="reference", cuts=4, rows=4, seed=0)


def holds(seen: dict) -> bool:
    """FALSIFY-CAUSAL-LOGITS-001's prediction."""
    return (seen["leaked_positions"] == 0 and seen["max_abs_diff_before"] <= seen["tol"]
            and seen["changed_at_cut"] >= 0.9 and seen["cuts"] == 4)


def test_cut_points_and_replacements():
    assert causality.cut_points(128, 4) == [1, 43, 85, 127]
    assert causality.cut_points(3, 4) == [1, 2]
    with pytest.raises(ValueError):
        causality.cut_points(1, 4)
    inputs = torch.arange(20).reshape(2, 10) % 7
    changed = causality.replaced_after(inputs, 4, 7, torch.Generator().manual_seed(0))
    assert torch.equal(changed[:, :4], inputs[:, :4]) and bool((changed[:, 4:] != inputs[:, 4:]).all())
    assert int(changed.max()) < 7


@pytest.mark.parametrize("runtime", ["pvlab", "transformers"])
def test_a_causal_model_passes(runtime):
    seen = causality.future_tokens_change_nothing_before(runtime=runtime, **CALL)
    assert holds(seen) and seen["changed_at_cut"] == 1.0, seen


def _hf_mask_widened(monkeypatch, extra: int):
    """transformers' eager attention with its mask widened by `extra` keys (every key when None)."""
    from transformers.models.qwen2 import modeling_qwen2

    original = modeling_qwen2.eager_attention_forward

    def eager(module, query, key, value, attention_mask, **kwargs):
        if attention_mask is not None:
            length = attention_mask.shape[-1]
            if extra is None:
                attention_mask = torch.zeros_like(attention_mask)
            else:
                allowed = torch.ones(length, length, dtype=torch.bool).tril(extra)
                attention_mask = torch.where(allowed[-attention_mask.shape[-2]:], 0.0,
                                             torch.finfo(attention_mask.dtype).min).to(attention_mask.dtype)
        return original(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setattr(modeling_qwen2, "eager_attention_forward", eager)


def test_a_mask_one_key_too_wide_in_transformers_is_reported_at_offset_one(monkeypatch):
    _hf_mask_widened(monkeypatch, 1)
    seen = causality.future_tokens_change_nothing_before(runtime="transformers", **CALL)
    assert not holds(seen) and seen["first_leak_offset"] == 1


def test_no_mask_in_transformers_is_reported(monkeypatch):
    _hf_mask_widened(monkeypatch, None)
    seen = causality.future_tokens_change_nothing_before(runtime="transformers", **CALL)
    assert not holds(seen) and seen["leaked_positions"] > 100


def test_a_whole_row_statistic_is_reported(monkeypatch):
    """A defect of another kind: the embeddings centred by their mean over the sequence (a
    normalisation over the wrong axis), which reads every position."""
    from pvpack.adapters import transformers as adapter

    original = adapter.TransformersModel._forward

    def forward(self, inputs):
        embed = self.model.get_input_embeddings()
        hook = embed.register_forward_hook(lambda module, args, out: out - out.mean(dim=1, keepdim=True))
        try:
            return original(self, inputs)
        finally:
            hook.remove()

    monkeypatch.setattr(adapter.TransformersModel, "_forward", forward)
    assert not holds(causality.future_tokens_change_nothing_before(runtime="transformers", **CALL))
