"""pvlab.falsifiers.context_limit (FALSIFY-ARGUMENT-DOMAINS-007): holds on the runtime, false
under generation_runs_past_context, and reports a second defect of the class: an off-by-one
limit that refuses a request filling the context exactly."""

from __future__ import annotations

import importlib

from falsifier_helpers import assert_holds_and_killed, observe

CONTRACT, FALSIFIER, BUG = "argument-domains", "FALSIFY-ARGUMENT-DOMAINS-007", "generation_runs_past_context"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_it_reports_a_limit_one_token_short(monkeypatch):
    generation = importlib.import_module("pvlab.runtime.generate")
    errors = importlib.import_module("pvlab.runtime.errors")
    original = generation._check_request

    def check_request(model, prompt, max_new_tokens, temperature):
        original(model, prompt, max_new_tokens, temperature)
        if len(prompt) + max_new_tokens >= model.config.max_position_embeddings:   # ">=": one short
            raise errors.PromptTooLongError("off by one")

    monkeypatch.setattr(generation, "_check_request", check_request)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    assert observations["wrong_refusals"] > 0 and observations["wrong_acceptances"] == 0
