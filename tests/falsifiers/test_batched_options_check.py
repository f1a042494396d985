"""pvlab.falsifiers.batched_options (FALSIFY-BATCHED-OPTIONS-001, -002): hold on the runtime,
are false under the sixth blind batch's batch_sampling_ignores_top_k and
batch_text_generation_ignores_stop_at_eos, and report another option the batched API loses
(generate_batch running one row past max_new_tokens; generate_texts ignoring temperature)."""

from __future__ import annotations

import importlib

from falsifier_helpers import observe
from pvlab.falsifiers.mutants import registry

CONTRACT = "batched-options"
EXACT, LAW = "FALSIFY-BATCHED-OPTIONS-001", "FALSIFY-BATCHED-OPTIONS-002"
TOP_K, STOP = "batch_sampling_ignores_top_k", "batch_text_generation_ignores_stop_at_eos"


def test_rows_agree_on_the_runtime_and_both_planted_bugs_are_reported():
    observations, judgement = observe(CONTRACT, EXACT)
    assert judgement.holds, observations
    assert observations["mismatch"] == ""
    with registry()[TOP_K]():
        observations, judgement = observe(CONTRACT, EXACT)
    # every sampled (top_k = 1) ids and texts row draws from the whole vocabulary
    assert not judgement.holds and observations["mismatching_rows"] > 0
    assert "top_k=1" in observations["mismatch"]
    with registry()[STOP]():
        observations, judgement = observe(CONTRACT, EXACT)
    # texts with stop_at_eos=False stop at eos anyway: exactly the rows the oracle carries past it
    assert not judgement.holds
    assert observations["mismatching_rows"] == observations["rows_running_past_eos"]
    assert observations["mismatch"].startswith("texts") and "stop_at_eos=False" in observations["mismatch"]


def test_a_row_run_past_max_new_tokens_is_reported(monkeypatch):
    generate = importlib.import_module("pvlab.runtime.generate")
    original = generate.generate_batch

    def last_row_one_token_long(model, prompts, *, max_new_tokens, **kwargs):
        # the last row's loop bound off by one: it gets max_new_tokens + 1 tokens unless it stopped
        results = original(model, prompts, max_new_tokens=max_new_tokens + 1, **kwargs)
        for result in results[:-1]:
            if len(result.new_ids) > max_new_tokens:
                result.new_ids, result.stopped_on_eos = result.new_ids[:max_new_tokens], False
        return results

    monkeypatch.setattr(generate, "generate_batch", last_row_one_token_long)
    observations, judgement = observe(CONTRACT, EXACT)
    assert not judgement.holds and observations["mismatching_rows"] > 0
    assert "row 2" in observations["mismatch"]


def test_law_holds_on_the_runtime_and_fails_without_top_k():
    observations, judgement = observe(CONTRACT, LAW)
    assert judgement.holds, observations
    assert observations["max_tv"] < observations["tv_bound"]
    with registry()[TOP_K]():
        observations, judgement = observe(CONTRACT, LAW)
    assert not judgement.holds
    assert observations["outside_top_k"] > 0 and observations["support_outside"] > 0


def test_generate_texts_ignoring_temperature_is_reported(monkeypatch):
    generate = importlib.import_module("pvlab.runtime.generate")
    original = generate.generate_texts

    def samples_at_one(model, tokenizer, prompts, **kwargs):
        if kwargs.get("temperature", 0) > 0:
            kwargs["temperature"] = 1.0   # the defect: the caller's temperature never reaches the sampler
        return original(model, tokenizer, prompts, **kwargs)

    monkeypatch.setattr(generate, "generate_texts", samples_at_one)
    observations, judgement = observe(CONTRACT, LAW)
    # still inside the top k, but the law is softmax(logits / 1), not softmax(logits / T)
    assert observations["outside_top_k"] == 0 and observations["support_outside"] == 0
    assert observations["max_tv"] > observations["tv_bound"] and not judgement.holds
