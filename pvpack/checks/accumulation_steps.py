"""Gradient accumulation over several steps, with clipping and a learning-rate schedule on.

pvpack.checks.accumulation compares one step with clipping off at the schedule's first step: it
cannot see a defect that needs a clip or a second step. Two such defects are common in training
loops: the gradient clipped inside the accumulation loop (after every micro-batch's backward, so
the early micro-batches are scaled down again and again and the step is not the whole batch's
clipped gradient), and the schedule advanced once per micro-batch instead of once per optimizer
step (`scheduler.step()` inside the loop: warmup ends and the decay runs k times too early).

The claim: a run of `steps` optimizer steps in `micro_batches` micro-batches each, with the
gradient clipped at `grad_clip` (small enough that every step clips) and a warmup + cosine
schedule, applies at every step the gradient the same run over whole batches applies, and
reports its loss. The oracle is the same runtime's whole-batch run, in lockstep on the same
batches (independent of the runtime's accumulation code, its split and its micro-batch loop);
the check also reads, in float64, the norm of every gradient the whole-batch run applied, so that
a run in which clipping never acted (a vacuous comparison) is seen.

Compared on the gradients each step applied, never on weights: AdamW's first steps move a weight
by about lr whatever the size of its gradient, so float rounding in a near-zero gradient entry can
move a weight by 2 lr (tests of this repository measured it across CPUs). The gradients of a later
step read the weights the earlier steps made, so a learning rate that differs at step 2 shows in
step 3's gradients. Assumes a step draws no random numbers (no dropout) and gradients() holds the
gradient the step applied, after clipping (the protocol's train_step).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ..protocol import GRADIENT_ACCUMULATION, GRADIENTS, IGNORE_INDEX, LOAD, TRAIN_STEP, TrainSettings
from ._base import load, subject_of, uses
from ._batches import ragged
from ._controls import path_dtype, seeded, tolerance_of
from .evaluation import default_path

_TOLERANCE = {"float32": (1e-4, 1e-9), "bfloat16": (0.15, 1e-7)}


def _flat(gradients: dict[str, torch.Tensor], names: list[str]) -> torch.Tensor:
    return torch.cat([gradients[n].detach().to("cpu", torch.float64).flatten() for n in names])


@uses(LOAD, TRAIN_STEP, GRADIENTS, GRADIENT_ACCUMULATION)
def accumulated_run_matches_full_batch_run(*, runtime, device: str, subject: str, path: str | None = None,
                                           micro_batches: int = 3, steps: int = 3, rows: int = 7, min_len: int = 3,
                                           max_len: int = 40, lr: float = 1e-2, warmup_steps: int = 2,
                                           total_steps: int = 6, grad_clip: float = 1e-2, seed: int = 0,
                                           tolerance: dict | None = None) -> dict:
    """Two models of the subject's weights trained `steps` steps in lockstep on the same ragged
    batches (lr with warmup and cosine decay, no weight decay, clipping at grad_clip): one over
    whole batches, one in `micro_batches` micro-batches. At each step the gradients they applied
    and the losses they reported are compared.

    Observations: worst_grad_ratio (the largest, over steps, of the gradients' max abs difference
    over the whole run's largest entry), grad_ratio_step_1 / grad_ratio_last (the first and last
    step's), worst_loss_ratio (reported losses, relative), rtol, atol (of the path's dtype);
    clipped_steps (steps whose applied whole-batch gradient has norm grad_clip within 1e-3,
    float64 in the check: clipping acted), min_applied_norm / max_applied_norm, grad_nonfinite,
    grad_names_differ, steps, micro_batches, min_micro_tokens / max_micro_tokens (the design:
    micro-batches of ceil(rows / k) rows)."""
    who = subject_of(subject)
    path = default_path(runtime, device, path)
    rtol, atol = tolerance_of(tolerance, path_dtype(path), _TOLERANCE)
    sources = who.train(steps)
    if len(sources) < steps:
        raise ValueError(f"subject {who.name} has {len(sources)} training batches; the check steps {steps}")
    batches = [ragged(sources[i], rows, min_len, max_len, seed + i) for i in range(steps)]
    settings = TrainSettings(lr=lr, warmup_steps=warmup_steps, total_steps=total_steps, min_lr=lr / 10,
                             weight_decay=0.0, grad_clip=grad_clip, seed=seed)
    whole = load(runtime, who, device, path, train=settings)
    accumulated = load(runtime, who, device, path,
                       train=dataclasses.replace(settings, micro_batches=micro_batches))
    ratios, loss_ratios, norms = [], [], []
    nonfinite = names_differ = 0
    try:
        for step, batch in enumerate(batches):
            with seeded(seed + step):
                whole_loss = whole.train_step(batch)
            with seeded(seed + step):
                loss = accumulated.train_step(batch)
            expected, actual = whole.gradients(), accumulated.gradients()
            names = sorted(set(expected) & set(actual))
            if not names:
                raise ValueError(f"the runtime's gradients() after step {step} named no parameter")
            names_differ += len(set(expected) ^ set(actual))
            e, a = _flat(expected, names), _flat(actual, names)
            finite = torch.isfinite(e) & torch.isfinite(a)
            nonfinite += int((~finite).sum())
            reference = float(e[finite].abs().max()) if bool(finite.any()) else math.nan
            difference = float((a - e)[finite].abs().max()) if bool(finite.any()) else math.nan
            ratios.append((difference - atol) / reference if reference > 0 else math.inf)
            loss_ratios.append(abs(loss - whole_loss) / max(abs(whole_loss), 1e-30))
            norms.append(float(torch.linalg.vector_norm(e[finite])))
    finally:
        whole.close()
        accumulated.close()
    size = math.ceil(rows / micro_batches)
    micro_tokens = [int((b.targets[i:i + size] != IGNORE_INDEX).sum()) for b in batches for i in range(0, rows, size)]
    return {
        "worst_grad_ratio": max(ratios), "grad_ratio_step_1": ratios[0], "grad_ratio_last": ratios[-1],
        "worst_loss_ratio": max(loss_ratios), "rtol": rtol, "atol": atol,
        "clipped_steps": sum(abs(n - grad_clip) <= 1e-3 * grad_clip for n in norms),
        "min_applied_norm": min(norms), "max_applied_norm": max(norms),
        "grad_nonfinite": nonfinite, "grad_names_differ": names_differ, "steps": steps,
        "micro_batches": micro_batches, "min_micro_tokens": min(micro_tokens), "max_micro_tokens": max(micro_tokens),
    }
