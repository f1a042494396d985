"""pvlab.falsifiers.hf_config_reading (FALSIFY-HF-CONFIG-001): holds on the runtime, false under
eos_token_list_read_as_none, and reports a field read differently from transformers."""

from __future__ import annotations

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers.mutants import registry

CONTRACT, FALSIFIER, BUG = "hf-config-reading", "FALSIFY-HF-CONFIG-001", "eos_token_list_read_as_none"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_it_sees_each_eos_list_lost_and_the_generation_that_never_stops():
    with registry()[BUG]():
        observations, _ = observe(CONTRACT, FALSIFIER)
    # three configs list their eos ids (Qwen2-7B-Instruct, Llama-3-8B-Instruct, tiny list) and
    # the tiny list's generation runs on to max_new_tokens
    assert observations["eos_mismatches"] == 4 and observations["field_mismatches"] == 0


def test_an_ignored_rope_theta_is_a_field_mismatch(monkeypatch):
    from pvlab.runtime import config

    monkeypatch.setattr(config, "_read_rope_theta", lambda hf, source: 10000.0)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    # every config sets a theta other than 10000 (1e6, 1e6, 5e5, 2.5e5, and 5e5 in the three tiny ones)
    assert observations["field_mismatches"] == 7 and observations["eos_mismatches"] == 0
    assert "rope_theta: runtime 10000.0, transformers 1000000.0" in observations["mismatched"]
