"""Fine-tuning from a checkpoint starts where the checkpoint is, and then learns.

Assumes: the runtime can load a checkpoint for training (load with TrainSettings) and for
inference, and both give the same weights. The checkpoint's own eval is the runtime's eval of
the checkpoint loaded for inference; a fine-tune that silently re-initialises its weights (or
drops a tensor, or unties the head) starts elsewhere and its first eval differs.
"""

from __future__ import annotations

import math

from ..protocol import EVALUATE, LOAD, TRAIN_STEP, TrainSettings
from ._base import load, subject_of, uses


_RUNS: dict[tuple, dict] = {}  # one fine-tune per process serves both falsifiers of the contract


def _planted() -> tuple[str, ...]:
    try:
        from pv.mutation import planted
    except ImportError:  # pragma: no cover
        return ()
    return planted()


@uses(LOAD, EVALUATE, TRAIN_STEP)
def finetune_from_checkpoint(*, runtime, device: str, subject: str, path: str | None = None, steps: int = 10,
                             lr: float = 1e-3, eval_batches: int = 2) -> dict:
    """The checkpoint loaded for inference and evaluated (checkpoint_val_loss); loaded for
    training at a constant `lr` and evaluated before any step (first_val_loss) and after `steps`
    steps on the subject's training batches (final_val_loss).

    (Cached per process by runtime, arguments and planted bugs: both falsifiers of the
    contract read one run.) Observations: checkpoint_val_loss, first_val_loss, final_val_loss, steps, ln_vocab."""
    key = (runtime.name, device, subject, path, steps, lr, eval_batches, _planted())
    if key not in _RUNS:
        _RUNS[key] = _finetune(runtime, device, subject, path, steps, lr, eval_batches)
    return dict(_RUNS[key])


def _finetune(runtime, device: str, subject: str, path: str | None, steps: int, lr: float,
              eval_batches: int) -> dict:
    """The run behind finetune_from_checkpoint."""
    from .evaluation import default_path

    who = subject_of(subject)
    path = default_path(runtime, device, path)
    held_out = who.heldout(eval_batches)
    inference = load(runtime, who, device, path)
    checkpoint_val = inference.evaluate(held_out)
    inference.close()
    model = load(runtime, who, device, path, train=TrainSettings(lr=lr))
    first = model.evaluate(held_out)
    for batch in who.train(steps):
        model.train_step(batch)
    final = model.evaluate(held_out)
    model.close()
    return {"checkpoint_val_loss": checkpoint_val, "first_val_loss": first, "final_val_loss": final,
            "steps": steps, "ln_vocab": math.log(who.vocab_size)}
