"""pvpack.checks.parity's greedy decode check judges both backends' decodes, on the tiny test
subject through the transformers adapter: a reference (CPU) decode that samples where greedy was
asked, beside a candidate that takes its own argmax, FAILs the contract's prediction — the mirror
of the bug hunt's GPU gibberish, which a check judging only the candidate let PASS (seen on an
H100: the planted bug greedy_decode_samples reaches the CPU decode only, because the CUDA-graph
decode takes its own argmax; agreeing_prefix 0, consistent_prefix 32)."""

from __future__ import annotations

import torch

from pv import harness, runtimes
from pvpack.adapters.transformers import TransformersAdapter, TransformersModel
from pvpack.checks import parity
from pvpack.protocol import REFERENCE

import pack_tiny

PREDICTION = "consistent_prefix >= 8"
PARAMS = {"prompts": 2, "prompt_tokens": 4, "new_tokens": 8}


class SamplingModel(TransformersModel):
    def generate(self, prompt, max_new_tokens):
        generator = torch.Generator().manual_seed(7)
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(max_new_tokens):
                logits = self.model(torch.tensor([ids])).logits[0, -1].float()
                ids.append(int(torch.multinomial(torch.softmax(logits / 4.0, -1), 1, generator=generator)))
        return ids[len(prompt):]


class ReferenceSamplesAdapter(TransformersAdapter):
    """The reference path's decode samples; the fast path is transformers' greedy generate."""

    def load(self, checkpoint, *, device, path=REFERENCE, **kwargs):
        model = super().load(checkpoint, device=device, path=path, **kwargs)
        if path == REFERENCE:
            model.__class__ = SamplingModel
        return model


def judge(subject, runtime):
    runtimes.configure({"hf": "pvpack.adapters.transformers:TransformersAdapter",
                        "hf-reference-samples": f"{__name__}:ReferenceSamplesAdapter"})
    harness.reset()
    try:
        harness.falsify(parity.greedy_decode_parity, params=PARAMS, prediction=PREDICTION, device="cpu",
                        falsifier="FALSIFY-T-001", subject=str(subject), runtime=runtime)
    except BaseException:  # noqa: BLE001 - the outcome says which
        pass
    finally:
        runtimes.configure(None)
    return harness.take_outcome()


def test_both_decodes_greedy_pass(tmp_path):
    outcome = judge(pack_tiny.subject(tmp_path), "hf")
    assert outcome.verdict == "PASS", outcome.message
    assert outcome.observations["reference_consistent_prefix"] == 8
    assert outcome.observations["candidate_consistent_prefix"] == 8


def test_a_reference_decode_that_samples_fails_though_the_candidate_is_greedy(tmp_path):
    outcome = judge(pack_tiny.subject(tmp_path), "hf-reference-samples")
    assert outcome.verdict == "FAIL", outcome.message
    assert outcome.observations["candidate_consistent_prefix"] == 8       # the fast path is right...
    assert outcome.observations["reference_consistent_prefix"] < 8        # ...the reference decode is not
    assert outcome.observations["agreeing_prefix"] < 8
