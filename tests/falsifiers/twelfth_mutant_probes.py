"""Probes of the twelfth blind batch of planted bugs (under "twelfth blind batch" in
mutants/attention.py, model.py, data.py, trainer.py, config.py and adapters.py;
docs/independent-mutants.md, "Twelfth batch"), for test_mutants.py: each is a cheap direct call
whose result changes while its mutant is active. Imported by test_mutants.py (which collects
every `probe_<mutant name>`)."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import torch

from adapter_mutant_probes import _checkpoint, _ids
from oracle_mutant_probes import tiny_model
from pvpack.adapters import transformers as hf_adapter
from pvpack.protocol import FAST, TrainSettings


def _rows(count: int, length: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, 512, (count, length), generator=generator).tolist()


# ---- attention and positions of padded / packed batches (runtime.kernels, runtime.model) -------------

def probe_masked_fast_attention_kv_heads_tiled():
    model = tiny_model(seed=3, path="fast")
    ids = torch.tensor(_rows(2, 8, seed=1))
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1], [1] * 8])
    with torch.no_grad():
        return model(ids, attention_mask=mask)


def probe_padded_positions_start_at_one():
    model = tiny_model(seed=3)
    ids = torch.tensor(_rows(2, 8, seed=2))
    with torch.no_grad():
        return model(ids, attention_mask=torch.ones_like(ids))


# ---- the held-out split (runtime.data) ----------------------------------------------------------------

def probe_heldout_count_floored():
    data = importlib.import_module("pvlab.runtime.data")
    documents = [f"def f{i}(x):\n    return x + {i}\n" for i in range(30)]
    _, held_out = data.split_documents(documents, val_fraction=0.25, seed=0)
    return len(held_out)


# ---- the trainer (runtime.trainer) --------------------------------------------------------------------

def probe_evaluate_weights_batches_by_positions():
    trainer = importlib.import_module("pvlab.runtime.trainer")
    data = importlib.import_module("pvlab.runtime.data")
    run = trainer.Trainer(tiny_model(seed=5))
    full = data.LMBatch.from_sequences(_rows(2, 9, seed=3))
    padded = data.LMBatch.from_sequences([_rows(1, 9, seed=4)[0], _rows(1, 3, seed=5)[0]])
    return run.evaluate([full, padded])


def _trained(weight_decay: float):
    trainer = importlib.import_module("pvlab.runtime.trainer")
    data = importlib.import_module("pvlab.runtime.data")
    run = trainer.Trainer(tiny_model(seed=6), lr=1e-2, weight_decay=weight_decay)
    run.train_batch(data.LMBatch.from_sequences(_rows(2, 9, seed=6)))
    return trainer, data, run


def probe_resume_drops_weight_decay():
    trainer, _, run = _trained(weight_decay=0.0)
    with tempfile.TemporaryDirectory() as directory:
        run.save(Path(directory) / "ckpt")
        resumed = trainer.Trainer.resume(Path(directory) / "ckpt")
    return resumed.optimizer.param_groups[0]["weight_decay"]


def probe_optimizer_moments_saved_in_bfloat16():
    trainer, _, run = _trained(weight_decay=0.1)
    with tempfile.TemporaryDirectory() as directory:
        run.save(Path(directory) / "ckpt")
        resumed = trainer.Trainer.resume(Path(directory) / "ckpt")
    return resumed.optimizer_digest()


# ---- config.json (runtime.config) ---------------------------------------------------------------------

def _hf_dict() -> dict:
    config = importlib.import_module("pvlab.runtime.config")
    return config.preset("tiny").replace(tie_word_embeddings=False).to_hf_dict()


def probe_absent_tie_key_reads_tied():
    config = importlib.import_module("pvlab.runtime.config")
    hf = _hf_dict()
    del hf["tie_word_embeddings"]
    return config.ModelConfig.from_hf_dict(hf).tie_word_embeddings


def probe_rope_type_read_from_legacy_key():
    config = importlib.import_module("pvlab.runtime.config")
    hf = _hf_dict()
    hf["rope_parameters"] = {"rope_type": "linear", "factor": 4.0, "rope_theta": hf["rope_theta"]}
    try:
        return config.ModelConfig.from_hf_dict(hf).rope_theta
    except Exception as error:  # noqa: BLE001 - the refusal is the behaviour
        return type(error).__name__


# ---- the transformers adapter (pvpack.adapters.transformers) ------------------------------------------

def probe_hf_fast_path_autocasts_to_float16():
    model = hf_adapter.TransformersAdapter().load(_checkpoint(), device="cpu", path=FAST)
    return model.logits(_ids(3))


def probe_hf_cosine_progress_ignores_warmup():
    model = hf_adapter.TransformersAdapter().load(_checkpoint(), device="cpu",
                                                  train=TrainSettings(lr=1e-3, warmup_steps=4, total_steps=20,
                                                                      min_lr=1e-4))
    return tuple(model.learning_rate(step) for step in range(20))
