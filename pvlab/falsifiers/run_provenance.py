"""A checkpoint written by a run that started from another checkpoint reports its own run.

runtime.pretrain.pretrain(recipe, out, init=base) continues a saved model (a fine-tune, or a
second stage of pretraining) and writes `out`, whose runtime.json is what a reader, and `eval`,
take for that checkpoint: the recipe it was trained with, that recipe's digest and its results.
A model loaded from `base` still carries base's runtime.json. A save that lets it win over the
new run's metadata writes a well-formed, plausible runtime.json with base's recipe and losses.
`eval` then rebuilds base's held-out split for the new model. Runs from scratch carry no loaded
metadata and never show it, so the check runs a continued run.

The oracle is the recipe the check passes and the results pretrain returns for that call, each
written by the check or returned to it, not read back from the runtime's files.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import tempfile
from pathlib import Path


def _recipe(pretrain, **overrides):
    base = dict(config="tiny", steps=2, num_documents=40, val_fraction=0.2, batch_size=2, seq_len=32,
                eval_every=2, eval_batches=1, lr=3e-3, warmup_steps=0, seed=0, data_seed=0)
    base.update(overrides)
    return pretrain.Recipe(**base)


def _differing_fields(recorded: dict, recipe) -> int:
    expected = dataclasses.asdict(recipe)
    return sum(recorded.get(name) != value for name, value in expected.items()) + len(set(recorded) - set(expected))


def continued_run_reports_itself(*, device: str = "cpu") -> dict:
    """A base run (tiny preset, 2 steps, lr 3e-3) and a run continued from it with another
    recipe (3 steps, lr 1e-3, seed 5), each into a temporary directory; each checkpoint's
    runtime.json against the recipe the check passed and the results pretrain returned.

    Observations: runs (2); recipe_fields_wrong (fields of the recorded recipes that are not the
    recipe passed, over both runs); digest_wrong (runs whose recipe_digest is not the passed
    recipe's digest); results_wrong (runs whose recorded results are not the ones pretrain
    returned); continued_steps (the continued run's recorded step count)."""
    if device != "cpu":
        raise ValueError(f"what a run records is host code; device {device!r} is not judged here")
    pretrain = importlib.import_module("pvlab.runtime.pretrain")   # read at call time: planted bugs swap it

    recipes = {"base": _recipe(pretrain), "continued": _recipe(pretrain, steps=3, lr=1e-3, seed=5)}
    fields_wrong = digest_wrong = results_wrong = 0
    continued_steps = -1
    with tempfile.TemporaryDirectory(prefix="pv-provenance-") as tmp:
        base_dir = Path(tmp) / "base"
        for name, recipe in recipes.items():
            out = Path(tmp) / name
            init = base_dir if name == "continued" else None
            returned = pretrain.pretrain(recipe, out, device="cpu", progress=False, init=init)
            recorded = json.loads((out / "runtime.json").read_text(encoding="utf-8"))
            fields_wrong += _differing_fields(recorded.get("recipe") or {}, recipe)
            digest_wrong += recorded.get("recipe_digest") != recipe.digest()
            # through JSON both ways (runtime.json holds the results as JSON holds them), less the
            # save's own duration, which pretrain adds after writing the file (documented there)
            expected = json.loads(json.dumps(returned))
            expected.get("phase_seconds", {}).pop("save", None)
            results_wrong += recorded.get("results") != expected
            if name == "continued":
                continued_steps = int((recorded.get("results") or {}).get("steps", -1))
    return {"runs": len(recipes), "recipe_fields_wrong": int(fields_wrong), "digest_wrong": int(digest_wrong),
            "results_wrong": int(results_wrong), "continued_steps": continued_steps}
