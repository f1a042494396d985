"""A seed decides a runtime's randomness, in any runtime: the same seed gives the same run, and
another seed another initialisation.

The check loads the runtime's own random initialisation (load(init=RANDOM, seed)) of the
subject's architecture three times: twice with one seed, once with the next. The two loads of one
seed must hold identical tensors; the other seed must change the tensors that are drawn at
random (the ones that are not must stay: a norm's ones, a zero bias). Each same-seed model then
takes one training step on the same batch, each from the same state of torch's generators (as
two fresh processes seeded alike start): the two must stay identical. Dropout drawn from torch's
generators is then drawn alike and passes, as it does across two seeded runs; randomness from
anywhere else (the operating system's entropy, the clock, an unseeded generator of its own)
splits them.

The oracle is the property, written in the check; nothing of the runtime judges itself.

Assumes: the runtime has an initialisation of its own (RANDOM_INIT) whose documented seed is
the one load() takes; a step on one device is deterministic for one input (on CUDA an
atomic-add kernel need not be: the step's bound is a fraction of one update's size, not zero).
"""

from __future__ import annotations

import torch

from ..protocol import LOAD, RANDOM, RANDOM_INIT, STATE, TRAIN_STEP, TrainSettings
from ._base import subject_of, torch_device, uses
from ._controls import seeded


def _copies(state) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().to("cpu", torch.float64, copy=True) for name, tensor in state.items()}


def _largest_change(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], names: list[str]) -> float:
    return max((float((a[n] - b[n]).abs().max()) for n in names if a[n].numel()), default=0.0)


@uses(LOAD, RANDOM_INIT, STATE, TRAIN_STEP)
def random_init_is_seeded(*, runtime, device: str, subject: str, path: str = "reference", seed: int = 0,
                          lr: float = 1e-3, step_rtol: float = 1e-3) -> dict:
    """Three random initialisations (seed, seed, seed + 1) of the subject's architecture on
    `device`, then one step (at `lr`) of each same-seed model on the subject's first training batch.

    Observations: tensors, same_seed_max_abs_diff (between the two loads of one seed),
    drawn_tensors (tensors that differ between seed and seed + 1), constant_tensors (the same
    under both seeds: drawn from no generator), matrices_constant (constant tensors of two or
    more dimensions: a projection or an embedding every seed starts alike, which no language
    model's initialisation intends), same_seed_step_max_abs_diff (after the step),
    step_tol (step_rtol * lr), shape_mismatches."""
    torch_device(device)
    who = subject_of(subject)

    def init(s: int, train: TrainSettings | None = None):
        return runtime.load(who.checkpoint, device=device, path=path, init=RANDOM, seed=s, train=train)

    settings = TrainSettings(lr=lr, seed=seed)
    first, second = init(seed, settings), init(seed, settings)
    other = init(seed + 1)
    try:
        a, b, c = _copies(first.state()), _copies(second.state()), _copies(other.state())
        names = sorted(set(a) & set(b) & set(c))
        mismatched = sum(not (a[n].shape == b[n].shape == c[n].shape) for n in names)
        names = [n for n in names if a[n].shape == b[n].shape == c[n].shape]
        drawn = {n for n in names if a[n].numel() and not torch.equal(a[n], c[n])}
        batch = who.train(1)[0]
        for model in (first, second):   # each from the state a fresh process with this seed starts in
            with seeded(seed):
                model.train_step(batch)
        stepped = _largest_change(_copies(first.state()), _copies(second.state()), names)
    finally:
        for model in (first, second, other):
            model.close()
    return {"tensors": len(names), "same_seed_max_abs_diff": _largest_change(a, b, names),
            "drawn_tensors": len(drawn), "constant_tensors": len(names) - len(drawn),
            "matrices_constant": sum(a[n].dim() >= 2 and n not in drawn for n in names),
            "same_seed_step_max_abs_diff": stepped, "step_tol": step_rtol * lr, "shape_mismatches": mismatched}
