"""The optimizer a runtime applies is AdamW as TrainSettings documents it, in any runtime.

Over a few training steps the check reads every parameter before the step, the gradient the
step applied (`gradients()`) and the parameter after it, and replays the step in float64 with
the textbook AdamW (Loshchilov & Hutter; torch.optim.AdamW's order of operations): decoupled
weight decay p <- p (1 - lr wd), then the moments m <- b1 m + (1 - b1) g and v <- b2 v +
(1 - b2) g^2, the bias corrections 1 - b^t, and p <- p - lr m^ / (sqrt(v^) + eps), with the
learning rate of TrainSettings' documented schedule at that step (warmup included). Each
parameter is judged against both hypotheses, decayed and not: which parameters a runtime
decays is its own policy (pvlab: matrices only; the transformers adapter: every parameter),
and the check reports it. adamw_update_matches_textbook's contracts predict that every matrix
and embedding decays; a runtime that exempts some matrices by design (an input embedding: many
trainers do) declares them (`RuntimeAdapter.undecayed_matrices`) and is judged against its
declaration by adamw_update_matches_declared_decay.

The oracle is that replay, written in the check from the documented definition: independent of
every runtime's optimizer code. It uses the runtime's own gradients, so it judges the update and
not the gradient (the gradient has checks of its own: accumulation, the transformers oracle).

Assumes: the runtime's weights are its parameters (the reference path: fp32 weights; a path
that keeps bf16 weights over fp32 masters rounds every update and is not judged here); state()
and gradients() name parameters alike; clipping is off, so the reported gradient is the applied
one.
"""

from __future__ import annotations

import math

import torch

from ..protocol import GRADIENTS, LOAD, REFERENCE, STATE, TRAIN_STEP, TrainSettings
from ._base import load, subject_of, uses
from .schedule import documented_lr


def _float64(tensors: dict[str, torch.Tensor], names: list[str]) -> dict[str, torch.Tensor]:
    return {n: tensors[n].detach().to("cpu", torch.float64).clone() for n in names}


@uses(LOAD, TRAIN_STEP, STATE, GRADIENTS)
def adamw_update_matches_textbook(*, runtime, device: str, subject: str, steps: int = 3, lr: float = 1e-3,
                                  min_lr: float = 1e-4, warmup_steps: int = 2, total_steps: int = 10,
                                  weight_decay: float = 0.1, beta1: float = 0.9, beta2: float = 0.95,
                                  eps: float = 1e-8, rtol: float = 2e-3) -> dict:
    """`steps` training steps on the subject's first training batches (reference path, clipping
    off), each replayed in float64 (module docstring).

    Observations: update_max_abs_diff (over steps and parameters, the smaller of the two
    hypotheses' largest error per parameter: decayed or not), update_max_abs_diff_step (the step
    where it was largest, 1-based), tol (rtol * lr: a fraction of one step's size),
    mismatched_parameters (parameters neither hypothesis explains within tol, at any step),
    matrices / matrices_decayed / matrices_undecided (parameters of two or more dimensions, and
    how many the replay found decayed; undecided: both hypotheses within tol), vectors /
    vectors_decayed / vectors_kept (norm weights and biases found decayed / not decayed: the
    runtime's policy, recorded; a vector near zero can be neither), parameters,
    steps, first_lr / last_lr (the documented rates the replay used)."""
    who = subject_of(subject)
    settings = TrainSettings(lr=lr, min_lr=min_lr, warmup_steps=warmup_steps, total_steps=total_steps,
                             weight_decay=weight_decay, betas=(beta1, beta2), eps=eps, grad_clip=0.0)
    model = load(runtime, who, device, REFERENCE, train=settings)
    tol = rtol * lr
    worst, worst_step = 0.0, 0
    mismatched: set[str] = set()
    decided: dict[str, set[str]] = {}            # name -> {"decayed", "kept"} the steps found
    moments: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    rates: list[float] = []
    try:
        names: list[str] | None = None
        for step, batch in enumerate(who.train(steps), start=1):
            before_all = model.state()   # live tensors, maybe: copied before the step changes them
            before_all = {n: t.detach().to("cpu", torch.float64, copy=True) for n, t in before_all.items()}
            model.train_step(batch)
            gradients = model.gradients()
            after_all = model.state()
            if names is None:
                names = sorted(set(gradients) & set(before_all))
                if not names:
                    raise ValueError("gradients() and state() share no parameter name: the replay has nothing to judge")
            before, after, grads = _float64(before_all, names), _float64(after_all, names), _float64(gradients, names)
            rate = documented_lr(step - 1, lr=lr, min_lr=min_lr, warmup_steps=warmup_steps, total_steps=total_steps)
            rates.append(rate)
            for name in names:
                g = grads[name]
                m, v = moments.get(name, (torch.zeros_like(g), torch.zeros_like(g)))
                m = beta1 * m + (1 - beta1) * g
                v = beta2 * v + (1 - beta2) * g * g
                moments[name] = (m, v)
                update = rate * (m / (1 - beta1 ** step)) / ((v / (1 - beta2 ** step)).sqrt() + eps)
                kept = float((after[name] - (before[name] - update)).abs().max())
                decayed = float((after[name] - (before[name] * (1 - rate * weight_decay) - update)).abs().max())
                best = min(kept, decayed)
                if best > worst:
                    worst, worst_step = best, step
                if best > tol:
                    mismatched.add(name)
                elif kept <= tol < decayed:
                    decided.setdefault(name, set()).add("kept")
                elif decayed <= tol < kept:
                    decided.setdefault(name, set()).add("decayed")
        shapes = {n: before_all[n].dim() for n in names or []}
    finally:
        model.close()
    matrices = [n for n, dims in shapes.items() if dims >= 2]
    vectors = [n for n, dims in shapes.items() if dims < 2]

    def found_decayed(name: str) -> bool:   # decayed at some step and kept at none
        return decided.get(name) == {"decayed"}

    return {
        "update_max_abs_diff": worst, "update_max_abs_diff_step": worst_step, "tol": tol,
        "mismatched_parameters": len(mismatched), "parameters": len(shapes),
        "matrices": len(matrices), "matrices_decayed": sum(found_decayed(n) for n in matrices),
        "matrices_undecided": sum(n not in decided for n in matrices),
        "vectors": len(vectors), "vectors_decayed": sum(found_decayed(n) for n in vectors),
        "vectors_kept": sum(decided.get(n) == {"kept"} for n in vectors),
        "steps": len(rates), "first_lr": rates[0] if rates else math.nan, "last_lr": rates[-1] if rates else math.nan,
    }


def _replay(model, who, *, steps: int, lr: float, min_lr: float, warmup_steps: int, total_steps: int,
            weight_decay: float, beta1: float, beta2: float, eps: float, tol: float) -> dict:
    """`steps` train_steps of `model` on the subject's first training batches, each replayed in
    float64 as the textbook AdamW under both hypotheses (decayed, not): per parameter, what the
    replay found ("decayed", "kept", or both/neither across steps), and the worst error."""
    worst, worst_step, rates = 0.0, 0, []
    mismatched: set[str] = set()
    decided: dict[str, set[str]] = {}
    moments: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    names: list[str] | None = None
    shapes: dict[str, int] = {}
    for step, batch in enumerate(who.train(steps), start=1):
        before_all = {n: t.detach().to("cpu", torch.float64, copy=True) for n, t in model.state().items()}
        model.train_step(batch)
        gradients, after_all = model.gradients(), model.state()
        if names is None:
            names = sorted(set(gradients) & set(before_all))
            if not names:
                raise ValueError("gradients() and state() share no parameter name: the replay has nothing to judge")
            shapes = {n: before_all[n].dim() for n in names}
        before, after, grads = _float64(before_all, names), _float64(after_all, names), _float64(gradients, names)
        rate = documented_lr(step - 1, lr=lr, min_lr=min_lr, warmup_steps=warmup_steps, total_steps=total_steps)
        rates.append(rate)
        for name in names:
            g = grads[name]
            m, v = moments.get(name, (torch.zeros_like(g), torch.zeros_like(g)))
            m, v = beta1 * m + (1 - beta1) * g, beta2 * v + (1 - beta2) * g * g
            moments[name] = (m, v)
            update = rate * (m / (1 - beta1 ** step)) / ((v / (1 - beta2 ** step)).sqrt() + eps)
            kept = float((after[name] - (before[name] - update)).abs().max())
            decayed = float((after[name] - (before[name] * (1 - rate * weight_decay) - update)).abs().max())
            best = min(kept, decayed)
            if best > worst:
                worst, worst_step = best, step
            if best > tol:
                mismatched.add(name)
            elif kept <= tol < decayed:
                decided.setdefault(name, set()).add("kept")
            elif decayed <= tol < kept:
                decided.setdefault(name, set()).add("decayed")
    return {"worst": worst, "worst_step": worst_step, "mismatched": mismatched, "decided": decided,
            "shapes": shapes, "rates": rates}


@uses(LOAD, TRAIN_STEP, STATE, GRADIENTS)
def adamw_update_matches_declared_decay(*, runtime, device: str, subject: str, steps: int = 3, lr: float = 1e-3,
                                        min_lr: float = 1e-4, warmup_steps: int = 2, total_steps: int = 10,
                                        weight_decay: float = 0.1, beta1: float = 0.9, beta2: float = 0.95,
                                        eps: float = 1e-8, rtol: float = 2e-3) -> dict:
    """adamw_update_matches_textbook, with the decay policy the runtime declares
    (`RuntimeAdapter.undecayed_matrices`: matrices it leaves undecayed by design, an input
    embedding say) judged instead of assumed: every other matrix must be found decayed, and every
    declared one found kept. adamw_update_matches_textbook's `matrices_decayed == matrices`
    assumes that every matrix decays, a false FAIL on a correct runtime that exempts its
    embeddings (as many trainers do).

    Observations: those of adamw_update_matches_textbook, and matrices_declared_undecayed (the
    declaration's names), matrices_policy_mismatch (matrices the replay found decayed against the
    declaration or kept against it, or could not tell), declared_unknown (declared names that are
    no matrix of state() and gradients(): a typo would otherwise exempt nothing)."""
    who = subject_of(subject)
    undecayed = runtime.undecayed_matrices()
    settings = TrainSettings(lr=lr, min_lr=min_lr, warmup_steps=warmup_steps, total_steps=total_steps,
                             weight_decay=weight_decay, betas=(beta1, beta2), eps=eps, grad_clip=0.0)
    model = load(runtime, who, device, REFERENCE, train=settings)
    tol = rtol * lr
    try:
        seen = _replay(model, who, steps=steps, lr=lr, min_lr=min_lr, warmup_steps=warmup_steps,
                       total_steps=total_steps, weight_decay=weight_decay, beta1=beta1, beta2=beta2, eps=eps, tol=tol)
    finally:
        model.close()
    decided, shapes, rates = seen["decided"], seen["shapes"], seen["rates"]
    matrices = [n for n, dims in shapes.items() if dims >= 2]
    vectors = [n for n, dims in shapes.items() if dims < 2]
    policy = {n: ({"kept"} if n in undecayed else {"decayed"}) for n in matrices}
    return {
        "update_max_abs_diff": seen["worst"], "update_max_abs_diff_step": seen["worst_step"], "tol": tol,
        "mismatched_parameters": len(seen["mismatched"]), "parameters": len(shapes),
        "matrices": len(matrices), "matrices_decayed": sum(decided.get(n) == {"decayed"} for n in matrices),
        "matrices_undecided": sum(n not in decided for n in matrices),
        "matrices_declared_undecayed": len(undecayed),
        "matrices_policy_mismatch": sum(decided.get(n) != policy[n] for n in matrices),
        "declared_unknown": len(undecayed - set(matrices)),
        "vectors": len(vectors), "vectors_decayed": sum(decided.get(n) == {"decayed"} for n in vectors),
        "vectors_kept": sum(decided.get(n) == {"kept"} for n in vectors),
        "steps": len(rates), "first_lr": rates[0] if rates else math.nan, "last_lr": rates[-1] if rates else math.nan,
    }
