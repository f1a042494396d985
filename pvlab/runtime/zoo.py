"""Reproducible checkpoints, built on first use and cached.

    tiny_trained()  the tiny Qwen2-style model trained on the synthetic Python corpus
                    (held-out val_loss far below 0.5 ln V; about a minute on two CPU cores)
    tiny_random()   the same architecture and tokenizer, randomly initialised (step 0)

Each is keyed by the sha256 of its recipe and of the runtime source that turns a recipe into a
checkpoint (pretrain.code_fingerprint), so changing either builds a new entry instead of reusing
a stale one. A build happens in a temporary directory that is renamed into place when
complete, under an exclusive file lock: concurrent processes build once and all get the result.

Cache location: $PV_CACHE_DIR/checkpoints if PV_CACHE_DIR is set, else
<repository root of the working directory>/.pv-cache/checkpoints, or pass cache_dir.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import importlib
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

from . import atomic
from .pretrain import Recipe

# The pretrain *module* (the package re-exports the function `pretrain` under the same name, so
# `from . import pretrain` could hand back the function): pretraining is looked up at call time.
training = importlib.import_module(f"{__package__}.pretrain")

# The recipe behind tiny_trained(). Changing any field changes the cache key.
TINY_RECIPE = Recipe(config="tiny", steps=120, batch_size=16, seq_len=128, lr=3e-3, min_lr=3e-4, warmup_steps=20,
                     weight_decay=0.1, seed=0, data_seed=0, num_documents=4000, val_fraction=0.05, eval_every=40,
                     eval_batches=8)
BUILD_RECORD_NAME = "build.json"


def repository_root(start: Path | None = None) -> Path:
    """The nearest ancestor of `start` (default: the working directory) holding .git, else `start`."""
    start = (start or Path.cwd()).resolve()
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return start


def default_cache_dir() -> Path:
    root = os.environ.get("PV_CACHE_DIR")
    return (Path(root) if root else repository_root() / ".pv-cache") / "checkpoints"


@contextlib.contextmanager
def _exclusive_lock(lock_file: Path) -> Iterator[None]:
    with open(lock_file, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _is_complete(directory: Path) -> bool:
    return (directory / BUILD_RECORD_NAME).is_file()


def build_cached(name: str, key: str, build: Callable[[Path], dict], cache_dir: Path | str | None = None) -> Path:
    """Return cache_dir/<name>-<key[:16]>, building it with `build(tmp_dir)` if absent.

    `build` must create the directory it is given and return a JSON-able summary, which is
    stored as build.json (its presence marks the entry complete).
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = root / f"{name}-{key[:16]}"
    if _is_complete(final):
        return final
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(root / f".{final.name}.lock"):
        if _is_complete(final):          # another process finished it while we waited
            return final
        if final.exists():               # debris of an interrupted build from an older layout
            shutil.rmtree(final)
        staging = root / f".{final.name}.build-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            started = time.monotonic()
            summary = build(staging)
            record = {"name": name, "key": key, "build_seconds": round(time.monotonic() - started, 2), **summary}
            atomic.write_text(staging / BUILD_RECORD_NAME, json.dumps(record, indent=2, sort_keys=True) + "\n")
            os.rename(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final


def build_record(directory: Path | str) -> dict:
    """The build.json of a cached checkpoint (build time, losses, recipe)."""
    return json.loads((Path(directory) / BUILD_RECORD_NAME).read_text(encoding="utf-8"))


def _train(recipe: Recipe, progress: bool) -> Callable[[Path], dict]:
    def build(out: Path) -> dict:
        # Always the CPU reference path: the cached checkpoint must be the same bytes everywhere.
        results = training.pretrain(recipe, out, device="cpu", path="reference", progress=progress)
        return {"recipe": recipe.as_dict(), "val_loss": results["val_loss"], "train_loss": results["train_loss"],
                "ln_vocab": results["ln_vocab"], "vocab_size": results["vocab_size"]}
    return build


def tiny_trained(cache_dir: Path | str | None = None, *, recipe: Recipe = TINY_RECIPE, progress: bool = False) -> Path:
    """Directory of the trained tiny checkpoint (config.json, model.safetensors, tokenizer.json,
    runtime.json with the recipe and losses, optimizer state), built on first use."""
    return build_cached("tiny-trained", recipe.digest(), _train(recipe, progress), cache_dir)


def tiny_random(cache_dir: Path | str | None = None, *, seed: int = 0, recipe: Recipe = TINY_RECIPE) -> Path:
    """The tiny architecture at random initialisation (step 0 of `recipe`, initialised from
    `seed`), with the same corpus, tokenizer and held-out split as tiny_trained."""
    untrained = dataclasses.replace(recipe, steps=0, seed=seed)
    return build_cached("tiny-random", untrained.digest(), _train(untrained, False), cache_dir)
