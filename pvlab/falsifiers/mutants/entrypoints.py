"""Planted bugs of the runtime's entry points: the pretraining pipeline, the CLI's eval, the
torchrun trainer's eval and the subjects' checkpoint cache (issue #26: `pv mutate` survivors no
falsifier saw, because every check met a checkpoint built once and cached).

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

import importlib

from pv.mutation import mutant

from .planting import plant, swap


def _pretrain_module():
    # the module: the package re-exports the function `pretrain` under the same name
    return importlib.import_module("pvlab.runtime.pretrain")


@mutant("training_loop_never_steps")
def training_loop_never_steps():
    """The training loop evaluates on schedule and times its steps but never calls
    `trainer.train_batch`: no optimizer step is taken, and the run still writes a checkpoint
    and reports losses (the step-0 model's).

    Imitates a training step lost in a refactor (the `pv mutate` survivor that drops
    `loss = trainer.train_batch(...)`). Seam: runtime.pretrain.train_steps (the single-process
    and the torchrun pipelines both call it through the module)."""
    pretrain = _pretrain_module()

    def train_steps(trainer, batches, recipe, bar, evaluate):
        evaluate(0)
        for step in range(1, recipe.steps + 1):
            next(batches)
            if step % recipe.eval_every == 0 or step == recipe.steps:
                evaluate(step)
        return 1e-3 * recipe.steps

    with plant("training_loop_never_steps", swap(pretrain, "train_steps", train_steps)):
        yield


@mutant("cli_eval_scores_training_split")
def cli_eval_scores_training_split():
    """Rebuilding a checkpoint's held-out split for `eval` hands back the training documents
    as the held-out ones: the reported val_loss is a training loss.

    Imitates an eval command scoring the wrong split (validation leaking into what is called
    held-out). Seam: runtime.pretrain.heldout_for_checkpoint (the CLI's eval imports it at call
    time)."""
    import dataclasses

    pretrain = _pretrain_module()
    original = pretrain.heldout_for_checkpoint

    def heldout_for_checkpoint(model, recipe):
        prepared = original(model, recipe)
        return dataclasses.replace(prepared, heldout_documents=prepared.train_documents,
                                   heldout_stream=prepared.train_stream)

    with plant("cli_eval_scores_training_split", swap(pretrain, "heldout_for_checkpoint", heldout_for_checkpoint)):
        yield


@mutant("distributed_eval_mean_over_rows")
def distributed_eval_mean_over_rows():
    """The torchrun trainer's evaluate divides the token-weighted loss sum by the number of rows
    scored instead of the number of target tokens: every loss it records is T times too large.

    Imitates a mis-normalised eval mean (`sum / batch_size`). Seam:
    runtime.distributed.DistributedTrainer.evaluate."""
    import torch

    from pvlab.runtime import distributed, trainer as trainers

    def evaluate(self, batches):
        was_training = self.wrapped.training
        self.wrapped.eval()
        total, rows = 0.0, 0
        try:
            with torch.no_grad():
                for batch in batches:
                    batch = batch.to(self.ctx.device)
                    total += float(self.wrapped(batch.inputs, trainers.eval_targets(batch))) * batch.num_target_tokens
                    rows += batch.inputs.shape[0]
        finally:
            self.wrapped.train(was_training)
        return total / rows

    with plant("distributed_eval_mean_over_rows", swap(distributed.DistributedTrainer, "evaluate", evaluate)):
        yield


@mutant("subject_cache_dir_ignored")
def subject_cache_dir_ignored():
    """The tiny subject is looked up (and built) in the default checkpoint cache whatever
    cache directory the caller names: `subjects build --cache-dir C` reports an entry outside C.

    Imitates the `pv mutate` survivor that reads `cache_dir is None` for `is not None`. Seam:
    runtime.zoo.tiny_trained (runtime.subjects.checkpoint_dir calls it through the module)."""
    from pvlab.runtime import zoo

    original = zoo.tiny_trained

    def tiny_trained(cache_dir=None, **options):
        return original(None, **options)

    with plant("subject_cache_dir_ignored", swap(zoo, "tiny_trained", tiny_trained)):
        yield


@mutant("progress_bar_one_step_behind")
def progress_bar_one_step_behind():
    """The terminal progress bar draws the step before the one just taken (0/N after the first
    step, never N/N), and fills to match.

    Imitates an off-by-one in a progress display (the `pv mutate` survivor that swaps
    `bar.update(step, loss)`'s arguments showed nothing checks the bar). Seam:
    runtime.pretrain.Progress.update."""
    pretrain = _pretrain_module()
    original = pretrain.Progress.update

    def update(self, step, loss):
        return original(self, step - 1, loss)

    with plant("progress_bar_one_step_behind", swap(pretrain.Progress, "update", update)):
        yield


@mutant("resume_restarts_step_count")
def resume_restarts_step_count():
    """DistributedTrainer.resume loads the weights and optimizer state but leaves the step count
    at 0: the resumed run replays the learning-rate warmup and records the wrong step.

    Imitates a resume that forgets the schedule's position. Seam:
    runtime.distributed.DistributedTrainer.resume (a classmethod)."""
    from pvlab.runtime import distributed

    original = distributed.DistributedTrainer.resume.__func__

    def resume(cls, directory, ctx, **options):
        trainer = original(cls, directory, ctx, **options)
        trainer.step = 0
        return trainer

    with plant("resume_restarts_step_count", swap(distributed.DistributedTrainer, "resume", classmethod(resume))):
        yield


from . import behaviour  # noqa: E402,F401 - registers the planted bugs of fast-path-on-cpu and documented-behaviour
#   (issue #26), for the same reason as the line above in domains.py


# ---- fourth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Fourth blind batch"; probes in tests/falsifiers/fourth_mutant_probes.py)


@mutant("tokenizer_trained_on_heldout_documents")
def tokenizer_trained_on_heldout_documents():
    """A fresh run's BPE tokenizer is trained on the whole corpus, held-out documents included,
    instead of the training split alone: the split itself stays disjoint and verified, but the
    vocabulary (its merges) was fitted on the text val_loss is measured on, so the held-out
    score is flattered and the checkpoint's tokenizer is not the one its recipe describes. A
    run given a tokenizer (fine-tuning, eval of a checkpoint) is untouched.

    Imitates preprocessing fitted before the train/validation split (a tokenizer or vocabulary
    built from every document). Seam: runtime.pretrain.prepare_data (the tokenizer is fitted
    here and handed to the original)."""
    import time

    from pvlab.runtime import data

    pretrain = _pretrain_module()
    original = pretrain.prepare_data

    def prepare_data(recipe, *, vocab_size, tokenizer=None):
        if tokenizer is not None:
            return original(recipe, vocab_size=vocab_size, tokenizer=tokenizer)
        tick = time.monotonic()
        train_documents, heldout_documents, _ = pretrain.split_corpus(recipe)
        fitted = data.train_tokenizer(train_documents + heldout_documents,      # the defect: held-out text too
                                      recipe.tokenizer_vocab_size or vocab_size)
        seconds = time.monotonic() - tick
        prepared = original(recipe, vocab_size=vocab_size, tokenizer=fitted)
        prepared.seconds = {"corpus": prepared.seconds.get("corpus", 0.0), "tokenizer": seconds,
                            "encode": prepared.seconds.get("encode", 0.0)}
        return prepared

    with plant("tokenizer_trained_on_heldout_documents", swap(pretrain, "prepare_data", prepare_data)):
        yield


# ---- fifth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Fifth blind batch"; probes in tests/falsifiers/fifth_mutant_probes.py)


@mutant("bias_draw_reseeded_per_tensor")
def bias_draw_reseeded_per_tensor():
    """A recipe's bias_init_std draws every bias from a generator seeded afresh for each
    tensor: every layer gets the same q_proj bias, the same k_proj bias, and (same shape) a
    v_proj bias equal to its k_proj bias. The biases are still non-zero with the right spread,
    but far from independent draws: the subject meant to exercise Q/K/V biases as a production
    Qwen2's is built with copies of one vector.

    Imitates a torch.Generator created (and seeded) inside the loop instead of before it.
    Seam: runtime.pretrain.draw_biases (its loop, copied)."""
    import torch

    pretrain = _pretrain_module()

    def draw_biases(model, std, seed):
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith(".bias"):
                    generator = torch.Generator(device="cpu").manual_seed(seed + 1)   # the defect: reseeded per tensor
                    parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)

    with plant("bias_draw_reseeded_per_tensor", swap(pretrain, "draw_biases", draw_biases)):
        yield


# ---- sixth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Sixth blind batch"; probes in tests/falsifiers/sixth_mutant_probes.py)


@mutant("final_eval_skipped_off_cadence")
def final_eval_skipped_off_cadence():
    """The pretraining loop evaluates only every eval_every steps: when steps is not a multiple
    of eval_every, the run ends without evaluating the final model, so runtime.json's
    train_loss / val_loss (history[-1]) are those of an earlier step, not of the checkpoint
    written (120 steps at eval_every 40 are unaffected; 50 at 40 report step 40's losses).
    Both pretrain paths (single process and torchrun) share the loop.

    Imitates `if step % recipe.eval_every == 0:` without `or step == recipe.steps`.
    Seam: runtime.pretrain.train_steps (wrapped: its evaluate callback skips the off-cadence
    last step)."""
    pretrain = _pretrain_module()
    original = pretrain.train_steps

    def train_steps(trainer, batches, recipe, bar, evaluate):
        def on_cadence(step):
            if step == recipe.steps and step % recipe.eval_every:
                return None   # the defect: the final step is evaluated only on the cadence
            return evaluate(step)

        return original(trainer, batches, recipe, bar, on_cadence)

    with plant("final_eval_skipped_off_cadence", swap(pretrain, "train_steps", train_steps)):
        yield


# ---- tenth blind batch (docs/independent-mutants.md, "Tenth batch") ------------------------------


@mutant("perplexity_reported_as_two_to_the_loss")
def perplexity_reported_as_two_to_the_loss():
    """`python -m pvlab.runtime eval` reports perplexity as 2 ** val_loss, although the loss is
    in nats: a loss of 2.0 reads as perplexity 4.0 instead of 7.39.

    Imitates the bits/nats confusion of perplexity (2 ** H with H in nats). Seam: the `math`
    the `eval` command of runtime.cli computes with."""
    import math
    import types

    from pvlab.runtime import cli

    shim = types.SimpleNamespace(**{name: getattr(math, name) for name in dir(math) if not name.startswith("_")})
    shim.exp = lambda value: 2.0 ** value                                                  # the defect

    with plant("perplexity_reported_as_two_to_the_loss", swap(cli, "math", shim)):
        yield
