"""nanotrainer behind pv's runtime protocol (pvpack.protocol): what the falsifier pack drives.

nanotrainer calls everything through its modules (`train.evaluate`, `train.lr_at`,
`model.fused_qkv`), so this adapter does too: a planted bug that patches one of them is seen.
The learning rate is read back from the optimizer that nanotrainer's own Trainer set, never
recomputed from the schedule's formula here.
Capability it lacks: gradient accumulation (train_step raises CapabilityMissing for
micro_batches > 1). Its data split is of one token stream, not of documents: data_split gives as
"documents" the windows nanotrainer trains and evaluates on (below).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

import nanotrainer
from nanotrainer import data as nano_data
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
        """The rate the optimizer holds when Trainer.train_step updates at `step`: a throwaway
        copy of the trainer is stepped once there (a two-token batch) and a pre-step hook on its
        optimizer reads the rate. The trainer's own code path, so a bug in how it applies its
        schedule (set after the update, one group forgotten) is seen, not only one in lr_at."""
        if self.trainer is None:
            raise ValueError("no schedule: the model was loaded without TrainSettings")
        probe = copy.deepcopy(self.trainer)
        probe.step = step
        applied = []
        probe.optimizer.register_step_pre_hook(
            lambda optimizer, args, kwargs: applied.append({group["lr"] for group in optimizer.param_groups}))
        probe.train_step(torch.zeros((1, 2), dtype=torch.long, device=self.device))
        if len(applied) != 1 or len(applied[0]) != 1:
            raise ValueError(f"one optimizer step with one rate for every parameter group expected at step {step}; "
                             f"the trainer applied {applied}")
        return applied[0].pop()

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

    def data_split(self, subject_data):
        """nanotrainer's split of the subject's corpus (subject.json "data": the corpus settings
        and the window width), through nanotrainer's own `data.corpus`: as train documents every
        window `data.random_batch` can draw from the train stream (every offset), as held-out
        documents the consecutive windows eval scores from the held-out stream; a window is its
        token ids joined by spaces."""
        meta = json.loads((Path(subject_data) / "subject.json").read_text())["data"]
        split = nano_data.corpus(**meta["corpus"])
        width = int(meta["window"])
        train, heldout = split["train"], split["heldout"]
        joined = lambda rows: [" ".join(map(str, row)) for row in rows.tolist()]  # noqa: E731
        return (joined(train.unfold(0, width, 1)[: len(train) - width]),
                joined(heldout[: len(heldout) // width * width].view(-1, width)))
