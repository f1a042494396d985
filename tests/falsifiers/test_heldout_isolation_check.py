"""pvlab.falsifiers.heldout_isolation (FALSIFY-HELDOUT-ISOLATION-001): holds on the runtime, false
under tokenizer_trained_on_heldout_documents, and reports another leak of held-out text into
what the model is trained with."""

from __future__ import annotations

import importlib

import torch

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers.mutants import registry

CONTRACT, FALSIFIER, BUG = "heldout-isolation", "FALSIFY-HELDOUT-ISOLATION-001", "tokenizer_trained_on_heldout_documents"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_it_sees_the_canary_merged_and_the_split_it_expects():
    observations, _ = observe(CONTRACT, FALSIFIER)
    assert observations["split_mismatches"] == 0 and observations["heldout_documents"] == 3
    assert observations["canary_tokens"] == observations["canary_tokens_without"] == 9
    with registry()[BUG]():
        observations, _ = observe(CONTRACT, FALSIFIER)
    assert observations["split_mismatches"] == 0          # the split stays the documented one
    assert observations["tokenizer_changed"] == 2 and observations["canary_tokens"] < 9


def test_it_reports_a_heldout_document_copied_into_the_training_stream(monkeypatch):
    """Another leak, with the tokenizer fitted as it should be: the first held-out document's
    tokens appended to the training stream."""
    pretrain = importlib.import_module("pvlab.runtime.pretrain")
    from pvlab.runtime import data

    original = pretrain.prepare_data

    def leaking(recipe, *, vocab_size, tokenizer=None):
        prepared = original(recipe, vocab_size=vocab_size, tokenizer=tokenizer)
        leaked = data.token_stream(data.encode_documents(prepared.tokenizer, prepared.heldout_documents[:1]))
        prepared.train_stream = torch.cat([prepared.train_stream, leaked])
        return prepared

    monkeypatch.setattr(pretrain, "prepare_data", leaking)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    assert observations["train_stream_changed"] == 2 and observations["tokenizer_changed"] == 0
