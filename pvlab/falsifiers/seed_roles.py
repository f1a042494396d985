"""Each of a recipe's two seeds reaches what it is documented to seed, and nothing else.

pvlab.runtime.pretrain.Recipe documents its seeds as `seed: model initialisation and batch order`
and `data_seed: synthetic corpus and held-out split`. A study that varies the model seed over a
fixed data seed compares held-out losses on one held-out set; one that varies the data seed
compares splits of one initialisation. If pretrain passed the wrong seed to a step (the split
drawn with the model seed, say), every run with both seeds 0, the default, is unchanged. Only
runs with different seeds notice, and then they compare held-out losses on different held-out
sets.

The split rules themselves are judged against their documented formulas by
FALSIFY-SEEDED-SPLITS-001. Here the wiring is judged: which seed reaches which step, through
pretrain's own entry points (split_corpus, which pretrain and `eval` both use, and pretrain
itself for the initial weights). The oracle is the documented role of each seed. Nothing of the
runtime decides what is expected: equal held-out sets and bitwise-equal initial tensors where a
seed is documented not to matter, different ones where it is documented to matter (so the
check cannot hold by comparing things no seed moves).
"""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import torch

# (model seed, data seed) of the three runs: a base, the model seed moved, the data seed moved
BASE, MODEL_MOVED, DATA_MOVED = (0, 0), (7, 0), (0, 7)


def _recipe(pretrain, seeds: tuple[int, int], documents: int):
    seed, data_seed = seeds
    return pretrain.Recipe(steps=0, num_documents=documents, val_fraction=0.2, seed=seed, data_seed=data_seed,
                           batch_size=2, seq_len=32, eval_batches=1)


def _initial_tensors(pretrain, recipe, directory: Path) -> dict[str, torch.Tensor]:
    """The tensors of the checkpoint pretrain writes for `recipe` before any step (steps = 0)."""
    from safetensors.torch import load_file

    pretrain.pretrain(recipe, directory, device="cpu", progress=False)
    return load_file(str(directory / "model.safetensors"))


def _max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    if a.keys() != b.keys():
        return float("inf")
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def seeds_reach_their_documented_roles(*, device: str = "cpu", documents: int = 40) -> dict:
    """Three recipes on the tiny preset (`documents` synthetic documents, val_fraction 0.2): both
    seeds 0; the model seed 7; the data seed 7. For each, the corpus and its split as
    pretrain.split_corpus draws them, and the initial weights of pretrain's checkpoint with no
    training step.

    Observations: heldout_moved_by_model_seed, corpus_moved_by_model_seed (documents in one of
    the two runs' held-out set, or corpus, but not the other's, model seed moved: documented 0);
    heldout_moved_by_data_seed (the same count, data seed moved: documented > 0);
    init_moved_by_data_seed (largest difference of an initial tensor, data seed moved:
    documented 0, bitwise); init_moved_by_model_seed (model seed moved: documented > 0);
    heldout_documents (the base run's held-out count)."""
    if device != "cpu":
        raise ValueError(f"the seeds' wiring is host code; device {device!r} is not judged here")
    pretrain = importlib.import_module("pvlab.runtime.pretrain")   # read at call time: planted bugs swap its functions

    splits, tensors = {}, {}
    with tempfile.TemporaryDirectory(prefix="pv-seed-roles-") as tmp:
        for name, seeds in (("base", BASE), ("model", MODEL_MOVED), ("data", DATA_MOVED)):
            recipe = _recipe(pretrain, seeds, documents)
            train, held_out, _ = pretrain.split_corpus(recipe)
            splits[name] = (frozenset(train) | frozenset(held_out), frozenset(held_out))
            tensors[name] = _initial_tensors(pretrain, recipe, Path(tmp) / name)

    def moved(a: frozenset, b: frozenset) -> int:
        return len(a ^ b)

    return {
        "heldout_moved_by_model_seed": moved(splits["base"][1], splits["model"][1]),
        "corpus_moved_by_model_seed": moved(splits["base"][0], splits["model"][0]),
        "heldout_moved_by_data_seed": moved(splits["base"][1], splits["data"][1]),
        "init_moved_by_data_seed": _max_difference(tensors["base"], tensors["data"]),
        "init_moved_by_model_seed": _max_difference(tensors["base"], tensors["model"]),
        "heldout_documents": len(splits["base"][1]),
    }
