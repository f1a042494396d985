"""Subjects as the pack sees them: a Hugging Face checkpoint plus token batches, all in files.

A contract names a subject (`subjects: [tiny-trained]`); the check receives the name (or, for
`pv run --subject-path DIR`, the directory) and `resolve` turns it into a `Subject`:

- a directory holding `subject.json` is a subject directory (the layout below);
- a directory holding only `config.json` is a bare checkpoint: checks that need no data run on
  it, the others raise SubjectError saying what is missing;
- any other name goes to the project's subject provider, `[tool.pv] subject_provider =
  "module:function"`, a function `name -> subject directory` (this repository's is pvlab's, which
  writes its trained subjects' batches; the pack never imports a runtime).

Subject directory layout (format 1):

    subject.json               {"format": 1, "name": ..., "checkpoint": <dir, relative to here or
                                absolute>, "init": "trained" | "random", "seed": 0,
                                "recorded": {"val_loss": ...},   # what its build measured, optional
                                "data": {...}}                    # for a runtime's data_split, optional
    heldout.safetensors        inputs, targets: (N, B, T) int64 — held-out batches as eval scores them
    train.safetensors          inputs, targets: (N, B, T) int64 — training batches in training order
    train_windows.safetensors  inputs, targets: (N, B, T) int64 — fixed training windows, batched like heldout
    prompts.safetensors        prompts: (P, L) int64 — openings of held-out documents

Targets are the inputs shifted by one (targets[b, t] follows inputs[b, t]), IGNORE_INDEX (-100)
where nothing is scored. Tensors cross as safetensors files, so the runtime under test never
has to share a process with the provider or the pack.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any, Mapping

import torch

from .protocol import RANDOM, TRAINED, Batch

FORMAT = 1
SUBJECT_FILE = "subject.json"
FILES = {"heldout": "heldout.safetensors", "train": "train.safetensors",
         "train_windows": "train_windows.safetensors", "prompts": "prompts.safetensors"}
# What each argument of write() holds, for the error that names a missing one.
HOLDS = {"heldout": "held-out batches, as your eval loop scores them",
         "train": "training batches, in training order (fine-tune and eval-pollution checks)",
         "train_windows": "fixed windows of the training data, batched like heldout (train_val_ratio)",
         "prompts": "openings of held-out text, as lists of token ids (greedy decoding checks)"}


class SubjectError(Exception):
    """A subject cannot be resolved, or lacks the data a check asks for (ERROR, naming it)."""


@dataclasses.dataclass(frozen=True)
class Subject:
    name: str
    checkpoint: Path                    # the runtime's checkpoint directory: config.json (vocab_size) + its weights
    directory: Path | None = None       # the subject directory (None: a bare checkpoint)
    init: str = TRAINED                 # TRAINED: the checkpoint's weights; RANDOM: its architecture only
    seed: int = 0
    recorded: Mapping[str, float] = dataclasses.field(default_factory=dict)
    data: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def is_random(self) -> bool:
        return self.init == RANDOM

    @property
    def config(self) -> dict[str, Any]:
        return json.loads((self.checkpoint / "config.json").read_text(encoding="utf-8"))

    @property
    def vocab_size(self) -> int:
        config = self.config
        if not isinstance(config.get("vocab_size"), int):
            raise SubjectError(f"subject {self.name}: {self.checkpoint / 'config.json'} has no integer vocab_size "
                               "(the pack reads the Hugging Face key; write it into your checkpoint's config.json)")
        return config["vocab_size"]

    def _tensors(self, kind: str) -> dict[str, torch.Tensor]:
        if self.directory is None:
            raise SubjectError(f"subject {self.name}: a bare checkpoint has no {kind} batches; give a subject "
                               f"directory ({SUBJECT_FILE} + {FILES[kind]}, pvpack.subjects) or a subject the "
                               "project's [tool.pv] subject_provider knows")
        file = self.directory / FILES[kind]
        if not file.is_file():
            raise SubjectError(f"subject {self.name}: {file} is missing: it was written without "
                               f"pvpack.subjects.write({kind}=...), {HOLDS[kind]}. Pass {kind}= in your "
                               f"subject provider ([tool.pv] subject_provider), then delete {self.directory} "
                               "so it is built again")
        return _read(file)

    def _batches(self, kind: str, count: int | None, start: int = 0) -> list[Batch]:
        tensors = self._tensors(kind)
        inputs, targets = tensors["inputs"], tensors["targets"]
        stop = inputs.shape[0] if count is None else start + count
        if stop > inputs.shape[0] or start < 0:
            raise SubjectError(f"subject {self.name}: {FILES[kind]} holds {inputs.shape[0]} batches; "
                               f"batches {start}..{stop - 1} were asked for")
        return [Batch(inputs[i].clone(), targets[i].clone()) for i in range(start, stop)]

    def heldout(self, count: int | None = None) -> list[Batch]:
        return self._batches("heldout", count)

    def train(self, count: int | None = None, start: int = 0) -> list[Batch]:
        return self._batches("train", count, start)

    def train_windows(self, count: int | None = None) -> list[Batch]:
        return self._batches("train_windows", count)

    def prompts(self, count: int, length: int) -> list[list[int]]:
        prompts = self._tensors("prompts")["prompts"]
        if prompts.shape[0] < count or prompts.shape[1] < length:
            raise SubjectError(f"subject {self.name}: {FILES['prompts']} holds {prompts.shape[0]} prompts of "
                               f"{prompts.shape[1]} tokens; {count} of {length} were asked for")
        return [row[:length].tolist() for row in prompts[:count]]


@functools.lru_cache(maxsize=64)
def _read(file: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    if not file.is_file():
        raise SubjectError(f"{file}: missing (a subject directory holds {', '.join(FILES.values())})")
    return load_file(str(file))


def write(directory: Path, *, name: str, checkpoint: Path, init: str = TRAINED, seed: int = 0,
          recorded: Mapping[str, float] | None = None, data: Mapping[str, Any] | None = None,
          heldout: list[Batch] | None = None, train: list[Batch] | None = None,
          train_windows: list[Batch] | None = None, prompts: list[list[int]] | None = None) -> Path:
    """Write a subject directory (what a provider does). Batches of one kind must share a shape.
    Each file is written whole or not at all (temp file + rename)."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)

    def save(kind: str, tensors: dict[str, torch.Tensor]) -> None:
        target = directory / FILES[kind]
        temporary = target.with_suffix(".tmp")
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(temporary))
        temporary.replace(target)

    for kind, batches in (("heldout", heldout), ("train", train), ("train_windows", train_windows)):
        if batches:
            save(kind, {"inputs": torch.stack([b.inputs for b in batches]),
                        "targets": torch.stack([b.targets for b in batches])})
    if prompts:
        save("prompts", {"prompts": torch.tensor(prompts, dtype=torch.int64)})
    meta = {"format": FORMAT, "name": name, "checkpoint": str(checkpoint), "init": init, "seed": seed,
            "recorded": dict(recorded or {}), "data": dict(data or {})}
    from pv.atomic import write_text

    write_text(directory / SUBJECT_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    _read.cache_clear()
    return directory


def read(directory: Path) -> Subject:
    """The subject of a subject directory, or of a bare checkpoint directory."""
    directory = Path(directory).resolve()
    meta_file = directory / SUBJECT_FILE
    if not meta_file.is_file():
        if (directory / "config.json").is_file():
            return Subject(name=f"path:{directory}", checkpoint=directory)
        raise SubjectError(f"{directory}: neither a subject directory ({SUBJECT_FILE}) nor an HF checkpoint "
                           "(config.json)")
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SubjectError(f"{meta_file}: unreadable: {error}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise SubjectError(f"{meta_file}: not a subject description of format {FORMAT}")
    checkpoint = Path(meta.get("checkpoint", ""))
    checkpoint = checkpoint if checkpoint.is_absolute() else directory / checkpoint
    if not (checkpoint / "config.json").is_file():
        raise SubjectError(f"{meta_file}: its checkpoint {checkpoint} has no config.json")
    init = meta.get("init", TRAINED)
    if init not in (TRAINED, RANDOM):
        raise SubjectError(f"{meta_file}: init must be {TRAINED!r} or {RANDOM!r}, got {init!r}")
    return Subject(name=str(meta.get("name", directory.name)), checkpoint=checkpoint, directory=directory,
                   init=init, seed=int(meta.get("seed", 0)), recorded=dict(meta.get("recorded") or {}),
                   data=dict(meta.get("data") or {}))


def resolve(subject: str | Path) -> Subject:
    """A check's `subject` argument as a Subject: a directory, or a name the provider knows."""
    text = str(subject)
    if text.startswith("path:"):
        text = text[len("path:"):]
    if Path(text).is_dir():
        return read(Path(text))
    from pv import runtimes

    provider = runtimes.subject_provider()
    if provider is None:
        raise SubjectError(f"subject {text!r} is not a directory and [tool.pv] names no subject_provider to ask")
    try:
        directory = provider(text)
    except Exception as error:
        # A provider may signal an absent subject with pv.harness.DeviceUnavailable (-> SKIP):
        # that propagates as it is.
        from pv.harness import DeviceUnavailable

        if isinstance(error, DeviceUnavailable):
            raise
        raise SubjectError(f"subject {text!r}: the subject provider raised {type(error).__name__}: {error}") from error
    return read(Path(directory))
