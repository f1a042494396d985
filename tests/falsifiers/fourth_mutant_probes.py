"""Probes of the fourth blind batch of planted bugs (in mutants/trainer.py, kernels.py,
attention.py, model.py, checkpoint.py, data.py, distributed.py, config.py and entrypoints.py,
each under "fourth blind batch"; docs/mutants.md, "Fourth blind batch"), for test_mutants.py:
each is a cheap direct call whose result changes while its mutant is active. Imported by
test_mutants.py (which collects every `probe_<mutant name>`)."""

from __future__ import annotations

import importlib

import torch

from pvlab.runtime import checkpoint, data, distributed, graph_decode, kernels, trainer
from pvlab.runtime import model as models
from pvlab.runtime.config import ModelConfig, preset
from pvlab.runtime.model import CausalLM, KVCache


def _tiny(seed: int = 0, **changes) -> CausalLM:
    model = CausalLM(preset("tiny").replace(**changes))
    models.init_weights(model, seed)
    return model.eval()


# ---- the trainer -----------------------------------------------------------------------------------

def probe_warmup_step_overshoots_peak():
    return tuple(trainer.learning_rate(step, peak=1.0, warmup_steps=4, total_steps=10, min_lr=0.1)
                 for step in range(12))


def probe_final_norm_weight_decayed():
    return tuple(name for name, parameter in _tiny().named_parameters() if trainer.decays(name, parameter))


# ---- sampling --------------------------------------------------------------------------------------

def probe_top_k_threshold_from_kthvalue():
    logits = torch.linspace(0.0, 3.0, 16).expand(64, 16)
    return kernels.sample_pick(logits, 1.0, torch.Generator().manual_seed(12), top_k=3)


# ---- decoding with a cache -------------------------------------------------------------------------

def probe_static_decode_positions_one_late():
    # initializer_range 0.3: at the default 0.02 a random tied model only repeats the prompt's last token
    model = _tiny(seed=0, initializer_range=0.3)
    return tuple(graph_decode.greedy_generate(model, [5, 9, 17, 33, 65], max_new_tokens=8, use_graph=False))


def probe_rope_rotates_cached_keys_at_newest_position():
    ids = torch.randint(0, preset("tiny").vocab_size, (1, 8), generator=torch.Generator().manual_seed(4))
    model, cache = _tiny(seed=4), KVCache(preset("tiny").num_hidden_layers)
    with torch.no_grad():
        return torch.cat([model(ids[:, :5], cache), model(ids[:, 5:6], cache), model(ids[:, 6:7], cache)], dim=1)


# ---- checkpoint I/O --------------------------------------------------------------------------------

def probe_unexpected_tensors_ignored_on_load():
    state = {name: t.detach().clone() for name, t in checkpoint.model_tensors(_tiny(seed=5)).items()}
    state["model.layers.0.self_attn.o_proj.bias"] = torch.ones(preset("tiny").hidden_size)
    try:
        model = checkpoint.init_model(config=preset("tiny"), weights=state, parity_gate=False)
        return "accepted", model.populate_report.ignored
    except Exception as error:  # noqa: BLE001 - which refusal it is, is the probe
        return type(error).__name__


# ---- data ------------------------------------------------------------------------------------------

def probe_packed_pieces_do_not_overlap():
    return data.pack_documents([list(range(1, 14)), [20, 21, 22]], seq_len=4)


def probe_rank_sampler_reuses_first_epoch_order():
    windows = torch.arange(16 * 5).view(16, 5)
    sampler = distributed.RankWindows(windows, rank=1, world_size=2, batch_size=2, seed=0)
    return tuple(tuple(sampler.next_indices()) for _ in range(8))    # four steps an epoch: two epochs


# ---- config.json -----------------------------------------------------------------------------------

def probe_eos_token_list_read_as_none():
    return ModelConfig.from_hf_dict({**preset("tiny").to_hf_dict(), "eos_token_id": [0, 1]}).eos_token_id


# ---- the pretraining pipeline ----------------------------------------------------------------------

def probe_tokenizer_trained_on_heldout_documents():
    pretrain = importlib.import_module("pvlab.runtime.pretrain")
    recipe = pretrain.Recipe(num_documents=40, val_fraction=0.25, data_seed=3)
    prepared = pretrain.prepare_data(recipe, vocab_size=320)
    return prepared.tokenizer.to_str(), prepared.train_stream
