"""Probes of the planted bugs of mutants/entrypoints.py, for test_mutants.py: each is a cheap direct
call whose result changes while its mutant is active. Imported by test_mutants.py (which collects
every `probe_<mutant name>`)."""

from __future__ import annotations

import importlib
import types

from pvlab.runtime import distributed, zoo

pretrain = importlib.import_module("pvlab.runtime.pretrain")


class _CountingTrainer:
    def __init__(self):
        self.steps = 0

    def train_batch(self, batch):
        self.steps += 1
        return 1.0


def probe_training_loop_never_steps():
    trainer = _CountingTrainer()
    recipe = pretrain.Recipe(steps=5, eval_every=2)
    pretrain.train_steps(trainer, iter(range(10)), recipe, pretrain.Progress(5, enabled=False), lambda step: None)
    return trainer.steps


def probe_cli_eval_scores_training_split():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    from pvlab.runtime import data

    vocabulary = {data.END_OF_TEXT: 0, "[UNK]": 1}
    tokenizer = Tokenizer(WordLevel(vocabulary, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    model = types.SimpleNamespace(tokenizer=tokenizer, config=types.SimpleNamespace(vocab_size=8))
    prepared = pretrain.heldout_for_checkpoint(model, pretrain.Recipe(num_documents=40, val_fraction=0.25))
    return len(prepared.heldout_documents), int(prepared.heldout_stream.numel())


def probe_distributed_eval_mean_over_rows():
    return distributed.DistributedTrainer.evaluate.__qualname__, distributed.DistributedTrainer.evaluate.__module__


def probe_subject_cache_dir_ignored():
    return zoo.tiny_trained.__module__, zoo.tiny_trained.__qualname__


def probe_progress_bar_one_step_behind():
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    pretrain.Progress(4, stream=stream).update(2, 1.5)
    return stream.getvalue().split("]")[1].split("loss")[0]


def probe_resume_restarts_step_count():
    return distributed.DistributedTrainer.resume.__func__.__qualname__
