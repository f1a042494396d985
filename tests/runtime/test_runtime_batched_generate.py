"""Batched generation with left padding (runtime.generate.generate_batch, kernels.positions_from_attention_mask /
padded_causal_mask): each row decodes as it does alone; transformers' own left-padded generate is
the independent reference."""

from __future__ import annotations

import pytest
import torch

from pvlab import runtime
from pvlab.runtime import kernels
from pvlab.runtime.errors import GenerationError
from runtime_helpers import randomise

PROMPTS = [[5, 17, 3], [9, 40, 2, 33, 7, 101, 12], [250, 4, 8, 15, 16]]


def _model(path="reference", seed=0):
    model = runtime.init_model(config="tiny", weights="random", seed=seed, path=path, parity_gate=False)
    randomise(model, seed)
    return model


def test_positions_count_real_tokens_and_padding_is_never_attended():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert kernels.positions_from_attention_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
    allowed = kernels.padded_causal_mask(mask, 5)[:, 0]                               # (B, T, S)
    assert not allowed[0, 2:, :2].any()                      # real queries never see the padding
    assert allowed[0, 0, 0] and allowed[0, 1, 1]            # a padding query sees itself (finite softmax)
    assert torch.equal(allowed[1], torch.ones(5, 5, dtype=torch.bool).tril())


@pytest.mark.parametrize("path", ["reference", "fast"])
def test_batch_rows_decode_as_they_do_alone(path):
    model = _model(path)
    batched = runtime.generate_batch(model, PROMPTS, max_new_tokens=10, output_logits=True)
    for prompt, row in zip(PROMPTS, batched):
        alone = runtime.generate(model, prompt, max_new_tokens=10, output_logits=True)
        assert row.new_ids == alone.new_ids
        tolerance = 2e-2 * float(alone.logits.abs().max()) if path == "fast" else 1e-4
        assert float((row.logits - alone.logits).abs().max()) <= tolerance


def test_a_row_stops_at_eos_while_the_others_continue():
    model = _model()
    first = runtime.generate(model, PROMPTS[0], max_new_tokens=6)
    eos = first.new_ids[2]
    rows = runtime.generate_batch(model, PROMPTS, max_new_tokens=6, eos_token_id=eos)
    assert rows[0].stopped_on_eos and rows[0].new_ids == first.new_ids[:first.new_ids.index(eos) + 1]
    for prompt, row in zip(PROMPTS[1:], rows[1:]):
        assert row.new_ids == runtime.generate(model, prompt, max_new_tokens=6, eos_token_id=eos).new_ids


def test_batched_requests_are_checked():
    model = _model()
    with pytest.raises(GenerationError):
        runtime.generate_batch(model, [], max_new_tokens=2)
    with pytest.raises(GenerationError):
        runtime.generate_batch(model, [[1, 2], []], max_new_tokens=2)


@pytest.mark.slow
def test_matches_transformers_left_padded_generate(hf_qwen2_dir):
    """transformers builds its position ids from the attention mask itself: an independent oracle."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(hf_qwen2_dir, dtype=torch.float32).eval()
    model = runtime.load(hf_qwen2_dir)
    prompts = [[5, 17, 3], [9, 40, 2, 33, 7, 101, 12]]
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        expected = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                               pad_token_id=0, eos_token_id=None)[:, width:]
    rows = runtime.generate_batch(model, prompts, max_new_tokens=8)
    assert [r.new_ids for r in rows] == expected.tolist()
