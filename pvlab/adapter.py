"""pvlab.runtime as the falsifier pack sees it: its adapter, and the provider of its subjects.

`PvlabAdapter` drives the runtime through its public entry points, looked up at call time (so a
planted bug that swaps one of them reaches the pack's checks exactly as it reaches pvlab's own):

| capability            | pvlab.runtime                                                             |
| load (trained)        | checkpoint.load(dir, device, path, parity_gate=False)                     |
| load (trained, train) | pretrain's own view of checkpoint.load — the seam fine-tuning (--init) uses |
| load (random)         | checkpoint.init_model(config, weights="random", seed)                     |
| logits                | CausalLM.__call__ in eval mode                                            |
| loss                  | CausalLM.loss                                                             |
| train_step, gradient accumulation | Trainer.train_batch (micro_batch_size = rows / micro_batches)  |
| evaluate              | Trainer.evaluate (the runtime's eval loop)                                |
| learning_rate         | trainer.learning_rate with the Trainer's hyperparameters                  |
| state / gradients     | state_dict / each parameter's .grad after the step                        |
| save                  | checkpoint.save_checkpoint                                                |
| generate              | generate.generate(temperature=0) (its KV-cache decode loop)               |
| data_split            | pretrain.split_corpus(recipe) with the subject's recorded recipe          |

`subject_directory(name)` is this project's `[tool.pv] subject_provider`: it writes a pack
subject directory (pvpack.subjects) for a pvlab subject — its checkpoint, its held-out batches as
pvlab's eval scores them, training batches from pvlab's sampler, fixed training windows,
held-out prompts — built once into the checkpoint cache with every planted bug lifted (the
batches are data, never the code under test).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import torch

from pvpack.protocol import (CAPABILITIES, FAST, RANDOM, REFERENCE, TRAINED, Batch, RuntimeAdapter, RuntimeModel,
                             TrainSettings)

HELDOUT_BATCHES, TRAIN_BATCHES, PROMPTS, PROMPT_TOKENS = 8, 32, 8, 16
PROVIDER_FORMAT = "1"  # bump when what the provider writes changes: a new cache entry


def _lm_batch(batch: Batch):
    from pvlab.runtime.data import LMBatch

    return LMBatch(batch.inputs, batch.targets)


class PvlabModel(RuntimeModel):
    def __init__(self, model, train: TrainSettings | None):
        from pvlab.runtime.trainer import Trainer

        self.model = model
        self.settings = train
        self.trainer = None
        if train is not None:
            self.trainer = Trainer(model, lr=train.lr, weight_decay=train.weight_decay, betas=tuple(train.betas),
                                   grad_clip=train.grad_clip, seed=train.seed, warmup_steps=train.warmup_steps,
                                   total_steps=train.total_steps, min_lr=train.min_lr)
        model.eval()

    def _evaluator(self):
        if self.trainer is None:
            from pvlab.runtime.trainer import Trainer

            self.trainer = Trainer(self.model)
        return self.trainer

    def logits(self, inputs: torch.Tensor) -> torch.Tensor:
        self.model.eval()
        with torch.no_grad():
            return self.model(inputs.to(self.model.device))

    def loss(self, batch: Batch) -> float:
        self.model.eval()
        with torch.no_grad():
            return float(self.model.loss(batch.inputs.to(self.model.device), batch.targets.to(self.model.device)))

    def train_step(self, batch: Batch) -> float:
        micro = self.settings.micro_batches
        self.trainer.micro_batch_size = math.ceil(batch.inputs.shape[0] / micro) if micro > 1 else None
        loss = self.trainer.train_batch(_lm_batch(batch))
        self.model.eval()
        return loss

    def evaluate(self, batches: Sequence[Batch]) -> float:
        return self._evaluator().evaluate([_lm_batch(b) for b in batches])

    def learning_rate(self, step: int) -> float:
        from pvlab.runtime import trainer

        h = self.trainer.hyperparameters
        return trainer.learning_rate(step, peak=h["lr"], warmup_steps=h["warmup_steps"],
                                     total_steps=h["total_steps"], min_lr=h["min_lr"])

    def state(self):
        return dict(self.model.state_dict())

    def gradients(self):
        return {name: p.grad for name, p in self.model.named_parameters() if p.grad is not None}

    def save(self, directory: Path) -> None:
        from pvlab.runtime import checkpoint

        checkpoint.save_checkpoint(self.model, directory)

    def generate(self, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
        from pvlab.runtime.generate import generate

        return list(generate(self.model, list(prompt), max_new_tokens=max_new_tokens, temperature=0.0).new_ids)


class PvlabAdapter(RuntimeAdapter):
    """pvlab.runtime: reference path (fp32, explicit maths) and fast path (bf16, fused kernels)."""

    paths = (REFERENCE, FAST)
    capabilities = frozenset(CAPABILITIES)

    def version(self) -> str:
        from importlib import metadata

        try:
            return f"pv-lab {metadata.version('pv-lab')}"
        except metadata.PackageNotFoundError:
            return "pv-lab (not installed)"

    def load(self, checkpoint: Path, *, device: str, path: str = REFERENCE, init: str = TRAINED, seed: int = 0,
             train: TrainSettings | None = None) -> PvlabModel:
        import importlib

        from pvlab.runtime import checkpoint as runtime_checkpoint
        from pvlab.runtime.config import ModelConfig

        if init == RANDOM:
            config = ModelConfig.from_json_file(Path(checkpoint) / "config.json")
            model = runtime_checkpoint.init_model(config=config, weights="random", seed=seed, device=device,
                                                  path=path, parity_gate=False)
        elif train is not None:
            # Fine-tuning from a checkpoint loads it through runtime.pretrain's view of the
            # checkpoint module (pretrain(init=...)): the seam a fine-tune-only defect lives in.
            pretrain = importlib.import_module("pvlab.runtime.pretrain")
            model = pretrain.checkpoint.load(checkpoint, device=device, path=path, parity_gate=False)
        else:
            model = runtime_checkpoint.load(checkpoint, device=device, path=path, parity_gate=False)
        return PvlabModel(model, train)

    def data_split(self, subject_data: Path):
        import json

        from pvlab.runtime.pretrain import Recipe, split_corpus

        meta = json.loads((Path(subject_data) / "subject.json").read_text(encoding="utf-8"))
        recipe = (meta.get("data") or {}).get("recipe")
        if recipe is None:
            raise ValueError(f"{subject_data}: the subject records no pvlab recipe to split")
        train, held_out, _ = split_corpus(Recipe.from_dict(recipe))
        return train, held_out


# ---- the subject provider ------------------------------------------------------------------------

def subject_directory(name: str) -> Path:
    """The pack subject directory of a pvlab subject (tiny-trained, qwen2-0.5b-stdlib, ...) or of
    its random twin (tiny-random, ...-random), built on first use."""
    import hashlib
    import json

    from pvlab.falsifiers import fixtures
    from pvlab.runtime import zoo

    trained = fixtures.trained_of(name)
    checkpoint = fixtures.checkpoint_dir(trained)
    meta = json.loads((checkpoint / "runtime.json").read_text(encoding="utf-8"))
    key = hashlib.sha256(json.dumps([PROVIDER_FORMAT, str(checkpoint), meta.get("recipe_digest"), name],
                                    sort_keys=True).encode()).hexdigest()

    def build(out: Path) -> dict:
        _write_subject(out, name, checkpoint, meta, random=fixtures.is_random(name))
        return {"subject": name, "checkpoint": str(checkpoint)}

    return zoo.build_cached(f"pack-{name}", key, build)


def _write_subject(out: Path, name: str, checkpoint: Path, meta: dict, *, random: bool) -> None:
    """Batches straight from pvlab.runtime (never the falsifier fixtures' caches, which are keyed
    by the planted bug of the moment)."""
    import dataclasses

    from tokenizers import Tokenizer

    from pvlab.runtime import data
    from pvlab.runtime.config import ModelConfig
    from pvlab.runtime.pretrain import Recipe, prepare_data

    from pvpack import subjects

    recipe = Recipe.from_dict(meta["recipe"])
    tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    vocab_size = ModelConfig.from_json_file(checkpoint / "config.json").vocab_size
    prepared = prepare_data(recipe, vocab_size=vocab_size, tokenizer=tokenizer)
    windows = dataclasses.replace(recipe, eval_batches=HELDOUT_BATCHES)
    sampler = data.random_batches(prepared.train_stream, batch_size=recipe.batch_size, seq_len=recipe.seq_len,
                                  seed=recipe.seed)
    prompts = []
    for document in prepared.heldout_documents:
        ids = tokenizer.encode(document).ids
        if len(ids) >= PROMPT_TOKENS:
            prompts.append(ids[:PROMPT_TOKENS])
        if len(prompts) == PROMPTS:
            break
    as_batch = lambda b: Batch(b.inputs, b.targets)  # noqa: E731
    subjects.write(out, name=name, checkpoint=checkpoint, init=RANDOM if random else TRAINED, seed=0,
                   recorded={} if random else {"val_loss": float(meta["results"]["val_loss"])},
                   data={"recipe": recipe.as_dict()},
                   heldout=[as_batch(b) for b in prepared.heldout_batches(windows)],
                   train=[as_batch(next(sampler)) for _ in range(TRAIN_BATCHES)],
                   train_windows=[as_batch(b) for b in prepared.train_eval_batches(windows)],
                   prompts=prompts)
