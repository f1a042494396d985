"""Probes of the sixth blind batch of planted bugs (in mutants/data.py, trainer.py, model.py,
config.py, entrypoints.py and loss.py, each under "sixth blind batch"; docs/mutants.md, "Sixth
blind batch"), for test_mutants.py: each is a cheap direct call whose result changes while its
mutant is active. Imported by test_mutants.py (which collects every `probe_<mutant name>`)."""

from __future__ import annotations

import importlib
import itertools

import torch

from pvlab.runtime import data, trainer
from pvlab.runtime import model as models
from pvlab.runtime.config import preset
from pvlab.runtime.data import LMBatch
from pvlab.runtime.model import CausalLM


def _tiny(seed: int = 0, **changes) -> CausalLM:
    model = CausalLM(preset("tiny").replace(**changes))
    models.init_weights(model, seed)
    return model.eval()


def _sequences(rows: int, length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, preset("tiny").vocab_size, (rows, length), generator=torch.Generator().manual_seed(seed))


# ---- data: packing and micro-batches ---------------------------------------------------------------

def probe_packed_epochs_repeat_first_order():
    # 12 documents of 3..8 tokens in rows of 8 positions: a pass is a few batches of 2 rows
    documents = [list(range(10 * i, 10 * i + 3 + i % 6)) for i in range(12)]
    batches = data.packed_batches(documents, batch_size=2, seq_len=8, seed=1)
    return tuple(batch.inputs for batch in itertools.islice(batches, 12))


def probe_micro_batch_split_drops_short_remainder():
    batch = LMBatch.from_sequences(_sequences(3, 7, seed=3))
    return tuple(part.inputs for part in batch.split(2))


# ---- the trainer -----------------------------------------------------------------------------------

def probe_grad_clip_zero_zeroes_gradients():
    model = _tiny(seed=2)
    run = trainer.Trainer(model, lr=1e-2, grad_clip=0.0)
    run.train_batch(LMBatch.from_sequences(_sequences(2, 9, seed=4)))
    return model.model.embed_tokens.weight.grad.detach().clone()


# ---- generation ------------------------------------------------------------------------------------

def probe_batch_sampling_ignores_top_k():
    generate = importlib.import_module("pvlab.runtime.generate")   # the package re-exports the function
    model = _tiny(seed=0)
    results = generate.generate_batch(model, [[5, 9, 17], [40, 41, 42, 43, 44]], max_new_tokens=6,
                                      temperature=1.0, top_k=1, seed=3)
    return tuple(tuple(r.new_ids) for r in results)


def probe_batch_text_generation_ignores_stop_at_eos():
    generate = importlib.import_module("pvlab.runtime.generate")
    tokenizer = data.train_tokenizer(["def add(a, b):\n    return a + b\n", "x = [i * i for i in range(9)]\n"], 300)
    model = _tiny(seed=5, vocab_size=tokenizer.get_vocab_size(), bos_token_id=None, eos_token_id=None)
    prompt = "def add(a, b):"
    first = generate.generate(model, tokenizer.encode(prompt).ids, max_new_tokens=1, use_graph=False).new_ids[0]
    model.config = model.config.replace(eos_token_id=first)   # the model's own first token is its eos
    texts = generate.generate_texts(model, tokenizer, [prompt, "x = [i"], max_new_tokens=5, stop_at_eos=False)
    return tuple(texts)


# ---- the config ------------------------------------------------------------------------------------

def probe_parameter_count_counts_tied_head():
    return preset("tiny").num_parameters(), preset("llama-370m").num_parameters()


# ---- the pretraining loop --------------------------------------------------------------------------

class _CountingTrainer:
    def train_batch(self, batch):
        return 0.0


def probe_final_eval_skipped_off_cadence():
    pretrain = importlib.import_module("pvlab.runtime.pretrain")   # the package re-exports the function
    evaluated: list[int] = []
    recipe = pretrain.Recipe(steps=5, eval_every=2)
    pretrain.train_steps(_CountingTrainer(), itertools.repeat(None), recipe, pretrain.Progress(5, enabled=False),
                         evaluated.append)
    return tuple(evaluated)


# ---- the fused loss --------------------------------------------------------------------------------

def probe_fast_eval_loss_scores_padding():
    model = _tiny(seed=6).set_path("fast")
    batch = LMBatch.from_sequences([[1, 2, 3, 4, 5, 6, 7], [8, 9, 10]])
    with torch.no_grad():
        return model.loss(batch.inputs, batch.targets).detach().clone()
