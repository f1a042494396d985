"""Probes of the ninth blind batch of planted bugs (in mutants/kernels.py, model.py, data.py and
checkpoint.py, each under "ninth blind batch"; docs/mutants.md, "Ninth blind batch"), for
test_mutants.py: each is a cheap direct call whose result changes while its mutant is active.
Imported by test_mutants.py (which collects every `probe_<mutant name>`)."""

from __future__ import annotations

import importlib
import json
import tempfile
from pathlib import Path

import torch

from pvlab.runtime.config import preset


def _tiny_random(seed: int = 0):
    model = importlib.import_module("pvlab.runtime.model")
    lm = model.CausalLM(preset("tiny"))
    model.init_weights(lm, seed)
    return lm.eval()


# ---- rotary embeddings and the decoding choice -----------------------------------------------------

def probe_rope_rotates_backwards():
    kernels = importlib.import_module("pvlab.runtime.kernels")
    x = torch.randn(1, 2, 5, 8, generator=torch.Generator().manual_seed(0))
    cos, sin = kernels.rope_cos_sin(10000.0, 8, torch.arange(5))
    return kernels.apply_rope(x, cos, sin)


def probe_greedy_pick_in_bfloat16():
    kernels = importlib.import_module("pvlab.runtime.kernels")
    logits = torch.tensor([[10.0, 10.01, 3.0], [1.0, 2.0, 2.004]])   # near-ties within bf16's resolution
    return kernels.pick_next_token(logits, 0.0, None)


# ---- generation requests ---------------------------------------------------------------------------

def probe_generation_runs_past_context():
    generate = importlib.import_module("pvlab.runtime.generate")
    errors = importlib.import_module("pvlab.runtime.errors")
    model = _tiny_random(seed=5)
    prompt = [1 + i % 50 for i in range(preset("tiny").max_position_embeddings - 2)]
    try:
        return len(generate.generate(model, prompt, max_new_tokens=6).new_ids)
    except errors.PromptTooLongError:
        return "refused"


# ---- the held-out split ----------------------------------------------------------------------------

def probe_leak_check_compares_text_with_digests():
    data = importlib.import_module("pvlab.runtime.data")
    return tuple(data.overlapping_documents(["a = 1\n", "b = 2\n"], ["b = 2\n", "c = 3\n"]))


def probe_heldout_split_seeded_by_model_seed():
    pretrain = importlib.import_module("pvlab.runtime.pretrain")
    recipe = pretrain.Recipe(num_documents=40, seed=7, data_seed=0, val_fraction=0.25)
    _, held_out, _ = pretrain.split_corpus(recipe)
    return tuple(held_out)


# ---- trainer checkpoints ---------------------------------------------------------------------------

def probe_saved_meta_prefers_loaded_model_meta():
    trainer = importlib.import_module("pvlab.runtime.trainer")
    model = _tiny_random(seed=6)
    model.runtime_meta = {"recipe": {"steps": 1}, "loaded_from": "base"}
    run = trainer.Trainer(model, lr=1e-3)
    with tempfile.TemporaryDirectory(prefix="pv-probe-") as directory:
        run.save(Path(directory) / "run", runtime_meta={"recipe": {"steps": 2}})
        return json.loads((Path(directory) / "run" / "runtime.json").read_text(encoding="utf-8"))["recipe"]["steps"]
