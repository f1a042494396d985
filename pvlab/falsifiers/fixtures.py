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
    <subject>, <subject>-random
                   any subject of runtime.subjects (qwen2-0.5b-stdlib, llama-370m-stdlib) and its
                   random twin, exactly like tiny-trained / tiny-random; a subject that is neither
                   cached nor buildable here (no GPU) makes the check SKIP (DeviceUnavailable)

Under a subject (`for_subject`, or the environment variable PV_SUBJECT, as scripts/gpu-scale.sh sets it), a contract's `checkpoint: tiny-trained` means that subject and
`checkpoint: tiny-random` its random twin: one contract, several subjects.

A planted bug changes what these build, so the caches belong to the bugs planted when they were
filled: the first cached call after the planted bugs changed (pv.mutation.planted(), the one
place that knows) drops every cache, so a model built under one mutant is never reused under
another or under none. Entering the same mutant around every check call (`pytest --pv-mutant`)
keeps them. `clear()` empties them explicitly.

Models are loaded without the parity gate (`parity_gate=False`): a check measures what the
device path does; refusing to place a diverging model is the gate's own falsifier's business.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
from pathlib import Path

import torch

from ._util import device_unavailable

TINY = "tiny-trained"
RANDOM_SUFFIX = "-random"
SUBJECT_ENV = "PV_SUBJECT"
_CACHES: list = []  # (lru_cache, holds data rather than models) of every @cached function
_FILLED_UNDER: tuple[str, ...] = ()  # the mutants planted when the caches were filled


def subject_names() -> tuple[str, ...]:
    from pvlab.runtime import subjects

    return tuple(subjects.SUBJECTS)


def random_twin(subject: str) -> str:
    """The checkpoint name of a subject's random initialisation (tiny-trained -> tiny-random)."""
    return "tiny-random" if subject == TINY else subject + RANDOM_SUFFIX


def known_checkpoints() -> tuple[str, ...]:
    return tuple(name for subject in subject_names() for name in (subject, random_twin(subject)))


def trained_of(name: str) -> str:
    """The subject a checkpoint name belongs to (itself, or the subject of a random twin); a
    checkpoint directory given by path is its own subject."""
    if Path(name).is_dir():
        return name
    for subject in subject_names():
        if name in (subject, random_twin(subject)):
            return subject
    raise ValueError(f"unknown checkpoint {name!r}; known: {', '.join(known_checkpoints())}")


def is_random(name: str) -> bool:
    return name != trained_of(name)


def for_subject(checkpoint: str, subject: str | None) -> str:
    """What a contract's `checkpoint:` param names when the falsifier runs on `subject`: the tiny
    checkpoints stand for the subject (tiny-trained) and its random twin (tiny-random); any other
    name is explicit and stays. No subject: the name unchanged."""
    if subject is None or subject == "":
        return checkpoint
    trained_of(subject)
    if subject != trained_of(subject):
        raise ValueError(f"{subject!r} is a random twin, not a subject; subjects: {', '.join(subject_names())}")
    if checkpoint == TINY:
        return subject
    if checkpoint == random_twin(TINY):
        return random_twin(subject)
    return checkpoint


def active_subject() -> str | None:
    return os.environ.get(SUBJECT_ENV) or None


def resolve(name: str) -> str:
    """`name` under the active subject, checked against the known checkpoints."""
    resolved = for_subject(name, active_subject())
    trained_of(resolved)
    return resolved


def _planted() -> tuple[str, ...]:
    try:
        from pv.mutation import planted
    except ImportError:  # pragma: no cover - the checks run without pv too
        return ()
    return planted()


def _drop_if_the_planted_bugs_changed() -> None:
    global _FILLED_UNDER
    now = _planted()
    if now != _FILLED_UNDER:
        clear()
        _FILLED_UNDER = now


def cached(function=None, *, data: bool = False):
    """functools.lru_cache, dropped (with every other) when the planted bugs change. `data=True`
    marks a cache of data (corpus, token streams) rather than of models or runs:
    clear(models_only=True) keeps it."""
    def decorate(function):
        @functools.lru_cache(maxsize=None)
        def keyed(subject, *args, **kwargs):
            return function(*args, **kwargs)

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            _drop_if_the_planted_bugs_changed()
            return keyed(active_subject(), *args, **kwargs)

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


def checkpoint_dir(name: str = "tiny-trained") -> Path:
    """The directory of a checkpoint (a random twin has none of its own: it is its subject's).

    The zoo builds it on first use into the shared on-disk cache. Under a planted bug the
    registry (pvlab/falsifiers/mutants/) lifts the bug while runtime.zoo.build_cached runs, so a
    bug is never baked into that cache, and the path is the same under every bug (a plain
    lru_cache)."""
    return _subject_dir(trained_of(resolve(name)))


@functools.lru_cache(maxsize=None)
def _subject_dir(subject: str) -> Path:
    if Path(subject).is_dir():
        return Path(subject).resolve()
    from pvlab.runtime import subjects, zoo

    if subject == TINY:
        return Path(zoo.tiny_trained())
    try:
        return subjects.checkpoint_dir(subject, progress=True)
    except subjects.SubjectUnavailable as error:
        raise device_unavailable(str(error)) from None


@cached(data=True)
def tokenizer(name: str = "tiny-trained"):
    """The tokenizer the checkpoint was trained with (its tokenizer.json), read without loading
    any weights."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(checkpoint_dir(name) / "tokenizer.json"))


@cached(data=True)
def recipe(name: str = "tiny-trained"):
    """The training recipe recorded in the checkpoint's runtime.json (corpus, split, batch shapes)."""
    import json

    from pvlab.runtime.pretrain import Recipe

    path = checkpoint_dir(name) / "runtime.json"
    if not path.is_file():  # e.g. a user's HF checkpoint given by path (pv run --subject-path)
        raise FileNotFoundError(f"{path.parent} has no runtime.json: this check scores the checkpoint on the data it "
                                "was trained on, which only a checkpoint saved by pvlab's runtime records")
    meta = json.loads(path.read_text(encoding="utf-8"))
    return Recipe.from_dict(meta["recipe"])


@cached(data=True)
def recorded_results(name: str = "tiny-trained") -> dict:
    """The results its build recorded in runtime.json (val_loss, train_loss, timings, ...)."""
    import json

    meta = json.loads((checkpoint_dir(name) / "runtime.json").read_text(encoding="utf-8"))
    return meta["results"]


@cached
def model(name: str = "tiny-trained", device: str = "cpu", path: str = "reference"):
    """A model on `device` running `path`, shared read-only between checks."""
    from pvlab.runtime import checkpoint

    if is_random(resolve(name)):
        from pvlab.runtime.config import ModelConfig

        config = ModelConfig.from_json_file(checkpoint_dir(name) / "config.json")
        loaded = checkpoint.init_model(config=config, weights="random", seed=0, device=device, path=path,
                                       parity_gate=False)
        loaded.tokenizer = tokenizer(name)
    else:
        loaded = checkpoint.load(checkpoint_dir(name), device=device, path=path, parity_gate=False)
    loaded.eval()
    return loaded


@cached(data=True)
def prepared_data(name: str = "tiny-trained"):
    """The corpus split and token streams the checkpoint was trained and evaluated on, rebuilt from
    its recipe and tokenised with its own tokenizer (runtime.pretrain.prepare_data, as
    heldout_for_checkpoint does, without loading the weights)."""
    from pvlab.runtime.config import ModelConfig
    from pvlab.runtime.pretrain import prepare_data

    vocab_size = ModelConfig.from_json_file(checkpoint_dir(name) / "config.json").vocab_size
    return prepare_data(recipe(name), vocab_size=vocab_size, tokenizer=tokenizer(name))


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
