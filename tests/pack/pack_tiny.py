"""A tiny subject for the pack's tests, built in seconds without training: a random Qwen2-shaped
Hugging Face checkpoint (biases included) written by transformers, and a subject directory
(pvpack.subjects) with held-out/training batches and prompts drawn from a seeded generator."""

from __future__ import annotations

from pathlib import Path

import torch

from pvpack import subjects
from pvpack.protocol import IGNORE_INDEX, Batch

VOCAB, SEQ, ROWS = 64, 12, 2


def checkpoint(directory: Path, *, seed: int = 0) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # non-zero biases, so a dropped bias shows
        for name, parameter in model.named_parameters():
            if name.endswith("proj.bias"):
                parameter.normal_(0, 0.5)
    model.save_pretrained(str(directory), safe_serialization=True)
    return directory


def batches(count: int, seed: int) -> list[Batch]:
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        windows = torch.randint(0, VOCAB, (ROWS, SEQ + 1), generator=generator)
        out.append(Batch(windows[:, :-1].contiguous(), windows[:, 1:].contiguous()))
    return out


def subject(tmp: Path, *, name: str = "tiny-test", init: str = "trained") -> Path:
    ckpt = checkpoint(tmp / "checkpoint")
    held = batches(4, 1)
    last = held[-1].targets.clone()
    last[:, SEQ // 2:] = IGNORE_INDEX       # a batch with unscored positions
    held[-1] = Batch(held[-1].inputs, last)
    return subjects.write(tmp / "subject", name=name, checkpoint=ckpt, init=init, recorded={"val_loss": 4.2},
                          heldout=held, train=batches(8, 2), train_windows=batches(2, 3),
                          prompts=[list(range(1, 9)), list(range(9, 17))])
