"""Probes of the planted bugs of pvlab/falsifiers/mutants/adapters.py (the pack's transformers
adapter), collected by test_mutants.py (PROBES): each a cheap direct call through the adapter
whose result changes while the bug is planted."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import torch

from pvpack.adapters.transformers import TransformersAdapter
from pvpack.protocol import FAST, IGNORE_INDEX, REFERENCE, Batch, TrainSettings


@functools.lru_cache(maxsize=1)
def _checkpoint() -> Path:
    """A random Qwen2-shaped checkpoint with non-zero Q/K/V biases (kept for the session)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("proj.bias"):
                parameter.normal_(0, 0.5)
    directory = Path(tempfile.mkdtemp(prefix="pv-hf-probe-"))
    model.save_pretrained(str(directory), safe_serialization=True)
    return directory


def _ids(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(seed))


def probe_hf_fast_path_drops_qkv_bias():
    model = TransformersAdapter().load(_checkpoint(), device="cpu", path=FAST)
    return tuple(sorted(name for name in model.state() if name.endswith("proj.bias")))


def probe_hf_evaluate_averages_batch_means():
    model = TransformersAdapter().load(_checkpoint(), device="cpu", path=REFERENCE)
    full = Batch(_ids(1)[:, :-1], _ids(1)[:, 1:])
    short_targets = _ids(2)[:, 1:].clone()
    short_targets[:, 2:] = IGNORE_INDEX
    return round(model.evaluate([full, Batch(_ids(2)[:, :-1], short_targets)]), 6)


def probe_hf_warmup_never_warms():
    model = TransformersAdapter().load(_checkpoint(), device="cpu", train=TrainSettings(lr=1e-3, warmup_steps=4,
                                                                                        total_steps=10))
    return tuple(round(model.learning_rate(step), 9) for step in range(6))


def probe_hf_fast_path_attention_scale_wrong():
    model = TransformersAdapter().load(_checkpoint(), device="cpu", path=FAST)
    return model.logits(_ids(3))
