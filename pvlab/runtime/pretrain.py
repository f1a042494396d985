"""A complete pretraining run: corpus -> tokenizer -> split -> model -> training loop -> checkpoint.

`Recipe` holds everything that determines the result (and nothing that does not: device and
path are arguments of `pretrain`). Its `digest()` keys the checkpoint cache in `runtime.zoo`,
and it is stored in the checkpoint's runtime.json so `python -m pvlab.runtime eval DIR` can rebuild
the exact held-out split.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

# Sibling modules, not their functions: calls look them up at call time (docs/runtime.md, "Seams").
from . import checkpoint, corpus, data, devices
from . import config as configs
from .errors import ConfigError, DataError
from .model import CausalLM
from .trainer import Trainer

RECIPE_FORMAT = 2  # bump when the meaning of a recipe field changes

# The code that determines a checkpoint's bytes is part of its recipe: a cached checkpoint built
# by an older corpus generator, tokenizer or training step must not be mistaken for a fresh one.
_SOURCES_THAT_SHAPE_A_CHECKPOINT = ("config.py", "data.py", "kernels.py", "model.py", "pretrain.py", "trainer.py",
                                    "checkpoint.py", "corpus.py")


def code_fingerprint(source_dir: Path | None = None) -> str:
    """sha256 of those modules' syntax trees: comments, docstrings and layout do not count."""
    source_dir = source_dir or Path(__file__).parent
    digest = hashlib.sha256()
    for name in _SOURCES_THAT_SHAPE_A_CHECKPOINT:
        tree = ast.parse((source_dir / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
        digest.update(f"{name}\0{ast.dump(tree)}\0".encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class Recipe:
    config: str = "tiny"                  # preset name (ignored when initialising from a checkpoint)
    steps: int = 120
    batch_size: int = 16
    seq_len: int = 128
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 20
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 0                         # model initialisation and batch order
    data_seed: int = 0                    # synthetic corpus and held-out split
    num_documents: int = 4000             # synthetic corpus size (when corpus_dir is None)
    corpus_dir: str | None = None         # read *.py files from here instead
    corpus: str | None = None             # a named real corpus instead ("stdlib", "stdlib/json": runtime.corpus)
    corpus_digest: str | None = None      # its sha256 (runtime.corpus.Corpus.digest); checked when read
    tokenizer_vocab_size: int | None = None  # BPE vocabulary (None: the model's vocab_size)
    bias_init_std: float = 0.0            # draw the projection biases from N(0, std) instead of zeros
    val_fraction: float = 0.05
    eval_every: int = 40
    eval_batches: int = 8
    micro_batch_size: int | None = None   # rows per forward/backward; gradients accumulate to batch_size
    pack_documents: bool = False          # train on whole documents packed into rows (no cross-document attention)

    def digest(self) -> str:
        """sha256 of the recipe's fields and of the runtime code that turns them into a checkpoint."""
        payload = json.dumps({"format": RECIPE_FORMAT, "code": code_fingerprint(), **dataclasses.asdict(self)},
                             sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Recipe":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ConfigError(f"unknown recipe field(s): {', '.join(sorted(unknown))}")
        return cls(**values)


@dataclass
class PreparedData:
    tokenizer: Any
    train_documents: list[str]
    heldout_documents: list[str]
    train_stream: torch.Tensor
    heldout_stream: torch.Tensor
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)   # corpus, tokenizer, encode
    corpus_summary: dict[str, Any] | None = None                          # a named corpus's figures

    def heldout_batches(self, recipe: Recipe) -> list[data.LMBatch]:
        return data.sequential_batches(self.heldout_stream, batch_size=recipe.batch_size, seq_len=recipe.seq_len,
                                       max_batches=recipe.eval_batches)

    def train_eval_batches(self, recipe: Recipe) -> list[data.LMBatch]:
        """Fixed windows of training data, scored exactly like the held-out ones."""
        return data.sequential_batches(self.train_stream, batch_size=recipe.batch_size, seq_len=recipe.seq_len,
                                       max_batches=recipe.eval_batches)


def split_corpus(recipe: Recipe) -> tuple[list[str], list[str], dict[str, Any] | None]:
    """(train documents, held-out documents, named corpus figures or None) of a recipe: a named
    corpus split by file path (runtime.corpus), else the synthetic / directory corpus split by
    document content (runtime.data.split_documents)."""
    if recipe.corpus is not None:
        train, held_out, named = corpus.documents_for(recipe.corpus, val_fraction=recipe.val_fraction,
                                                      seed=recipe.data_seed, expected_digest=recipe.corpus_digest)
        data.verify_disjoint(train, held_out)
        return train, held_out, named.summary()
    if recipe.corpus_dir is not None:
        documents = data.read_corpus(recipe.corpus_dir)
    else:
        documents = data.synthetic_python_corpus(recipe.num_documents, recipe.data_seed)
    train, held_out = data.split_documents(documents, val_fraction=recipe.val_fraction, seed=recipe.data_seed)
    data.verify_disjoint(train, held_out)
    return train, held_out, None


def prepare_data(recipe: Recipe, *, vocab_size: int, tokenizer=None) -> PreparedData:
    """Corpus, split, tokenizer (trained on the training split only, unless one is given) and streams."""
    seconds: dict[str, float] = {}
    tick = time.monotonic()
    train_documents, heldout_documents, corpus_summary = split_corpus(recipe)
    seconds["corpus"] = time.monotonic() - tick
    if tokenizer is None:
        tick = time.monotonic()
        tokenizer = data.train_tokenizer(train_documents, recipe.tokenizer_vocab_size or vocab_size)
        seconds["tokenizer"] = time.monotonic() - tick
    if tokenizer.get_vocab_size() > vocab_size:
        raise DataError(f"tokenizer has {tokenizer.get_vocab_size()} tokens, more than the model's vocab_size {vocab_size}")
    tick = time.monotonic()
    train_stream = data.token_stream(data.encode_documents(tokenizer, train_documents))
    heldout_stream = data.token_stream(data.encode_documents(tokenizer, heldout_documents))
    seconds["encode"] = time.monotonic() - tick
    return PreparedData(tokenizer=tokenizer, train_documents=train_documents, heldout_documents=heldout_documents,
                        train_stream=train_stream, heldout_stream=heldout_stream, seconds=seconds,
                        corpus_summary=corpus_summary)


def draw_biases(model: CausalLM, std: float, seed: int) -> None:
    """Every bias from N(0, std), drawn on the CPU (the same values on every device). Biases
    trained from zero stay near zero in a short run and carry no signal (docs/gpu.md measures
    it); a subject whose Q/K/V biases matter, as a production Qwen2's do, starts them non-zero."""
    generator = torch.Generator(device="cpu").manual_seed(seed + 1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(".bias"):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)


class Progress:
    """A one-line progress bar on a terminal; plain lines (evals only) otherwise."""

    def __init__(self, total: int, stream=None, enabled: bool = True):
        self.total, self.stream, self.enabled = total, stream or sys.stderr, enabled
        self.interactive = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.started = time.monotonic()

    def update(self, step: int, loss: float) -> None:
        if not self.interactive:
            return
        width = 30
        filled = int(width * step / self.total)
        rate = step / max(1e-9, time.monotonic() - self.started)
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {step}/{self.total} "
                          f"loss {loss:.4f} {rate:.1f} steps/s")
        self.stream.flush()

    def message(self, text: str) -> None:
        if not self.enabled:
            return
        self.stream.write(("\r\033[K" if self.interactive else "") + text + "\n")
        self.stream.flush()


def train_steps(trainer: Trainer, batches, recipe: Recipe, bar: Progress, evaluate: Callable[[int], Any]) -> float:
    """The recipe's optimizer steps, one batch each, with `evaluate(step)` before the first,
    every `eval_every` steps and after the last; returns the seconds spent in the steps alone
    (what tokens per second divide by). The single-process and the torchrun path share it."""
    evaluate(0)
    train_seconds = 0.0
    for step in range(1, recipe.steps + 1):
        tick = time.monotonic()
        loss = trainer.train_batch(next(batches))
        train_seconds += time.monotonic() - tick
        bar.update(step, loss)
        if step % recipe.eval_every == 0 or step == recipe.steps:
            evaluate(step)
    return train_seconds


def pretrain(recipe: Recipe, out: Path | str, *, device: str | torch.device | None = "cpu", path: str | None = None,
             init: Path | str | None = None, progress: bool = True, compile: bool | str = False,
             attention_backend: str | None = None,
             on_eval: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Train per `recipe` and write a checkpoint directory to `out` (atomically). Returns the
    results stored in its runtime.json (train/val losses per eval, timings, parameter count).
    compile and attention_backend choose how the model runs (Trainer), not what it computes, so
    they are arguments rather than recipe fields."""
    started = time.monotonic()
    target_device = devices.resolve_device(device, argument="--device")
    path = path or devices.default_path(target_device)
    if (recipe.steps < 0 or recipe.batch_size <= 0 or recipe.seq_len < 1 or recipe.eval_every <= 0
            or (recipe.micro_batch_size is not None and recipe.micro_batch_size <= 0)):
        raise ConfigError(f"invalid recipe sizes: steps={recipe.steps} batch_size={recipe.batch_size} "
                          f"seq_len={recipe.seq_len} eval_every={recipe.eval_every} "
                          f"micro_batch_size={recipe.micro_batch_size}")

    if init is not None:
        model = checkpoint.load(init, device=target_device, path=path)
        config = model.config
        if model.tokenizer is None:
            raise DataError(f"{init}: no tokenizer.json; fine-tuning needs the tokenizer the model was trained "
                            "with (a new one would give its ids different meanings)")
        prepared = prepare_data(recipe, vocab_size=config.vocab_size, tokenizer=model.tokenizer)
    else:
        config = configs.preset(recipe.config)
        prepared = prepare_data(recipe, vocab_size=config.vocab_size)
        end_of_text = prepared.tokenizer.token_to_id(data.END_OF_TEXT)
        config = config.replace(bos_token_id=end_of_text, eos_token_id=end_of_text)
        model = checkpoint.init_model(config=config, weights="random", seed=recipe.seed, device=target_device,
                                      path=path)
        if recipe.bias_init_std:
            draw_biases(model, recipe.bias_init_std, recipe.seed)
    if recipe.seq_len > config.max_position_embeddings:
        raise ConfigError(f"seq_len {recipe.seq_len} exceeds the model's context of {config.max_position_embeddings}")
    model.tokenizer = prepared.tokenizer

    trainer = Trainer(model, lr=recipe.lr, weight_decay=recipe.weight_decay, betas=(recipe.beta1, recipe.beta2),
                      grad_clip=recipe.grad_clip, seed=recipe.seed, warmup_steps=recipe.warmup_steps,
                      total_steps=recipe.steps, min_lr=recipe.min_lr, compile=compile,
                      micro_batch_size=recipe.micro_batch_size, attention_backend=attention_backend)
    heldout_batches = prepared.heldout_batches(recipe)
    train_eval_batches = prepared.train_eval_batches(recipe)
    if recipe.pack_documents:
        batches = data.packed_batches(data.encode_documents(prepared.tokenizer, prepared.train_documents),
                                      batch_size=recipe.batch_size, seq_len=recipe.seq_len, seed=recipe.seed)
    else:
        batches = data.random_batches(prepared.train_stream, batch_size=recipe.batch_size, seq_len=recipe.seq_len,
                                      seed=recipe.seed)
    bar = Progress(recipe.steps, enabled=progress)
    history: list[dict[str, Any]] = []
    phases = {name: round(value, 2) for name, value in prepared.seconds.items()}
    bar.message("  ".join(f"{name} {value:.1f}s" for name, value in phases.items()))
    eval_seconds = 0.0

    def evaluate(step: int) -> dict[str, Any]:
        nonlocal eval_seconds
        tick = time.monotonic()
        record = {"step": step, "train_loss": trainer.evaluate(train_eval_batches),
                  "val_loss": trainer.evaluate(heldout_batches), "seconds": round(time.monotonic() - started, 2)}
        eval_seconds += time.monotonic() - tick
        history.append(record)
        bar.message(f"step {step:>5}/{recipe.steps}  train_loss {record['train_loss']:.4f}  "
                    f"val_loss {record['val_loss']:.4f}  ({record['seconds']:.0f}s)")
        if on_eval is not None:
            on_eval(record)
        return record

    train_seconds = train_steps(trainer, batches, recipe, bar, evaluate)

    final = history[-1]
    phases.update(training=round(train_seconds, 2), eval=round(eval_seconds, 2))
    bar.message(f"training {train_seconds:.1f}s ({recipe.steps} steps)  eval {eval_seconds:.1f}s ({len(history)} evals)")
    results = {
        "train_loss": final["train_loss"], "val_loss": final["val_loss"],
        "ln_vocab": math.log(config.vocab_size), "vocab_size": config.vocab_size,
        "tokenizer_vocab_size": prepared.tokenizer.get_vocab_size(),
        "parameters": config.num_parameters(), "steps": recipe.steps, "history": history,
        "train_documents": len(prepared.train_documents), "heldout_documents": len(prepared.heldout_documents),
        "train_tokens": int(prepared.train_stream.numel()), "heldout_tokens": int(prepared.heldout_stream.numel()),
        "tokens_per_second": round(recipe.steps * recipe.batch_size * recipe.seq_len / max(train_seconds, 1e-9), 1),
        "trained_tokens": recipe.steps * recipe.batch_size * recipe.seq_len,
        "phase_seconds": phases, "corpus": prepared.corpus_summary,
        "device": str(target_device), "path": path, "init": None if init is None else str(init),
        "seconds": round(time.monotonic() - started, 2), "torch": torch.__version__,
    }
    tick = time.monotonic()
    trainer.save(out, runtime_meta={"recipe": recipe.as_dict(), "recipe_digest": recipe.digest(), "results": results})
    results["phase_seconds"]["save"] = round(time.monotonic() - tick, 2)   # after the fact: not in runtime.json
    bar.message(f"save {results['phase_seconds']['save']:.1f}s")
    return results


def heldout_for_checkpoint(model: CausalLM, recipe: Recipe) -> PreparedData:
    """Rebuild the held-out split a checkpoint was trained against, tokenised with its tokenizer."""
    if model.tokenizer is None:
        raise DataError(f"{getattr(model, 'checkpoint_dir', 'the checkpoint')} has no tokenizer.json; "
                        "cannot tokenise a held-out corpus for it")
    return prepare_data(recipe, vocab_size=model.config.vocab_size, tokenizer=model.tokenizer)
