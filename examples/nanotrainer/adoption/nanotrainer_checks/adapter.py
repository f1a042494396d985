"""nanotrainer behind pv's runtime protocol (pvpack.protocol): what the falsifier pack drives.

nanotrainer calls everything through its modules (`train.evaluate`, `train.lr_at`,
`model.fused_qkv`), so this adapter does too: a planted bug that patches one of them is seen.
Capabilities it lacks: gradient accumulation (train_step raises CapabilityMissing for
micro_batches > 1) and data_split (nanotrainer's corpus is one token stream, not documents).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

import nanotrainer
from nanotrainer import model as nano_model
from nanotrainer import train as nano_train
from pvpack.protocol import (FAST, GRADIENT_ACCUMULATION, IGNORE_INDEX, RANDOM, REFERENCE, Batch, CapabilityMissing,
                             RuntimeAdapter, RuntimeModel, TrainSettings)


def as_labels(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The protocol's (inputs, targets) — targets already shifted — as nanotrainer's (ids,
    labels), which shifts inside its loss: one more token on the right (the last target; causal
    attention keeps it from changing earlier logits) and labels one position later."""
    last = batch.targets[:, -1:].clamp(min=0)          # an ignored last target still needs a token id
    ids = torch.cat([batch.inputs, last], dim=1)
    ignored = torch.full_like(last, IGNORE_INDEX)
    return ids, torch.cat([ignored, batch.targets], dim=1)


class NanoModel(RuntimeModel):
    def __init__(self, gpt: nano_model.GPT, device: str, settings: TrainSettings | None):
        self.gpt, self.device = gpt, torch.device(device)
        self.trainer = None
        if settings is not None:
            if settings.micro_batches > 1:
                raise CapabilityMissing(GRADIENT_ACCUMULATION, detail="nanotrainer steps on whole batches")
            self.trainer = nano_train.Trainer(gpt, nano_train.TrainConfig(
                lr=settings.lr, min_lr=settings.floor_lr, warmup_steps=settings.warmup_steps,
                total_steps=settings.total_steps, weight_decay=settings.weight_decay, betas=tuple(settings.betas),
                eps=settings.eps, grad_clip=settings.grad_clip, seed=settings.seed))

    def _on_device(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        ids, labels = as_labels(batch)
        return ids.to(self.device), labels.to(self.device)

    def logits(self, inputs):
        self.gpt.eval()
        with torch.no_grad():
            return self.gpt(inputs.to(self.device))

    def loss(self, batch):
        self.gpt.eval()
        with torch.no_grad():
            return self.gpt.loss(*self._on_device(batch)).item()

    def train_step(self, batch):
        return self.trainer.train_step(*self._on_device(batch))

    def evaluate(self, batches):
        return nano_train.evaluate(self.gpt, [self._on_device(batch) for batch in batches])

    def learning_rate(self, step):
        return nano_train.lr_at(step, self.trainer.tc)

    def state(self):
        held = dict(self.gpt.state_dict())
        if self.gpt.cfg.tie_embeddings:
            held.pop("head.weight")                      # embed.weight itself; the checkpoint has it once
        return held

    def gradients(self):
        return {name: p.grad for name, p in self.gpt.named_parameters() if p.grad is not None}

    def save(self, directory):
        nano_train.save(self.gpt, directory)

    def generate(self, prompt, max_new_tokens):
        ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
        return nano_train.generate(self.gpt, ids, max_new_tokens)[0, len(prompt):].tolist()


class NanoTrainerAdapter(RuntimeAdapter):
    paths = (REFERENCE, FAST)

    def version(self) -> str:
        return f"nanotrainer {nanotrainer.__version__}"

    def load(self, checkpoint: Path, *, device: str, path: str = REFERENCE, init: str = "trained", seed: int = 0,
             train: TrainSettings | None = None) -> NanoModel:
        if init == RANDOM:
            config = json.loads((Path(checkpoint) / "config.json").read_text())
            config.pop("model_type", None)
            torch.manual_seed(seed)
            gpt = nano_model.GPT(nano_model.GPTConfig(**config))
        else:
            gpt = nano_train.load(checkpoint)
        return NanoModel(gpt.to(device).set_path(path), device, train)
