"""Probes of the fifth blind batch of planted bugs (in mutants/trainer.py, model.py, data.py,
checkpoint.py and entrypoints.py, each under "fifth blind batch"; docs/mutants.md, "Fifth blind
batch"), for test_mutants.py: each is a cheap direct call whose result changes while its mutant
is active. Imported by test_mutants.py (which collects every `probe_<mutant name>`)."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import torch

from pvlab.runtime import checkpoint, corpus, trainer
from pvlab.runtime import model as models
from pvlab.runtime.config import preset
from pvlab.runtime.data import LMBatch
from pvlab.runtime.model import CausalLM


def _tiny(seed: int = 0, **changes) -> CausalLM:
    model = CausalLM(preset("tiny").replace(**changes))
    models.init_weights(model, seed)
    return model.eval()


# ---- the trainer -----------------------------------------------------------------------------------

def probe_resume_forgets_lr_schedule():
    run = trainer.Trainer(_tiny(seed=1), lr=1e-3, warmup_steps=3, total_steps=10, min_lr=1e-4)
    sequences = torch.randint(0, preset("tiny").vocab_size, (2, 9), generator=torch.Generator().manual_seed(2))
    run.train_batch(LMBatch.from_sequences(sequences))
    with tempfile.TemporaryDirectory(prefix="pv-probe-") as directory:
        run.save(Path(directory) / "run")
        resumed = trainer.Trainer.resume(Path(directory) / "run")
    return resumed.step, resumed.current_lr()


# ---- batched generation ----------------------------------------------------------------------------

def probe_batch_generation_stops_at_first_eos():
    # initializer_range 0.3: at the default 0.02 a random tied model only repeats the prompt's last token
    generate = importlib.import_module("pvlab.runtime.generate")   # the package re-exports the function
    model = _tiny(seed=0, initializer_range=0.3)
    prompts = [[5, 9, 17], [40, 41, 42, 43, 44]]
    eos = generate.generate(model, prompts[0], max_new_tokens=1, use_graph=False).new_ids[0]
    results = generate.generate_batch(model, prompts, max_new_tokens=6, eos_token_id=eos)
    return tuple((tuple(r.new_ids), r.stopped_on_eos) for r in results)


# ---- batches and the held-out split ----------------------------------------------------------------

def probe_num_target_tokens_counts_padding():
    return LMBatch.from_sequences([[1, 2, 3, 4, 5], [6, 7]]).num_target_tokens


def probe_named_corpus_split_ignores_seed():
    files = tuple(corpus.SourceFile(f"pkg/module_{i}.py", f"value = {i}\n") for i in range(40))
    source = corpus.Corpus(spec="probe", root=Path("."), files=files)
    train, held_out = corpus.split_by_path(source, val_fraction=0.25, seed=3)
    return tuple(s.path for s in held_out)


# ---- checkpoint I/O --------------------------------------------------------------------------------

def probe_load_ignores_requested_path():
    with tempfile.TemporaryDirectory(prefix="pv-probe-") as directory:
        checkpoint.save_checkpoint(_tiny(seed=3), Path(directory) / "model")
        return checkpoint.load(Path(directory) / "model", path="fast", parity_gate=False).path


# ---- the pretraining pipeline ----------------------------------------------------------------------

def probe_bias_draw_reseeded_per_tensor():
    pretrain = importlib.import_module("pvlab.runtime.pretrain")
    model = _tiny(seed=4)
    pretrain.draw_biases(model, 1.0, 5)
    return tuple(p.detach().clone() for name, p in model.named_parameters() if name.endswith(".bias"))
