"""Does the runtime's eval measure what it claims? Loss bands and bounds, train->eval pollution,
label integrity, token weighting, the held-out split, and the train/val ratio at one state.

Every loss judged here is the runtime's own (`evaluate`: its eval loop, where eval-methodology
bugs live; `train_step`: the loss its training step computed); the second opinion is the
definition, next-token cross-entropy in float64 from the runtime's logits (_base.next_token_nll).

Assumes: next-token prediction with the subject's targets (inputs shifted by one, -100 unscored),
a loss that is a mean over scored tokens (a runtime that reports sums or per-sequence means is
outside this contract), and eval and training that share one model state.
"""

from __future__ import annotations

import math

import torch

from ..protocol import (DATA_SPLIT, EVALUATE, FAST, IGNORE_INDEX, LOAD, LOGITS, REFERENCE, TRAIN_STEP, Batch,
                        TrainSettings)
from ._base import independent_loss, load, next_token_nll, subject_of, uses

TOLERANCE = 1e-3  # relative: the runtime's fp32 loss reduction against float64 from the same logits


def default_path(runtime, device: str, path: str | None) -> str:
    """The device's default path: the fast one on a GPU when the runtime has it, else the reference."""
    if path is not None:
        return path
    return FAST if device != "cpu" and runtime.supports_path(FAST) else REFERENCE


@uses(LOAD, EVALUATE)
def eval_loss(*, runtime, device: str, subject: str, path: str | None = None, batches: int = 4) -> dict:
    """The runtime's eval over `batches` held-out batches on `device`/`path`. Observations:
    val_loss, vocab_size, ln_vocab, tokens, and for a trained subject that records it
    recorded_val_loss (the held-out loss its build measured)."""
    who = subject_of(subject)
    model = load(runtime, who, device, default_path(runtime, device, path))
    held_out = who.heldout(batches)
    val_loss = model.evaluate(held_out)
    model.close()
    observations = {"val_loss": val_loss, "vocab_size": who.vocab_size, "ln_vocab": math.log(who.vocab_size),
                    "tokens": sum(b.target_tokens for b in held_out)}
    if not who.is_random and "val_loss" in who.recorded:
        observations["recorded_val_loss"] = float(who.recorded["val_loss"])
    return observations


@uses(LOAD, EVALUATE, TRAIN_STEP, LOGITS)
def eval_pollution(*, runtime, device: str, subject: str, path: str | None = None, eval_batch: int = 0,
                   train_batch: int = 1, lr: float = 3e-3) -> dict:
    """One model: eval held-out batch A, one training step on training batch B, eval A again —
    through the same loaded model, so state training leaves behind is there when eval runs; A's
    loss after the step is also recomputed from fresh logits in float64.

    Observations: loss_before, loss_after, relative_drop, train_loss, recomputed_after,
    after_vs_recomputed (|after - recomputed| / recomputed)."""
    who = subject_of(subject)
    model = load(runtime, who, device, default_path(runtime, device, path), train=TrainSettings(lr=lr))
    batch_a = who.heldout(eval_batch + 1)[eval_batch]
    batch_b = who.train(1, start=train_batch)[0]
    loss_before = model.evaluate([batch_a])
    train_loss = model.train_step(batch_b)
    loss_after = model.evaluate([batch_a])
    recomputed = independent_loss(model, [batch_a])
    model.close()
    return {"loss_before": loss_before, "loss_after": loss_after,
            "relative_drop": (loss_before - loss_after) / loss_before, "train_loss": train_loss,
            "recomputed_after": recomputed, "after_vs_recomputed": abs(loss_after - recomputed) / recomputed}


@uses(LOAD, EVALUATE, LOGITS)
def label_integrity(*, runtime, device: str, subject: str, batches: int = 2) -> dict:
    """What eval scores: for each held-out batch, the runtime's eval loss of that batch against the
    next-token loss of the batch's targets (float64 from the runtime's own logits, reference path),
    and against the loss of scoring each input token itself (what an unshifted eval computes).
    The subject's targets are checked to be the inputs shifted by one.

    Observations: labels_checked (scored targets), eval_mismatched_batches (eval loss further than
    1e-3 relative from the next-token loss), eval_scores_inputs (batches whose eval loss is
    closer to the inputs-as-targets loss), subject_label_mismatches (targets[t] != inputs[t+1]
    where both exist and the target is scored), max_rel_diff."""
    who = subject_of(subject)
    model = load(runtime, who, device, REFERENCE)
    checked = mismatched = scores_inputs = subject_bad = 0
    max_rel = 0.0
    for batch in who.heldout(batches):
        scored = batch.targets[:, :-1] != IGNORE_INDEX
        subject_bad += int((batch.targets[:, :-1][scored] != batch.inputs[:, 1:][scored]).sum())
        checked += batch.target_tokens
        logits = model.logits(batch.inputs)
        total, count = next_token_nll(logits, batch.targets)
        same_inputs = torch.where(batch.targets != IGNORE_INDEX, batch.inputs, torch.full_like(batch.inputs, IGNORE_INDEX))
        copy_total, copy_count = next_token_nll(logits, same_inputs)
        reference, copying = total / count, copy_total / copy_count
        evaluated = model.evaluate([batch])
        rel = abs(evaluated - reference) / reference
        max_rel = max(max_rel, rel)
        mismatched += int(rel > TOLERANCE)
        scores_inputs += int(abs(evaluated - copying) < abs(evaluated - reference))
    model.close()
    return {"labels_checked": checked, "eval_mismatched_batches": mismatched, "eval_scores_inputs": scores_inputs,
            "subject_label_mismatches": subject_bad, "max_rel_diff": max_rel}


def hardest_targets(logits: torch.Tensor, targets: torch.Tensor, keep: int) -> torch.Tensor:
    """`targets` with only the `keep` scored targets of each row that `logits` predict worst (by
    float64 next-token loss) left scored, every other one IGNORE_INDEX. A batch so masked has a
    mean loss far from that of a full batch on any subject, trained or not, so a mean of batch
    means and the token-weighted mean always differ by a margin a check can see."""
    logits, masked = logits.detach().to("cpu"), torch.full_like(targets, IGNORE_INDEX)
    for row in range(targets.shape[0]):
        scored = (targets[row] != IGNORE_INDEX).nonzero().squeeze(1)
        if len(scored) == 0:
            continue
        rows = logits[row].to(torch.float64)[scored]
        losses = torch.logsumexp(rows, dim=-1) - rows.gather(1, targets[row][scored][:, None]).squeeze(1)
        worst = scored[torch.topk(losses, min(keep, len(scored))).indices]
        masked[row, worst] = targets[row, worst]
    return masked


@uses(LOAD, EVALUATE, LOGITS)
def token_weighting(*, runtime, device: str, subject: str, keep_fraction: float = 0.25) -> dict:
    """Two held-out batches with very different numbers of scored tokens (the second keeps only
    `keep_fraction` of each row's targets, those its logits predict worst, the rest -100: see
    hardest_targets): the runtime's eval of both against the token-weighted mean next-token
    loss (float64 from its logits) and against the mean of the two batch means (what an eval
    that averages batch means reports).

    Observations: eval_loss, token_weighted_loss, batch_mean_loss, rel_diff (|eval - token
    weighted| / token weighted), separation (|batch mean - token weighted| / token weighted: the
    fixture tells the two apart only when this exceeds the tolerance), tokens_first,
    tokens_second."""
    who = subject_of(subject)
    first, second = who.heldout(2)
    keep = max(1, int(second.targets.shape[1] * keep_fraction))
    model = load(runtime, who, device, REFERENCE)
    # The first `keep` targets of each row were kept until a 0.5B subject's two means differed by
    # only 0.9 % (the fixture then told nothing apart): its early positions are barely harder.
    second = Batch(second.inputs, hardest_targets(model.logits(second.inputs), second.targets, keep))
    evaluated = model.evaluate([first, second])
    sums = [next_token_nll(model.logits(b.inputs), b.targets) for b in (first, second)]
    model.close()
    weighted = sum(t for t, _ in sums) / sum(c for _, c in sums)
    batch_mean = sum(t / c for t, c in sums) / 2
    return {"eval_loss": evaluated, "token_weighted_loss": weighted, "batch_mean_loss": batch_mean,
            "rel_diff": abs(evaluated - weighted) / weighted, "separation": abs(batch_mean - weighted) / weighted,
            "tokens_first": sums[0][1], "tokens_second": sums[1][1]}


@uses(DATA_SPLIT)
def heldout_disjoint(*, runtime, device: str, subject: str) -> dict:
    """The runtime's own train / held-out split of the subject's corpus (`data_split`),
    intersected here: exact text, and text with whitespace collapsed. Runs on no device: the
    split is computed from documents before any tensor exists.

    Observations: heldout_documents, train_documents, overlapping_documents,
    overlapping_normalised."""
    who = subject_of(subject)
    if who.directory is None:
        raise RuntimeError(f"subject {who.name}: a bare checkpoint names no corpus to split")
    train, held_out = runtime.data_split(who.directory)
    train_set = set(train)
    normalise = lambda text: " ".join(text.split())  # noqa: E731
    train_normalised = {normalise(d) for d in train}
    return {"heldout_documents": len(held_out), "train_documents": len(train),
            "overlapping_documents": sum(1 for d in held_out if d in train_set),
            "overlapping_normalised": sum(1 for d in held_out if normalise(d) in train_normalised)}


@uses(LOAD, EVALUATE, TRAIN_STEP)
def train_val_ratio(*, runtime, device: str, subject: str, path: str | None = None, batches: int = 2) -> dict:
    """At one model state: val_loss from the eval loop on held-out batches, train_loss from the
    training step (the loss it computes before its update) on a fixed training window, so a
    difference between what training and eval compute shows.

    Observations: train_loss, val_loss, ratio (max(train/val, val/train)), train_eval_loss (the
    eval loop on the same training windows)."""
    who = subject_of(subject)
    model = load(runtime, who, device, default_path(runtime, device, path), train=TrainSettings(lr=1e-4))
    val_loss = model.evaluate(who.heldout(batches))
    windows = who.train_windows(batches)
    train_eval_loss = model.evaluate(windows)
    train_loss = model.train_step(windows[0])
    model.close()
    return {"train_loss": train_loss, "val_loss": val_loss, "ratio": max(train_loss / val_loss, val_loss / train_loss),
            "train_eval_loss": train_eval_loss}
