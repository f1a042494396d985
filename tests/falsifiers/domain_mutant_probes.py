"""Probes of the planted bugs of mutants/domains.py and the sampler bugs of mutants/data.py added
for `pv mutate`'s survivors, for test_mutants.py: each is a cheap direct call whose result changes
while its mutant is active. Imported by test_mutants.py (which collects every `probe_<mutant name>`)."""

from __future__ import annotations

import importlib

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel

from pvlab.runtime import data, distributed, trainer
from pvlab.runtime.config import preset
from pvlab.runtime.errors import ArgumentError, DataError
from pvlab.runtime.model import CausalLM


def _refused(call, error):
    try:
        return call()
    except error as refused:
        return f"refused: {type(refused).__name__}"


def probe_shard_rank_gate_off_by_one():
    return _refused(lambda: distributed.shard_indices(10, rank=3, world_size=3, seed=0, epoch=0), ArgumentError)


def probe_zero_learning_rate_accepted():
    return _refused(lambda: trainer.hyperparameters(lr=0.0, weight_decay=0.0, betas=(0.9, 0.95), grad_clip=1.0,
                                                    seed=0, warmup_steps=0, total_steps=None, min_lr=None),
                    ArgumentError)


def probe_zero_val_fraction_accepted():
    return _refused(lambda: data.split_documents(["a", "b", "c"], val_fraction=0.0, seed=0), DataError)


def probe_batch_default_seed_changed():
    generate = importlib.import_module("pvlab.runtime.generate")
    model = CausalLM(preset("tiny"))
    torch.manual_seed(0)
    for parameter in model.parameters():
        torch.nn.init.normal_(parameter, std=0.5)
    return [g.new_ids for g in generate.generate_batch(model.eval(), [[1, 2, 3]], max_new_tokens=8, temperature=2.0)]


def probe_end_of_text_falls_back_to_id_zero():
    tokenizer = Tokenizer(WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    return _refused(lambda: data.encode_documents(tokenizer, ["a"]), DataError)


def probe_random_window_last_start_never_drawn():
    sampler = data.random_batches(torch.arange(12), batch_size=64, seq_len=4, seed=0)
    return sorted({int(row[0]) for row in next(sampler).inputs})


def probe_packed_long_document_truncated():
    return data.pack_documents([list(range(20))], seq_len=4)
