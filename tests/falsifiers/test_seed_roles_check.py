"""pvlab.falsifiers.seed_roles (FALSIFY-SEEDED-SPLITS-002): holds on the runtime, false under
heldout_split_seeded_by_model_seed, and reports a second wiring defect of the class: the initial
weights drawn from the data seed."""

from __future__ import annotations

import importlib

from falsifier_helpers import assert_holds_and_killed, observe

CONTRACT, FALSIFIER, BUG = "seeded-splits", "FALSIFY-SEEDED-SPLITS-002", "heldout_split_seeded_by_model_seed"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_it_reports_initial_weights_drawn_from_the_data_seed(monkeypatch):
    """Another defect: init_model handed the data seed (`seed=recipe.data_seed`)."""
    checkpoint = importlib.import_module("pvlab.runtime.checkpoint")
    pretrain = importlib.import_module("pvlab.runtime.pretrain")
    original_init, original_pretrain = checkpoint.init_model, pretrain.pretrain
    seen = {}

    def pretrain_remembering_the_recipe(recipe, *args, **kwargs):
        seen["data_seed"] = recipe.data_seed
        return original_pretrain(recipe, *args, **kwargs)

    def init_from_data_seed(*args, seed=0, **kwargs):
        return original_init(*args, seed=seen.get("data_seed", seed), **kwargs)

    monkeypatch.setattr(pretrain, "pretrain", pretrain_remembering_the_recipe)
    monkeypatch.setattr(checkpoint, "init_model", init_from_data_seed)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert not judgement.holds
    assert observations["init_moved_by_data_seed"] > 0 and observations["init_moved_by_model_seed"] == 0
