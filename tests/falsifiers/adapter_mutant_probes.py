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


@functools.lru_cache(maxsize=2)
def _checkpoint(tied: bool = False) -> Path:
    """A random Qwen2-shaped checkpoint with non-zero Q/K/V biases (kept for the session)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=tied)
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


def _reference(**kwargs):
    return TransformersAdapter().load(_checkpoint(), device="cpu", path=REFERENCE, **kwargs)


def _batch(seed: int) -> Batch:
    ids = _ids(seed)
    return Batch(ids[:, :-1], ids[:, 1:])


def probe_hf_loader_reads_wrong_byte_order():
    return _reference().logits(_ids(4))


def probe_hf_tied_head_uninitialised():
    return TransformersAdapter().load(_checkpoint(tied=True), device="cpu", path=REFERENCE).logits(_ids(5))


def probe_hf_populate_drops_optional_tensors():
    return tuple(sorted(name for name in _reference().state() if name.endswith(".bias")))


def probe_hf_final_norm_skipped():
    return _reference().logits(_ids(6))


def probe_hf_finetune_starts_from_random_init():
    return round(_reference(train=TrainSettings(lr=1e-3)).evaluate([_batch(7)]), 6)


def probe_hf_optimizer_holds_stale_parameters():
    model = _reference(train=TrainSettings(lr=1e-2))
    before = model.evaluate([_batch(8)])
    model.train_step(_batch(9))
    return round(model.evaluate([_batch(8)]) - before, 6)


def probe_hf_cross_entropy_off_by_one():
    return round(_reference().evaluate([_batch(10)]), 6)


def probe_hf_cross_entropy_mean_over_batch_not_tokens():
    return round(_reference().evaluate([_batch(11)]), 6)


def probe_hf_eval_targets_equal_inputs():
    return round(_reference().evaluate([_batch(12)]), 6)


def probe_hf_eval_reads_stale_train_buffer():
    model = _reference(train=TrainSettings(lr=1e-3))
    model.train_step(_batch(13))
    return round(model.evaluate([_batch(14)]), 6)


def probe_hf_head_padded_rows_unmasked():
    return tuple(_reference().logits(_ids(15)).shape)


def probe_hf_greedy_decode_samples():
    model = _reference()
    return tuple(model.generate([1, 2, 3], 8)) + tuple(model.generate([1, 2, 3], 8))
