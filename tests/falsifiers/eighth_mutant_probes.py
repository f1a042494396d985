"""Probes of the eighth blind batch of planted bugs (in mutants/model.py, data.py, config.py, oracles.py,
kernels.py and distributed.py, each under "eighth blind batch"; docs/mutants.md,
"Eighth blind batch"), for test_mutants.py: each is a cheap direct call whose result changes
while its mutant is active. Imported by test_mutants.py (which collects every `probe_<mutant name>`)."""

from __future__ import annotations

import importlib

import torch

from pvlab.runtime.config import ModelConfig, preset


def _tiny_random(seed: int = 0):
    model = importlib.import_module("pvlab.runtime.model")
    lm = model.CausalLM(preset("tiny"))
    model.init_weights(lm, seed)
    return lm.eval()


# ---- model initialisation and text generation ------------------------------------------------------

def probe_init_std_from_hidden_size():
    return _tiny_random(seed=3).model.layers[0].mlp.up_proj.weight.detach().clone()


def probe_generated_text_drops_last_token():
    data = importlib.import_module("pvlab.runtime.data")
    generate = importlib.import_module("pvlab.runtime.generate")
    tokenizer = data.train_tokenizer(data.synthetic_python_corpus(30, 0), 300)
    return generate.generate_text(_tiny_random(seed=4), tokenizer, "def fib(n):", max_new_tokens=6,
                                  stop_at_eos=False)


# ---- eval windows --------------------------------------------------------------------------------

def probe_heldout_last_short_batch_dropped():
    data = importlib.import_module("pvlab.runtime.data")
    batches = data.sequential_batches(torch.arange(100), batch_size=3, seq_len=9)   # 10 windows: 3+3+3+1
    return tuple(b.inputs.shape[0] for b in batches)


# ---- config.json -----------------------------------------------------------------------------------

def probe_eos_token_list_reads_last_id():
    hf = preset("tiny").to_hf_dict()
    hf["eos_token_id"] = [5, 7]
    return ModelConfig.from_hf_dict(hf).eos_token_id


# ---- sampling and precision ------------------------------------------------------------------------

def probe_sampling_generator_reseeded_each_step():
    kernels = importlib.import_module("pvlab.runtime.kernels")
    logits = torch.zeros(4, 64)
    generator = torch.Generator().manual_seed(11)
    first = kernels.sample_pick(logits, 1.0, generator)
    second = kernels.sample_pick(logits, 1.0, generator)
    return torch.stack([first, second])


def probe_fast_path_autocasts_to_float16():
    model = _tiny_random(seed=5).set_path("fast")
    with torch.no_grad():
        return model(torch.arange(1, 17)[None] * 7 % 512)


# ---- the optimizer -----------------------------------------------------------------------------------

def probe_adamw_eps_one_e_minus_six():
    trainer = importlib.import_module("pvlab.runtime.trainer")
    parameter = torch.nn.Parameter(torch.ones(4, 4))
    optimizer = trainer.build_optimizer([("w", parameter)], lr=1e-3, weight_decay=0.0, betas=(0.9, 0.95),
                                        path="reference", device=torch.device("cpu"))
    parameter.grad = torch.full((4, 4), 1e-7)
    optimizer.step()
    return parameter.detach().clone()


# ---- the torchrun sampler (no process group needed) --------------------------------------------------

def probe_rank_windows_keep_short_last_batch():
    distributed = importlib.import_module("pvlab.runtime.distributed")
    windows = torch.arange(10 * 5).view(10, 5)
    sampler = distributed.RankWindows(windows, rank=0, world_size=1, batch_size=3, seed=0)
    return tuple(len(sampler.next_indices()) for _ in range(4))
