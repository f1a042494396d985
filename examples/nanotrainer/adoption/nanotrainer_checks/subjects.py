"""The subjects nanotrainer's falsifiers run on, built by nanotrainer itself ([tool.pv]
subject_provider): a checkpoint it trained (or initialised) plus token batches, in the
pack's subject-directory layout (pvpack.subjects).

    nano-trained   300 steps on the synthetic corpus (seed 0): about 10 s on one busy CPU core
    nano-random    the same architecture, untrained (the runtime's own initialisation, seed 0)

Built once into .pv-cache/nanotrainer/ under the project root; deterministic (same seed, same
corpus, same batches). Two processes building at once each write a temporary directory and the
first rename wins.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch

from nanotrainer import data, model, train
from pvpack import subjects
from pvpack.protocol import Batch

CACHE = Path(__file__).resolve().parents[1] / ".pv-cache" / "nanotrainer"
SEQ_LEN = 32          # tokens a batch scores per row (each row is SEQ_LEN + 1 tokens of the stream)
BATCH = 8
SUBJECTS = {"nano-trained": "trained", "nano-random": "random"}


def _batches(windows: torch.Tensor) -> list[Batch]:
    return [Batch(w[:, :-1].contiguous(), w[:, 1:].contiguous()) for w in windows.split(BATCH) if len(w) == BATCH]


def _windows(stream: torch.Tensor) -> torch.Tensor:
    width = SEQ_LEN + 1
    return stream[: len(stream) // width * width].view(-1, width)


def _val_loss(checkpoint: Path, batches: list[Batch]) -> float:
    """nanotrainer's own eval of what it just trained, as its training script would report it."""
    from nanotrainer_checks.adapter import as_labels

    return train.evaluate(train.load(checkpoint), [as_labels(b) for b in batches])


def _build(name: str, directory: Path) -> None:
    cfg, tc = model.GPTConfig(), train.TrainConfig()
    checkpoint = directory / "checkpoint"
    if SUBJECTS[name] == "trained":
        train.train(checkpoint, cfg=cfg, tc=tc)
    else:
        torch.manual_seed(0)
        train.save(model.GPT(cfg), checkpoint)
    corpus = data.corpus(cfg.vocab_size, seed=tc.seed)
    generator = torch.Generator().manual_seed(1)
    training = [data.random_batch(corpus["train"], BATCH, SEQ_LEN + 1, generator) for _ in range(32)]
    heldout = _windows(corpus["heldout"])
    subjects.write(
        directory, name=name, checkpoint=Path("checkpoint"), init=SUBJECTS[name], seed=0,
        heldout=_batches(heldout)[:6],
        train=[Batch(w[:, :-1].contiguous(), w[:, 1:].contiguous()) for w in training],
        train_windows=_batches(_windows(corpus["train"]))[:6],
        prompts=[row[:16].tolist() for row in heldout[:6]],
        data={"corpus": {"vocab_size": cfg.vocab_size, "seed": tc.seed}, "window": SEQ_LEN + 1},
        recorded={} if SUBJECTS[name] == "random" else {"val_loss": _val_loss(checkpoint, _batches(heldout)[:6])},
    )


def subject_directory(name: str) -> Path:
    """The directory of subject `name`, built on first use."""
    if name not in SUBJECTS:
        raise ValueError(f"unknown subject {name!r}; nanotrainer builds {', '.join(SUBJECTS)}")
    target = CACHE / name
    if (target / subjects.SUBJECT_FILE).is_file():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=CACHE))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small trains fastest on one core, and busy machines stay usable
    try:
        _build(name, scratch)
        try:
            os.rename(scratch, target)
        except OSError:
            if not (target / subjects.SUBJECT_FILE).is_file():
                raise
    finally:
        torch.set_num_threads(threads)
        shutil.rmtree(scratch, ignore_errors=True)
    return target
