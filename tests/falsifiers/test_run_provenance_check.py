"""pvlab.falsifiers.run_provenance (FALSIFY-REPORTED-RESULTS-002): holds on the runtime, false
under saved_meta_prefers_loaded_model_meta, and reports a second defect of the class: a continued
run whose recorded results are the base run's."""

from __future__ import annotations

import importlib

from falsifier_helpers import assert_holds_and_killed, observe

CONTRACT, FALSIFIER, BUG = "reported-results", "FALSIFY-REPORTED-RESULTS-002", "saved_meta_prefers_loaded_model_meta"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_it_reports_results_kept_from_the_base_run(monkeypatch):
    """Another defect: only `results` is taken from the loaded metadata (the recipe is right)."""
    trainer = importlib.import_module("pvlab.runtime.trainer")
    original = vars(trainer.Trainer)["save"]

    def save(self, directory, *, runtime_meta=None):
        loaded = getattr(self.model, "runtime_meta", None) or {}
        meta = dict(runtime_meta or {})
        if "results" in loaded:
            meta["results"] = loaded["results"]
        return original(self, directory, runtime_meta=meta)

    monkeypatch.setattr(trainer.Trainer, "save", save)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    assert observations["results_wrong"] == 1 and observations["recipe_fields_wrong"] == 0
