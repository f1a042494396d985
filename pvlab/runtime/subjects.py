"""Subjects: the named, reproducible models (and data) that falsifiers run against.

    tiny-trained        the tiny Qwen2-style model on the synthetic corpus (runtime.zoo), CPU
    qwen2-0.5b-stdlib   the Qwen2-0.5B shape trained on the standard library's Python source,
                        on CUDA, bf16 fast path (docs/gpu.md, "Production-scale subject")
    llama-370m-stdlib   the Llama-370M shape, same data and schedule, on CUDA

Each is built on first use into the checkpoint cache of runtime.zoo (build_cached: an exclusive
lock, a temporary directory renamed into place) under a key made of the recipe (which carries
the code fingerprint of the modules that shape a checkpoint), the corpus digest (so another
Python's standard library builds a new entry) and the device and path it is trained on.

A subject trained on CUDA is a reproducible *recipe*, not a bit-for-bit reproducible file: GPU
kernels (bf16 matmuls, atomics in backward) differ between GPU models and library versions.
Where its build device is absent and the cache does not hold it, `checkpoint_dir` raises
SubjectUnavailable instead of starting a build that would take days on a CPU.

    python -m pvlab.runtime.subjects list
    python -m pvlab.runtime.subjects build qwen2-0.5b-stdlib      # prints each phase's duration
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from . import corpus, zoo
from .errors import DeviceError
from .pretrain import Recipe

# The module, not the function that the package re-exports under the same name (`from . import
# pretrain` could hand back the function): pretraining is looked up at call time, a seam.
training = importlib.import_module(f"{__package__}.pretrain")

SUBJECT_FORMAT = 1  # bump when the meaning of a subject's build changes


class SubjectUnavailable(DeviceError):
    """The subject is not in the cache and this machine lacks the device its recipe trains on."""


@dataclass(frozen=True)
class Subject:
    name: str
    recipe: Recipe
    device: str            # where it is trained: "cpu" or "cuda"
    path: str              # execution path while training: "reference" or "fast"
    summary: str

    def resolved_recipe(self) -> Recipe:
        """The recipe with the digest of the corpus on this machine filled in."""
        if self.recipe.corpus is None or self.recipe.corpus_digest is not None:
            return self.recipe
        return dataclasses.replace(self.recipe, corpus_digest=corpus.load(self.recipe.corpus).digest)

    def key(self, recipe: Recipe | None = None) -> str:
        recipe = recipe or self.resolved_recipe()
        payload = json.dumps({"format": SUBJECT_FORMAT, "recipe": recipe.digest(), "device": self.device,
                              "path": self.path}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()


# The stdlib subjects' recipe (justified and measured in docs/gpu.md, "Production-scale
# subject"): 1,000 steps of 8 x 1,024 tokens = 8.2M tokens in ~3.5 min at the fast path's
# measured 39k tokens/s on an H100; Q/K/V biases start at N(0, 1) so that they carry signal.
STDLIB_RECIPE = Recipe(config="qwen2-0.5b", steps=1000, batch_size=8, seq_len=1024, lr=6e-4, min_lr=6e-5,
                       warmup_steps=100, weight_decay=0.1, seed=0, data_seed=0, corpus="stdlib",
                       tokenizer_vocab_size=32000, val_fraction=0.05, eval_every=250, eval_batches=8,
                       bias_init_std=1.0)

SUBJECTS: dict[str, Subject] = {
    "tiny-trained": Subject("tiny-trained", zoo.TINY_RECIPE, "cpu", "reference",
                            "tiny Qwen2-style model (131,648 parameters) on the synthetic corpus"),
    "qwen2-0.5b-stdlib": Subject("qwen2-0.5b-stdlib", STDLIB_RECIPE, "cuda", "fast",
                                 "Qwen2-0.5B shape (494M parameters) trained on the standard library, bf16"),
    "llama-370m-stdlib": Subject("llama-370m-stdlib", dataclasses.replace(STDLIB_RECIPE, config="llama-370m"),
                                 "cuda", "fast",
                                 "Llama-370M shape (370M parameters) trained on the standard library, bf16"),
}


def subject(name: str) -> Subject:
    try:
        return SUBJECTS[name]
    except KeyError:
        raise SubjectUnavailable(f"unknown subject {name!r}; known: {', '.join(SUBJECTS)}") from None


def _device_present(device: str) -> bool:
    if device == "cpu":
        return True
    import torch

    return torch.cuda.is_available()


def _builder(item: Subject, recipe: Recipe, progress: bool) -> Callable[[Path], dict]:
    def build(out: Path) -> dict:
        results = training.pretrain(recipe, out, device=item.device, path=item.path, progress=progress)
        return {"subject": item.name, "recipe": recipe.as_dict(), "device": item.device, "path": item.path,
                "results": {k: v for k, v in results.items() if k != "history"}, "history": results["history"],
                "phase_seconds": results["phase_seconds"],
                "embedding_rows_without_token": results["vocab_size"] - results["tokenizer_vocab_size"]}
    return build


def checkpoint_dir(name: str, cache_dir: Path | str | None = None, *, build: bool = True,
                   progress: bool = False) -> Path:
    """The checkpoint directory of subject `name`, built on first use (unless build=False).

    Raises SubjectUnavailable when it is not cached and cannot be built here."""
    item = subject(name)
    if item.recipe is zoo.TINY_RECIPE:
        return zoo.tiny_trained(cache_dir, progress=progress)
    recipe = item.resolved_recipe()
    key = item.key(recipe)
    root = Path(cache_dir) if cache_dir is not None else zoo.default_cache_dir()
    cached = root / f"{name}-{key[:16]}"
    if (cached / zoo.BUILD_RECORD_NAME).is_file():
        return cached
    if not build:
        raise SubjectUnavailable(f"subject {name} is not built in {root} (expected {cached.name})")
    if not _device_present(item.device):
        raise SubjectUnavailable(
            f"subject {name} trains on {item.device} ({item.path} path), which this machine lacks, and {root} "
            f"holds no build of it ({cached.name}); build it on a GPU machine (scripts/gpu-scale.sh) "
            "or point PV_CACHE_DIR at a cache that has it")
    return zoo.build_cached(name, key, _builder(item, recipe, progress), cache_dir)


def describe(directory: Path | str) -> dict[str, Any]:
    """The figures of a built subject (build.json), for reports."""
    return zoo.build_record(directory)


def _print_build(name: str, directory: Path, seconds: float) -> None:
    record = describe(directory)
    results = record.get("results", {})
    phases = record.get("phase_seconds", {})
    print(f"subject {name}: {directory}")
    print("phases: " + "  ".join(f"{phase} {value:.1f}s" for phase, value in phases.items()))
    if results:
        print(f"parameters {results['parameters']:,}  trained tokens {results['trained_tokens']:,}  "
              f"tokens/s {results['tokens_per_second']:,.0f}  val_loss {results['val_loss']:.4f}  "
              f"train_loss {results['train_loss']:.4f}  ln V {results['ln_vocab']:.4f}  "
              f"tokenizer {results['tokenizer_vocab_size']:,} of {results['vocab_size']:,} rows")
    print(f"wall {seconds:.1f}s (0 when it came from the cache)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pvlab.runtime.subjects", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the subjects and their recipes")
    build = commands.add_parser("build", help="build (or find in the cache) a subject's checkpoint")
    build.add_argument("name", choices=sorted(SUBJECTS))
    build.add_argument("--cache-dir", default=None)
    args = parser.parse_args(argv)
    if args.command == "list":
        for item in SUBJECTS.values():
            print(f"{item.name:<20} {item.device + '/' + item.path:<15} {item.summary}")
        return 0
    started = time.monotonic()
    try:
        directory = checkpoint_dir(args.name, args.cache_dir, progress=True)
    except SubjectUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    _print_build(args.name, directory, time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
