"""The checks written against the second blind batch of planted bugs (issue #12 item 5):
data_pipeline, decoding_controls, build_identity, gates. Each falsifier holds on the runtime as
it is (CPU), and FAILS on a broken runtime function built here — a defect of the same class as
the planted bug, but not that bug's code (the planted bugs themselves are measured by
`pv strength`)."""

from __future__ import annotations

import importlib

import pytest
import torch

from falsifier_helpers import observe
from pvlab.falsifiers import fixtures
from pvlab.runtime import config, corpus, data, parity, subjects

pytestmark = pytest.mark.slow

CHEAP = [("data-pipeline", "FALSIFY-DATA-PIPELINE-001"), ("data-pipeline", "FALSIFY-DATA-PIPELINE-002"),
         ("data-pipeline", "FALSIFY-DATA-PIPELINE-003"), ("data-pipeline", "FALSIFY-DATA-PIPELINE-004"),
         ("decoding-controls", "FALSIFY-DECODING-CONTROLS-001"), ("build-identity", "FALSIFY-BUILD-IDENTITY-002"),
         ("input-gates", "FALSIFY-INPUT-GATES-001"), ("input-gates", "FALSIFY-INPUT-GATES-002")]


@pytest.fixture(autouse=True)
def _fresh_fixtures():
    fixtures.checkpoint_dir("tiny-trained")
    fixtures.clear()
    yield
    fixtures.clear()


@pytest.mark.parametrize("contract_id,falsifier_id", CHEAP)
def test_holds_on_the_runtime(contract_id, falsifier_id):
    observations, judgement = observe(contract_id, falsifier_id)
    assert judgement.holds, (falsifier_id, observations)


def _fails(contract_id, falsifier_id):
    observations, judgement = observe(contract_id, falsifier_id)
    assert not judgement.holds, (falsifier_id, observations)


def test_padding_scored_with_any_id_is_seen(monkeypatch):
    original = data.LMBatch.from_sequences.__func__

    def from_sequences(cls, sequences, *, pad_id=0):
        batch = original(cls, sequences, pad_id=pad_id)
        return cls(inputs=batch.inputs, targets=batch.targets.masked_fill(batch.targets == -100, 7))

    monkeypatch.setattr(data.LMBatch, "from_sequences", classmethod(from_sequences))
    _fails("data-pipeline", "FALSIFY-DATA-PIPELINE-001")


def test_a_doubled_terminator_is_seen(monkeypatch):
    original = data.encode_documents
    monkeypatch.setattr(data, "encode_documents",
                        lambda tokenizer, documents: [ids + [ids[-1]] for ids in original(tokenizer, documents)])
    _fails("data-pipeline", "FALSIFY-DATA-PIPELINE-002")


def test_windows_that_skip_the_first_token_are_seen(monkeypatch):
    original = data.sequential_batches
    monkeypatch.setattr(data, "sequential_batches", lambda stream, **kw: original(stream[1:], **kw))
    _fails("data-pipeline", "FALSIFY-DATA-PIPELINE-003")


def test_a_split_three_times_too_large_is_seen(monkeypatch):
    original = corpus.split_by_path
    monkeypatch.setattr(corpus, "split_by_path",
                        lambda c, *, val_fraction, seed: original(c, val_fraction=3 * val_fraction, seed=seed))
    _fails("data-pipeline", "FALSIFY-DATA-PIPELINE-004")


def test_a_stop_one_token_late_is_seen(monkeypatch):
    module = importlib.import_module("pvlab.runtime.generate")
    original = module.generate

    def generate(model, prompt_ids, **kwargs):
        result = original(model, prompt_ids, **{**kwargs, "eos_token_id": None})
        eos = kwargs.get("eos_token_id")
        if eos is not None and eos in result.new_ids:
            result.new_ids = result.new_ids[:result.new_ids.index(eos) + 2]
            result.stopped_on_eos = True
        return result

    monkeypatch.setattr(module, "generate", generate)
    _fails("decoding-controls", "FALSIFY-DECODING-CONTROLS-001")


def test_a_key_without_the_recipe_is_seen(monkeypatch):
    monkeypatch.setattr(subjects.Subject, "key", lambda self, recipe=None: f"{self.name}/{self.device}/{self.path}")
    _fails("build-identity", "FALSIFY-BUILD-IDENTITY-002")


def test_a_gate_averaging_positions_is_seen(monkeypatch):
    def compare_logits(reference, candidate, *, device, path):
        cosine = torch.nn.functional.cosine_similarity(reference.float().flatten(0, -2),
                                                       candidate.float().flatten(0, -2), dim=-1)
        return parity.ParityReport(device=device, path=path, probe_tokens=cosine.numel(),
                                   min_cosine=float(cosine.mean()), max_abs_diff=0.0, argmax_agreement=1.0)

    monkeypatch.setattr(parity, "compare_logits", compare_logits)
    _fails("input-gates", "FALSIFY-INPUT-GATES-001")


def test_a_wrong_default_eps_is_seen(monkeypatch):
    original = config.ModelConfig.from_hf_dict.__func__

    def from_hf_dict(cls, hf, *, source="config"):
        return original(cls, {k: v for k, v in hf.items() if k != "rms_norm_eps"}, source=source)

    monkeypatch.setattr(config.ModelConfig, "from_hf_dict", classmethod(from_hf_dict))
    _fails("input-gates", "FALSIFY-INPUT-GATES-002")
