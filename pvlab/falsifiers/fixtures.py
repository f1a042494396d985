"""Expensive things the checks share, built once per process (functools.lru_cache).

`pv run --all` runs every falsifier in one pytest process; a trained checkpoint, a loaded model
or a tokenised corpus is built on first use and reused by every later check. Cached objects are
shared: a check that changes a model (training, zeroing weights) takes `fresh_copy()` first.

Checkpoint names used in contract params:

    tiny-trained   runtime.zoo.tiny_trained(): the tiny Qwen2-style model (Q/K/V biases, tied
                   head) trained on the synthetic Python corpus; built once into .pv-cache/
    tiny-random    the same architecture and tokenizer with weights drawn by the runtime's own
                   runtime.init_model(weights="random", seed=0) — step 0 of training — scored on
                   tiny-trained's data (its held-out split and tokenizer)

Caches are keyed by the planted bug active in pv's harness (pv.harness.active_mutant()), so a
model built under one mutant is never reused under another or under none; `clear()` empties
them (tests that patch the loading path call it).

Models are loaded without the parity gate (`parity_gate=False`): a check measures what the
device path does; refusing to place a diverging model is the gate's own falsifier's business.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from pathlib import Path

import torch

CHECKPOINTS = ("tiny-trained", "tiny-random")
_CACHES: list = []


def _active_mutant() -> str | None:
    try:
        from pv.harness import active_mutant
    except ImportError:  # pragma: no cover - the checks run without pv too
        return None
    return active_mutant()


def cached(function=None, *, data: bool = False):
    """functools.lru_cache keyed also by the active mutant. `data=True` marks a cache of data
    (corpus, token streams) rather than of models or runs: clear(models_only=True) keeps it."""
    def decorate(function):
        @functools.lru_cache(maxsize=None)
        def keyed(mutant, *args, **kwargs):
            return function(*args, **kwargs)

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            return keyed(_active_mutant(), *args, **kwargs)

        wrapper.cache_clear = keyed.cache_clear
        _CACHES.append((keyed, data))
        return wrapper
    return decorate(function) if function is not None else decorate


def clear(*, models_only: bool = False) -> None:
    """Forget cached models and runs (and, unless models_only, datasets too). The checkpoint
    directories stay on disk."""
    for cache, is_data in _CACHES:
        if not (models_only and is_data):
            cache.cache_clear()


def fresh_copy(model):
    """A deep copy of a cached model (weights, path, config, tokenizer) that a check may modify."""
    return copy.deepcopy(model)


def _known(name: str) -> None:
    if name not in CHECKPOINTS:
        raise ValueError(f"unknown checkpoint {name!r}; known: {', '.join(CHECKPOINTS)}")


@functools.lru_cache(maxsize=None)
def checkpoint_dir(name: str = "tiny-trained") -> Path:
    """The directory of a checkpoint (tiny-random has none of its own: it is tiny-trained's).

    The zoo builds it on first use into the shared on-disk cache. Under a planted bug the
    registry (pvlab/falsifiers/mutants/) suspends the mutant while runtime.zoo.build_cached runs,
    so a bug is never baked into that cache; a test that monkeypatches the runtime by hand must
    make sure the checkpoint exists first (tests/falsifiers do)."""
    _known(name)
    from pvlab.runtime import zoo

    return Path(zoo.tiny_trained())


@cached(data=True)
def recipe(name: str = "tiny-trained"):
    """The training recipe recorded in the checkpoint's runtime.json (corpus, split, batch shapes)."""
    import json

    from pvlab.runtime.pretrain import Recipe

    meta = json.loads((checkpoint_dir(name) / "runtime.json").read_text(encoding="utf-8"))
    return Recipe.from_dict(meta["recipe"])


@cached
def model(name: str = "tiny-trained", device: str = "cpu", path: str = "reference"):
    """A model on `device` running `path`, shared read-only between checks."""
    _known(name)
    from pvlab.runtime import checkpoint

    if name == "tiny-random":
        from pvlab.runtime.config import ModelConfig

        config = ModelConfig.from_json_file(checkpoint_dir(name) / "config.json")
        loaded = checkpoint.init_model(config=config, weights="random", seed=0, device=device, path=path,
                                       parity_gate=False)
        loaded.tokenizer = model("tiny-trained", "cpu", "reference").tokenizer
    else:
        loaded = checkpoint.load(checkpoint_dir(name), device=device, path=path, parity_gate=False)
    loaded.eval()
    return loaded


@cached(data=True)
def prepared_data(name: str = "tiny-trained"):
    """The corpus split and token streams the checkpoint was trained and evaluated on, rebuilt from
    its recipe and tokenised with its own tokenizer (runtime.pretrain.heldout_for_checkpoint)."""
    from pvlab.runtime.pretrain import heldout_for_checkpoint

    return heldout_for_checkpoint(model("tiny-trained", "cpu", "reference"), recipe(name))


def heldout_batches(name: str = "tiny-trained", batches: int | None = None) -> list:
    """The first `batches` held-out batches exactly as the runtime's eval scores them."""
    r = recipe(name)
    if batches is not None:
        r = dataclasses.replace(r, eval_batches=batches)
    return prepared_data(name).heldout_batches(r)


def train_eval_batches(name: str = "tiny-trained", batches: int | None = None) -> list:
    """Fixed windows of the training stream, batched like the held-out ones."""
    r = recipe(name)
    if batches is not None:
        r = dataclasses.replace(r, eval_batches=batches)
    return prepared_data(name).train_eval_batches(r)


def train_batches(name: str = "tiny-trained", count: int = 1, seed: int = 0) -> list:
    """`count` random training batches (the trainer's own sampler, runtime.data.random_batches)."""
    from pvlab.runtime import data

    r = recipe(name)
    stream = data.random_batches(prepared_data(name).train_stream, batch_size=r.batch_size, seq_len=r.seq_len,
                                 seed=seed)
    return [next(stream) for _ in range(count)]


@cached
def random_model(preset: str = "tiny", *, seed: int = 0, initializer_range: float | None = None,
                 device: str = "cpu", path: str = "reference"):
    """A randomly initialised model of a preset through the runtime's own init_model (ungated).
    `initializer_range` overrides the preset's std."""
    from pvlab.runtime import checkpoint
    from pvlab.runtime.config import preset as preset_config

    config = preset_config(preset)
    if initializer_range is not None:
        config = config.replace(initializer_range=initializer_range)
    built = checkpoint.init_model(config=config, weights="random", seed=seed, device=device, path=path,
                                  parity_gate=False)
    built.eval()
    return built


@cached(data=True)
def transformers_expected_tensors(name: str = "tiny-trained") -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(name, shape) of every tensor transformers' own implementation of the checkpoint's
    architecture holds (built on the meta device: nothing is allocated), the tied head left out.
    An expectation independent of the runtime's own list."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(checkpoint_dir(name))
    with torch.device("meta"):
        reference = AutoModelForCausalLM.from_config(config)
    state = reference.state_dict()
    tied = bool(getattr(config, "tie_word_embeddings", False))
    return tuple((key, tuple(t.shape)) for key, t in state.items() if not (tied and key == "lm_head.weight"))
