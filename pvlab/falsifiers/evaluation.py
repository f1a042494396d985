"""Does the eval path measure what it claims? Eval loss bands and bounds, train->eval pollution,
label integrity, the held-out split, and the train/val ratio at one model state.

Every loss here comes from the runtime's own eval (runtime.trainer.Trainer.eval_batch /
evaluate) — the code a user's numbers come from — and where a second opinion is needed it is
recomputed independently in float64 from the model's logits.
"""

from __future__ import annotations

import math

import torch

from . import fixtures
from ._util import torch_device


def _trainer(model, recipe=None):
    from pvlab.runtime.trainer import Trainer

    if recipe is None:
        return Trainer(model)
    return Trainer(model, lr=recipe.lr, weight_decay=recipe.weight_decay, betas=(recipe.beta1, recipe.beta2),
                   grad_clip=recipe.grad_clip, seed=recipe.seed)


def _independent_loss(model, batch, device) -> float:
    """Mean next-token NLL of batch.targets, in float64 from the model's logits (not model.loss,
    not the runtime's cross-entropy kernels)."""
    from pvlab.runtime.kernels import IGNORE_INDEX

    with torch.no_grad():
        logits = model(batch.inputs.to(device)).detach()                               # (B, T, V)
    total, count = 0.0, 0
    for b in range(logits.shape[0]):     # one sequence at a time: float64 (T, V) stays small at V = 151,936
        keep = batch.targets[b] != IGNORE_INDEX
        rows, targets = logits[b].to("cpu", torch.float64)[keep], batch.targets[b][keep]
        total += float((torch.logsumexp(rows, dim=-1) - rows.gather(1, targets[:, None]).squeeze(1)).sum())
        count += int(keep.sum())
    return total / count


def eval_loss(*, device: str, checkpoint: str = "tiny-trained", path: str | None = None, batches: int = 4) -> dict:
    """The runtime's eval (Trainer.evaluate) over `batches` held-out batches of `checkpoint`, on
    `device` running `path` (default: the device's default path — reference on cpu, fast on
    cuda). Observations: val_loss, vocab_size, ln_vocab, tokens, and for a trained checkpoint
    recorded_val_loss (the held-out loss its build measured, runtime.json: a bound relative to it
    sees a defect that costs nats without reaching ln V, as dropped biases do on a model trained
    for minutes — docs/gpu.md)."""
    from pvlab.runtime.devices import default_path

    dev = torch_device(device)
    path = path or default_path(dev)
    model = fixtures.model(checkpoint, device, path)
    held_out = fixtures.heldout_batches(checkpoint, batches)
    val_loss = _trainer(model).evaluate(held_out)
    vocab = model.config.vocab_size
    observations = {"val_loss": val_loss, "vocab_size": vocab, "ln_vocab": math.log(vocab),
                    "tokens": sum(b.num_target_tokens for b in held_out)}
    if not fixtures.is_random(fixtures.resolve(checkpoint)):
        observations["recorded_val_loss"] = fixtures.recorded_results(checkpoint)["val_loss"]
    return observations


def eval_pollution(*, device: str, checkpoint: str = "tiny-trained", path: str | None = None,
                   eval_batch: int = 0, train_seed: int = 1) -> dict:
    """One Trainer, one model: eval a fixed held-out batch A, take one training step on a
    different (training) batch B, eval A again — through the same trainer and model object, so
    any state that training leaves behind (buffers, cached activations or targets, train mode)
    is there when eval runs. Also recomputes A's loss after the step independently (a fresh
    forward, float64 cross-entropy) to expose an eval that returns a stale number.

    Observations: loss_before, loss_after, relative_drop ((before - after) / before),
    train_loss (B's loss), recomputed_after, after_vs_recomputed (|after - recomputed| /
    recomputed)."""
    from pvlab.runtime.devices import default_path

    dev = torch_device(device)
    path = path or default_path(dev)
    model = fixtures.fresh_copy(fixtures.model(checkpoint, device, path))
    trainer = _trainer(model, fixtures.recipe(checkpoint))
    batch_a = fixtures.heldout_batches(checkpoint, eval_batch + 1)[eval_batch]
    batch_b = fixtures.train_batches(checkpoint, 1, seed=train_seed)[0]
    loss_before = trainer.eval_batch(batch_a)
    train_loss = trainer.train_batch(batch_b)
    loss_after = trainer.eval_batch(batch_a)
    model.eval()
    recomputed = _independent_loss(model, batch_a, dev)
    return {
        "loss_before": loss_before,
        "loss_after": loss_after,
        "relative_drop": (loss_before - loss_after) / loss_before,
        "train_loss": train_loss,
        "recomputed_after": recomputed,
        "after_vs_recomputed": abs(loss_after - recomputed) / recomputed,
    }


def label_integrity(*, device: str, checkpoint: str = "tiny-trained", batches: int = 2) -> dict:
    """What eval actually scores: the inputs and targets that Trainer.eval_batch hands to the
    model's loss are captured and compared with the held-out token stream itself — window i of
    T+1 tokens gives inputs stream[i(T+1) : i(T+1)+T] and targets one position later.

    Observations: labels_checked, label_mismatches (targets that are not the next token),
    input_mismatches (inputs that are not the stream's tokens), targets_equal_inputs (positions
    whose target is the input token itself)."""
    from pvlab.runtime.kernels import IGNORE_INDEX

    torch_device(device)
    model = fixtures.fresh_copy(fixtures.model(checkpoint, device, "reference"))
    captured = []
    original_loss = model.loss

    def recording_loss(inputs, targets):
        captured.append((inputs.detach().cpu().clone(), targets.detach().cpu().clone()))
        return original_loss(inputs, targets)

    model.loss = recording_loss                     # instance attribute: this copy only
    trainer = _trainer(model)
    held_out = fixtures.heldout_batches(checkpoint, batches)
    for batch in held_out:
        trainer.eval_batch(batch)
    if len(captured) != len(held_out):
        raise RuntimeError(f"eval called the model's loss {len(captured)} times for {len(held_out)} batches")
    stream = fixtures.prepared_data(checkpoint).heldout_stream
    seq_len = captured[0][0].shape[1]
    window = seq_len + 1
    checked = label_bad = input_bad = same = 0
    row = 0
    for inputs, targets in captured:
        for b in range(inputs.shape[0]):
            start = row * window
            expect_inputs = stream[start:start + seq_len]
            expect_targets = stream[start + 1:start + seq_len + 1]
            counted = targets[b] != IGNORE_INDEX
            checked += int(counted.sum())
            label_bad += int((targets[b][counted] != expect_targets[counted]).sum())
            input_bad += int((inputs[b] != expect_inputs).sum())
            same += int((targets[b][counted] == inputs[b][counted]).sum())
            row += 1
    return {"labels_checked": checked, "label_mismatches": label_bad, "input_mismatches": input_bad,
            "targets_equal_inputs": same}


def heldout_disjoint(*, device: str, checkpoint: str = "tiny-trained") -> dict:
    """Rebuild the corpus and split the runtime trains with (runtime.data.synthetic_python_corpus /
    read_corpus + split_documents, with the checkpoint's recipe; for a named real corpus such as
    the standard library, runtime.corpus.documents_for, split by file path) and intersect the two
    sides independently: exact text, and text with whitespace normalised.

    Observations: heldout_documents, train_documents, overlapping_documents (held-out documents
    whose exact text is also in training), overlapping_normalised (the same after collapsing
    whitespace), heldout_tokens_in_training_windows (0: not measured per token)."""
    from pvlab.runtime import data

    torch_device(device)
    r = fixtures.recipe(checkpoint)
    if getattr(r, "corpus", None) is not None:
        from pvlab.runtime import corpus

        train, held_out, _ = corpus.documents_for(r.corpus, val_fraction=r.val_fraction, seed=r.data_seed,
                                                  expected_digest=r.corpus_digest)
    else:
        documents = (data.read_corpus(r.corpus_dir) if r.corpus_dir is not None
                     else data.synthetic_python_corpus(r.num_documents, r.data_seed))
        train, held_out = data.split_documents(documents, val_fraction=r.val_fraction, seed=r.data_seed)
    train_set = set(train)
    normalise = lambda text: " ".join(text.split())  # noqa: E731
    train_normalised = {normalise(d) for d in train}
    return {
        "heldout_documents": len(held_out),
        "train_documents": len(train),
        "overlapping_documents": sum(1 for d in held_out if d in train_set),
        "overlapping_normalised": sum(1 for d in held_out if normalise(d) in train_normalised),
    }


def train_val_ratio(*, device: str, checkpoint: str = "tiny-trained", path: str | None = None,
                    batches: int = 2) -> dict:
    """At one model state: val_loss from the eval path (Trainer.evaluate on held-out batches) and
    train_loss from the *training* path (the loss Trainer.train_batch reports, computed before its
    update, on a training batch), so a discrepancy between what training and eval compute shows.

    Observations: train_loss, val_loss, ratio (max(train/val, val/train)), train_eval_loss (the
    eval path on training windows, for reference)."""
    from pvlab.runtime.devices import default_path

    dev = torch_device(device)
    path = path or default_path(dev)
    model = fixtures.fresh_copy(fixtures.model(checkpoint, device, path))
    trainer = _trainer(model, fixtures.recipe(checkpoint))
    val_loss = trainer.evaluate(fixtures.heldout_batches(checkpoint, batches))
    train_windows = fixtures.train_eval_batches(checkpoint, batches)
    train_eval_loss = trainer.evaluate(train_windows)
    train_loss = trainer.train_batch(train_windows[0])      # loss before the update: same state
    return {"train_loss": train_loss, "val_loss": val_loss,
            "ratio": max(train_loss / val_loss, val_loss / train_loss), "train_eval_loss": train_eval_loss}
