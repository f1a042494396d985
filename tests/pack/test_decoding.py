"""pvpack.checks.decoding: greedy decoding up to and past the context window against the textbook
greedy loop over the runtime's own logits, on pvlab's runtime (which refuses past its window) and
on transformers (which extends its positions), tiny-trained on the CPU; and a decode loop that
crops its window from the start, planted in the transformers adapter, reported past the window
only."""

from __future__ import annotations

import pytest
import torch

from pvpack.adapters import transformers as hf_adapter
from pvpack.checks import decoding
from pvpack.protocol import Batch

CALL = dict(device="cpu", subject="tiny-trained", path="reference", prompts=2, overhang=6, rtol=1e-4, atol=1e-5)


def holds(seen: dict) -> bool:
    """FALSIFY-DECODE-WINDOW-001's prediction."""
    return (seen["inside_inconsistent"] == 0 and seen["past_inconsistent"] == 0
            and seen["inside_tokens"] >= seen["prompts"] * seen["overhang"]
            and ((seen["refused"] == seen["prompts"] and seen["past_window_tokens"] == 0)
                 or (seen["refused"] == 0 and seen["past_window_tokens"] >= seen["prompts"])))


def test_context_length_and_prompts():
    assert decoding.context_length({"max_position_embeddings": 256, "max_seq_len": 64}) == (256, "max_position_embeddings")
    assert decoding.context_length({"max_seq_len": 64}) == (64, "max_seq_len")
    assert decoding.context_length({"n_ctx": 1024}, context=32) == (32, "param")
    with pytest.raises(RuntimeError, match="context length"):
        decoding.context_length({"vocab_size": 64})
    batches = [Batch(torch.arange(12).view(2, 6), torch.arange(12).view(2, 6))]
    assert decoding.held_out_prompts(batches, 2, 5) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    with pytest.raises(RuntimeError, match="need 13"):
        decoding.held_out_prompts(batches, 1, 13)


def test_pvlab_decodes_up_to_its_window_and_refuses_past_it():
    seen = decoding.decode_across_context_window(runtime="pvlab", **CALL)
    assert holds(seen) and seen["refused"] == 2 and seen["inside_tokens"] == 12, seen


def test_transformers_decodes_past_its_window_on_the_whole_sequence():
    seen = decoding.decode_across_context_window(runtime="transformers", **CALL)
    assert holds(seen) and seen["past_full_context"] == 10 and seen["past_sliding_window"] == 0, seen


def test_a_window_cropped_from_the_start_is_reported_past_the_window(monkeypatch):
    """The transformers adapter's decode replaced by a loop over the model's logits whose context
    is the first L tokens (nanotrainer's planted nano_generate_window_keeps_oldest, in another
    runtime): exact up to the window, stale past it."""

    def generate(self, prompt, max_new_tokens):
        limit = self.model.config.max_position_embeddings
        ids = list(prompt)
        for _ in range(max_new_tokens):
            ids.append(int(self.logits(torch.tensor([ids[:limit]]))[0, -1].argmax()))
        return ids[len(prompt):]

    monkeypatch.setattr(hf_adapter.TransformersModel, "generate", generate)
    seen = decoding.decode_across_context_window(runtime="transformers", **CALL)
    assert not holds(seen) and seen["inside_inconsistent"] == 0 and seen["past_inconsistent"] >= 1, seen
