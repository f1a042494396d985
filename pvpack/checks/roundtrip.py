"""What a runtime saves is what it loads back, bit for bit, in any runtime.

A model trained a few steps (so its weights are its own, not the subject's file) is saved as a
checkpoint directory and loaded again by the same runtime: every tensor must come back with its
name, dtype and exact value, and the reloaded model's logits must be the saved model's. A save
that rounds (bf16, fp16), drops or renames a tensor, unties or reties a head, writes a config
value other than the model's (a norm eps, a rope theta), or a load that transposes, rounds, or
reads a file other than the one it was given, all show.

The oracle is the model before the save, held by the check: equality needs no second
implementation. The trained weights are compared with the subject's own as well, so a load
that ignores the saved directory and reopens the original checkpoint cannot pass.

Assumes: load(directory) of the runtime's own save gives the model it saved (a runtime that
saves in another precision on purpose would state it in the contract and compare within it);
state() names the same tensors for both models.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from ..protocol import LOAD, LOGITS, REFERENCE, SAVE, STATE, TRAIN_STEP, TrainSettings
from ._base import load, subject_of, uses


def _copies(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in state.items()}


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float((a.to(torch.float64) - b.to(torch.float64)).abs().max()) if a.numel() else 0.0


@uses(LOAD, TRAIN_STEP, STATE, LOGITS, SAVE)
def saved_model_reloads_exactly(*, runtime, device: str, subject: str, path: str = REFERENCE, steps: int = 2,
                                lr: float = 1e-3, rows: int = 2) -> dict:
    """The subject's model trained `steps` steps at `lr`, saved, and loaded again on `device`.

    Observations: tensors (in the saved model's state), missing_tensors / extra_tensors (names
    the reloaded model lacks / adds), dtype_changes, shape_changes, state_max_abs_diff (largest
    change of any value, over common names), logits_max_abs_diff (held-out rows, before the save
    and after the load), logits_max_abs_ref, trained_vs_subject (largest difference between
    the trained weights and the subject's: > 0, else nothing distinguishes the saved directory
    from the subject's file), steps."""
    who = subject_of(subject)
    inputs = who.heldout(1)[0].inputs[:rows]
    original = load(runtime, who, device, path)
    subject_state = _copies(original.state())
    original.close()
    model = load(runtime, who, device, path, train=TrainSettings(lr=lr))
    for batch in who.train(steps):
        model.train_step(batch)
    saved_state = _copies(model.state())
    saved_logits = model.logits(inputs).to(torch.float64)
    with tempfile.TemporaryDirectory(prefix="pv-roundtrip-") as tmp:
        directory = model.save(Path(tmp) / "saved")
        model.close()
        reloaded = runtime.load(directory, device=device, path=path)
        try:
            loaded_state = _copies(reloaded.state())
            loaded_logits = reloaded.logits(inputs).to(torch.float64)
        finally:
            reloaded.close()
    common = sorted(set(saved_state) & set(loaded_state))
    trained_vs_subject = max((_max_abs(saved_state[n], subject_state[n]) for n in common if n in subject_state),
                             default=0.0)
    return {
        "tensors": len(saved_state),
        "missing_tensors": len(set(saved_state) - set(loaded_state)),
        "extra_tensors": len(set(loaded_state) - set(saved_state)),
        "dtype_changes": sum(saved_state[n].dtype != loaded_state[n].dtype for n in common),
        "shape_changes": sum(saved_state[n].shape != loaded_state[n].shape for n in common),
        "state_max_abs_diff": max((_max_abs(saved_state[n], loaded_state[n]) for n in common), default=0.0),
        "logits_max_abs_diff": float((saved_logits - loaded_logits).abs().max()),
        "logits_max_abs_ref": float(saved_logits.abs().max()),
        "trained_vs_subject": trained_vs_subject, "steps": steps,
    }
