"""What names a build names it completely: the seed of a random twin, the cache key of a
subject, the batch count asked of `eval`.

runtime.zoo, runtime.subjects and the `eval` command of runtime.cli. The oracles are
independent of the function under test: the runtime's documented random init from a seed
(init_model(weights="random", seed=s)) for a zoo build, the set of build inputs (recipe, device,
path) for a cache key, and the recipe's batch shape (runtime.json) for eval's token count.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import torch

from . import fixtures
from ._util import torch_device


def random_twin_follows_seed(*, device: str, seeds: list | None = None, documents: int = 120) -> dict:
    """zoo.tiny_random(seed=s) for several seeds, built into a fresh cache from a small recipe:
    each must hold the weights of init_model(config, weights="random", seed=s), and different
    seeds different weights.

    Observations: seeds, builds_matching_seed, distinct_builds (distinct embedding tensors)."""
    from pvlab.runtime import checkpoint, zoo
    from pvlab.runtime.config import ModelConfig

    torch_device(device)
    seeds = [int(s) for s in (seeds or [0, 1])]
    recipe = dataclasses.replace(zoo.TINY_RECIPE, num_documents=documents, batch_size=2, seq_len=16, eval_batches=1)
    matching, embeddings = 0, []
    with tempfile.TemporaryDirectory(prefix="pv-zoo-") as cache:
        for seed in seeds:
            built = zoo.tiny_random(cache, seed=seed, recipe=recipe)
            loaded = checkpoint.load(built, parity_gate=False)
            config = ModelConfig.from_json_file(Path(built) / "config.json")
            expected = checkpoint.init_model(config=config, weights="random", seed=seed, parity_gate=False)
            matching += all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(),
                                                              expected.state_dict().values()))
            embeddings.append(loaded.model.embed_tokens.weight.detach())
    distinct = len({tuple(e.flatten()[:64].tolist()) for e in embeddings})
    return {"seeds": len(seeds), "builds_matching_seed": matching, "distinct_builds": distinct}


def subject_keys_cover_build_inputs(*, device: str) -> dict:
    """Every input that changes a subject's bytes must change its cache key: for each subject,
    variants with another device, another execution path and another recipe seed, besides the
    subject itself. (The recipe is passed explicitly: no corpus is read.)

    Observations: keys (variants keyed), distinct_keys."""
    from pvlab.runtime import subjects

    torch_device(device)
    keys = []
    for item in subjects.SUBJECTS.values():
        other_device = "cpu" if item.device != "cpu" else "cuda"
        other_path = "reference" if item.path != "reference" else "fast"
        variants = [item, dataclasses.replace(item, device=other_device), dataclasses.replace(item, path=other_path)]
        keys += [v.key(item.recipe) for v in variants]
        keys.append(item.key(dataclasses.replace(item.recipe, seed=item.recipe.seed + 1)))
    return {"keys": len(keys), "distinct_keys": len(set(keys))}


def cli_eval_honours_batches(*, device: str, checkpoint: str = "tiny-trained", batches: list | None = None) -> dict:
    """`python -m pvlab.runtime eval DIR --batches N --json` (click's runner, in process) on the
    trained checkpoint `checkpoint` (a subject name): it must score N held-out batches of the recipe's shape, i.e. report
    N * batch_size * seq_len target tokens (full windows have no padding).

    Observations: per_batch_tokens (from runtime.json), wrong_counts (N whose token count is not
    N * per_batch_tokens), exit_codes_nonzero, asked (how many N)."""
    from click.testing import CliRunner

    from pvlab.runtime import cli

    torch_device(device)
    directory = fixtures.checkpoint_dir(checkpoint)
    recipe = json.loads((directory / "runtime.json").read_text(encoding="utf-8"))["recipe"]
    per_batch = recipe["batch_size"] * recipe["seq_len"]
    asked = [int(n) for n in (batches or [1, 2])]
    wrong = nonzero = 0
    for n in asked:
        result = CliRunner().invoke(cli.main, ["eval", str(directory), "--device", device, "--batches", str(n),
                                               "--json"])
        if result.exit_code != 0:
            nonzero += 1
            continue
        wrong += json.loads(result.output.strip().splitlines()[-1])["tokens"] != n * per_batch
    return {"per_batch_tokens": per_batch, "wrong_counts": wrong, "exit_codes_nonzero": nonzero, "asked": len(asked)}
