"""Training, evaluation, checkpoints and greedy generation for nanotrainer's GPT.

    python -m nanotrainer.train OUT_DIR [--steps 300] [--seed 0]

trains on the synthetic corpus (data.py) and saves OUT_DIR/config.json + OUT_DIR/model.safetensors.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from . import data
from .model import GPT, IGNORE_INDEX, GPTConfig


@dataclass
class TrainConfig:
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 20
    total_steps: int | None = 300  # None: constant lr after warmup
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    grad_clip: float = 1.0
    batch_size: int = 16
    seq_len: int = 32
    seed: int = 0


def lr_at(step: int, tc: TrainConfig) -> float:
    """Linear warmup to tc.lr over warmup_steps (step 0 already trains), then cosine to min_lr."""
    if step < tc.warmup_steps:
        return tc.lr * (step + 1) / tc.warmup_steps
    if tc.total_steps is None:
        return tc.lr
    progress = min(1.0, (step - tc.warmup_steps) / max(1, tc.total_steps - tc.warmup_steps))
    return tc.min_lr + 0.5 * (tc.lr - tc.min_lr) * (1 + math.cos(math.pi * progress))


def build_optimizer(model: GPT, tc: TrainConfig) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (not on biases, norms)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": tc.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=tc.lr, betas=tc.betas, eps=tc.eps)


def clip_gradients(model: GPT, max_norm: float) -> None:
    """Scale every gradient by one factor so their global L2 norm is at most max_norm."""
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)


class Trainer:
    def __init__(self, model: GPT, tc: TrainConfig):
        self.model, self.tc = model, tc
        self.optimizer = build_optimizer(model, tc)
        self.step = 0

    def train_step(self, ids: torch.Tensor, labels: torch.Tensor | None = None) -> float:
        """One optimizer step on one batch; returns the batch's loss before the step. The
        gradients stay on the parameters until the next step (for inspection)."""
        self.optimizer.zero_grad(set_to_none=True)
        lr = lr_at(self.step, self.tc)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        loss = self.model.loss(ids, ids if labels is None else labels)
        loss.backward()
        if self.tc.grad_clip:
            clip_gradients(self.model, self.tc.grad_clip)
        self.optimizer.step()
        self.step += 1
        return loss.item()


@torch.no_grad()
def evaluate(model: GPT, batches) -> float:
    """Mean cross-entropy over every scored token of the (ids, labels) batches: batches of
    different sizes or padding weigh by their tokens, not equally."""
    model.eval()
    total, tokens = 0.0, 0
    for ids, labels in batches:
        total += model.loss(ids, labels, reduction="sum").item()
        tokens += int((labels[:, 1:] != IGNORE_INDEX).sum())
    if tokens == 0:
        raise ValueError("evaluate() got no scored tokens")
    return total / tokens


@torch.no_grad()
def generate(model: GPT, ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy decoding (no cache: every step runs the whole window)."""
    model.eval()
    for _ in range(new_tokens):
        window = ids[:, -model.cfg.max_seq_len:]
        next_id = model(window)[:, -1].argmax(dim=-1, keepdim=True)
        ids = torch.cat([ids, next_id], dim=1)
    return ids


def save(model: GPT, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"model_type": "nanotrainer-gpt", **asdict(model.cfg)}, indent=2))
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if model.cfg.tie_embeddings:
        state.pop("head.weight")  # the same tensor as embed.weight
    save_file(state, str(out / "model.safetensors"))
    return out


def load(checkpoint_dir: str | Path, device: str | torch.device = "cpu") -> GPT:
    path = Path(checkpoint_dir)
    config = json.loads((path / "config.json").read_text())
    if config.pop("model_type", None) != "nanotrainer-gpt":
        raise ValueError(f"{path / 'config.json'} is not a nanotrainer checkpoint")
    model = GPT(GPTConfig(**config))
    state = load_file(str(path / "model.safetensors"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - ({"head.weight"} if model.cfg.tie_embeddings else set()):
        raise ValueError(f"{path}: missing {missing}, unexpected {unexpected}")
    return model.to(device)


def train(out_dir: str | Path, *, cfg: GPTConfig | None = None, tc: TrainConfig | None = None) -> Path:
    cfg, tc = cfg or GPTConfig(), tc or TrainConfig()
    torch.manual_seed(tc.seed)
    model = GPT(cfg)
    trainer = Trainer(model, tc)
    tokens = data.corpus(cfg.vocab_size, seed=tc.seed)["train"]
    generator = torch.Generator().manual_seed(tc.seed)
    for _ in range(tc.total_steps):
        trainer.train_step(data.random_batch(tokens, tc.batch_size, tc.seq_len, generator))
    return save(model, out_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--steps", type=int, default=TrainConfig.total_steps)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(train(args.out_dir, tc=TrainConfig(total_steps=args.steps, seed=args.seed)))


if __name__ == "__main__":
    main()
