"""The Hugging Face transformers adapter: AutoModelForCausalLM with a standard training step.

What "standard" means here (each a seam a planted bug can be written against):
- loss: mean next-token cross-entropy over scored targets (ignore index -100), computed from the
  model's logits in float32 (`token_loss`);
- optimizer: torch.optim.AdamW (decoupled weight decay) over every trainable parameter, gradient
  clipping by global L2 norm when grad_clip > 0 (`clip`);
- schedule: linear warmup to the peak over warmup_steps, then cosine decay to min_lr at
  total_steps (`schedule`), applied before each step;
- gradient accumulation: the batch split into micro_batches row blocks, each block's mean loss
  weighted by its share of the step's scored tokens (`micro_weight`), one update;
- eval loop: model.eval(), no gradients, the token-weighted mean over batches (`evaluate`);
- checkpoints: save_pretrained (safetensors) / from_pretrained;
- generation: model.generate(do_sample=False) with its KV cache.

Execution paths: "reference" runs fp32 weights with transformers' eager attention (explicit
matmul + softmax); "fast" keeps fp32 weights and runs the forward under bf16 autocast with the
SDPA attention implementation (fused kernels where the device has them) — mixed precision as
transformers users train. A transformers + Liger adapter replaces the fast path's kernels.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import torch

import contextlib

from ..protocol import (CAPABILITIES, DATA_SPLIT, FAST, GRADIENT_ACCUMULATION, IGNORE_INDEX, RANDOM, REFERENCE,
                        TRAINED, Batch, CapabilityMissing, RuntimeAdapter, RuntimeModel, TrainSettings)

ATTENTION = {REFERENCE: "eager", FAST: "sdpa"}


def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over targets that are not IGNORE_INDEX (logits already aligned)."""
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                             ignore_index=IGNORE_INDEX, reduction="mean")


def schedule(step: int, settings: TrainSettings) -> float:
    """Linear warmup to lr over warmup_steps (step 0 runs at lr / warmup_steps), then cosine decay
    to the floor at total_steps; constant lr without total_steps."""
    peak, floor = settings.lr, settings.floor_lr
    if settings.warmup_steps and step < settings.warmup_steps:
        return peak * (step + 1) / settings.warmup_steps
    if not settings.total_steps:
        return peak
    if step >= settings.total_steps:
        return floor
    progress = (step - settings.warmup_steps) / max(1, settings.total_steps - settings.warmup_steps)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def micro_weight(micro_tokens: int, step_tokens: int) -> float:
    """A micro-batch's share of the step's scored tokens (its mean loss times this, summed over
    micro-batches, is the mean over every token of the step)."""
    return micro_tokens / step_tokens


def clip(parameters: Sequence[torch.nn.Parameter], max_norm: float) -> None:
    if max_norm > 0:
        torch.nn.utils.clip_grad_norm_(parameters, max_norm)


def checkpoint_names(model, tensors: dict) -> dict:
    """`tensors` (by module name) under the names save_pretrained writes: transformers 5 renames
    or fuses some checkpoint tensors as it loads them (GPT-NeoX's file `embed_out.weight` is the
    module's `lm_head.weight`; Mixtral's per-expert w1/w2/w3 become fused expert tensors) and
    reverts that on save. The protocol speaks checkpoint names."""
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # transformers 4: a module's names are its checkpoint's names
        return dict(tensors)
    return dict(revert_weight_conversion(model, dict(tensors)))


class TransformersModel(RuntimeModel):
    def __init__(self, model, device: torch.device, train: TrainSettings | None, path: str = REFERENCE):
        self.model, self.device, self.settings, self.path = model, device, train, path
        self.step = 0
        self.optimizer = None
        if train is not None:
            self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=train.lr,
                                               betas=tuple(train.betas), eps=train.eps,
                                               weight_decay=train.weight_decay)
        self.model.eval()

    def precision(self):
        """bf16 autocast on the fast path; fp32 on the reference path."""
        if self.path == FAST:
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _forward(self, inputs: torch.Tensor) -> torch.Tensor:
        with self.precision():
            return self.model(input_ids=inputs.to(self.device), use_cache=False).logits

    def logits(self, inputs: torch.Tensor) -> torch.Tensor:
        self.model.eval()
        with torch.no_grad():
            return self._forward(inputs)

    def loss(self, batch: Batch) -> float:
        self.model.eval()
        with torch.no_grad():
            return float(token_loss(self._forward(batch.inputs), batch.targets.to(self.device)))

    def train_step(self, batch: Batch) -> float:
        settings = self.settings
        if settings.micro_batches < 1:
            raise ValueError(f"micro_batches must be >= 1, got {settings.micro_batches}")
        self.model.train()
        lr = self.learning_rate(self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        rows = batch.inputs.shape[0]
        size = math.ceil(rows / settings.micro_batches)
        parts = [(batch.inputs[i:i + size], batch.targets[i:i + size]) for i in range(0, rows, size)]
        step_tokens = int((batch.targets != IGNORE_INDEX).sum())
        if step_tokens == 0:
            raise ValueError("train_step was given no scored target tokens")
        total = 0.0
        for inputs, targets in parts:
            tokens = int((targets != IGNORE_INDEX).sum())
            if tokens == 0:
                continue
            loss = token_loss(self._forward(inputs), targets.to(self.device)) * micro_weight(tokens, step_tokens)
            loss.backward()
            total += float(loss.detach())
        clip(list(self.model.parameters()), settings.grad_clip)
        self.optimizer.step()
        self.step += 1
        self.model.eval()
        return total

    def evaluate(self, batches: Sequence[Batch]) -> float:
        self.model.eval()
        total, tokens = 0.0, 0
        with torch.no_grad():
            for batch in batches:
                count = batch.target_tokens
                total += float(token_loss(self._forward(batch.inputs), batch.targets.to(self.device))) * count
                tokens += count
        if tokens == 0:
            raise ValueError("evaluate was given no scored target tokens")
        return total / tokens

    def learning_rate(self, step: int) -> float:
        if self.settings is None:
            raise ValueError("no schedule: the model was loaded without TrainSettings")
        return schedule(step, self.settings)

    def state(self):
        return checkpoint_names(self.model, self.model.state_dict())

    def gradients(self):
        return checkpoint_names(self.model, {name: p.grad for name, p in self.model.named_parameters()
                                             if p.grad is not None})

    def save(self, directory: Path) -> None:
        self.model.save_pretrained(str(directory), safe_serialization=True)

    def generate(self, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
        self.model.eval()
        inputs = torch.tensor([list(prompt)], dtype=torch.long, device=self.device)
        eos = self.model.config.eos_token_id
        # Llama 3 configs list several end-of-sequence ids; generate takes one pad id (any will do:
        # one unpadded row is never padded), while decoding still stops at each listed eos id.
        pad = eos[0] if isinstance(eos, (list, tuple)) and eos else eos
        with torch.no_grad(), self.precision():
            out = self.model.generate(inputs, attention_mask=torch.ones_like(inputs), do_sample=False,
                                      max_new_tokens=max_new_tokens, pad_token_id=pad if isinstance(pad, int) else 0)
        return out[0, len(prompt):].tolist()

    def close(self) -> None:
        self.model = None
        self.optimizer = None


class TransformersAdapter(RuntimeAdapter):
    """transformers' AutoModelForCausalLM: reference (fp32, eager) and fast (bf16 autocast, SDPA)."""

    paths = (REFERENCE, FAST)
    capabilities = frozenset(CAPABILITIES) - {DATA_SPLIT}  # no data pipeline of its own

    def version(self) -> str:
        import transformers

        return f"transformers {transformers.__version__}"

    def load(self, checkpoint: Path, *, device: str, path: str = REFERENCE, init: str = TRAINED, seed: int = 0,
             train: TrainSettings | None = None) -> TransformersModel:
        from transformers import AutoConfig, AutoModelForCausalLM

        if path not in ATTENTION:
            raise ValueError(f"unknown path {path!r}")
        if train is not None and train.micro_batches < 1:
            raise ValueError(f"micro_batches must be >= 1, got {train.micro_batches}")
        target = torch.device(device)
        if init == RANDOM:
            config = AutoConfig.from_pretrained(str(checkpoint))
            config._attn_implementation = ATTENTION[path]
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        else:
            model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32,
                                                         attn_implementation=ATTENTION[path])
        model.to(target)
        if train is not None:
            torch.manual_seed(train.seed)
        return TransformersModel(model, target, train, path)
