"""Gradient clipping by the global norm: a step clipped to max_norm applies the unclipped
gradient scaled by one factor, max_norm / ||g|| over every parameter together, and a step whose
gradient is already inside max_norm applies it unchanged.

The check steps three fresh copies of the subject's model on one batch, from one state of
torch's generators (so dropout draws alike): without clipping (the raw gradient g and its global
norm, in float64), clipped to a quarter of that norm, and clipped to four times it. What each
step applied (`gradients`, after clipping) is compared with g scaled as the definition says.

Bugs of the class: the norm taken per tensor (each tensor clipped on its own, or the largest
tensor norm used as the global one), the factor not capped at 1 (a small gradient scaled up),
the norm squared or without its square root, clipping to zero when it is documented as off, or
a clip applied to another copy of the gradients than the one the optimizer reads.

The oracle is the definition, written here in float64 from the runtime's own unclipped
gradient: independent of the runtime's norm and clipping code. Assumes: `gradients` are what the
step applied (after clipping, as the protocol says), one step's gradient is deterministic for one
input from one generator state, and clipping uses the L2 norm over all trainable parameters
(torch.nn.utils.clip_grad_norm_'s default; a runtime that clips per parameter group on purpose
is outside this contract).
"""

from __future__ import annotations

import math

import torch

from ..protocol import GRADIENTS, LOAD, REFERENCE, TRAIN_STEP, TrainSettings
from ._base import load, subject_of, uses
from ._controls import stepped

# torch.nn.utils.clip_grad_norm_'s factor is max_norm / (norm + 1e-6): the definition people
# clip by, so the oracle uses it too (without it a subject of small gradients, norm 1e-3, would
# differ by 1e-3 from a correct runtime)
TORCH_EPS = 1e-6

def _largest(tensors: dict[str, torch.Tensor], names: list[str]) -> float:
    return max((float(tensors[n].abs().max()) for n in names if tensors[n].numel()), default=0.0)


def _norm(tensors: dict[str, torch.Tensor], names: list[str]) -> float:
    return math.sqrt(sum(float(tensors[n].pow(2).sum()) for n in names))


@uses(LOAD, TRAIN_STEP, GRADIENTS)
def clipping_is_global(*, runtime, device: str, subject: str, path: str = REFERENCE, clip_fraction: float = 0.25,
                       headroom: float = 4.0, lr: float = 1e-3, seed: int = 0) -> dict:
    """The gradients a step applied without clipping (g), clipped to `clip_fraction` * ||g||,
    and clipped to `headroom` * ||g||, on `device`/`path`.

    Observations: raw_norm (||g||, float64 over every trainable parameter), max_norm (the clip
    of the clipped step), clipped_max_rel_diff (largest |applied - g * max_norm / ||g|| |, over
    the largest expected value; the factor is torch's, max_norm / (||g|| + 1e-6)), clipped_norm_ratio (||applied|| / max_norm: 1 for a global clip),
    tensor_ratio_spread (largest / smallest per-tensor ||applied_t|| / ||g_t||, minus 1: 0 when one
    factor scales every tensor), unclipped_max_rel_diff (the step inside its clip against g),
    tensors, names_differ (tensors present in one step's gradients and not another's)."""
    who = subject_of(subject)
    batch = who.train(1)[0]

    def applied(grad_clip: float) -> dict[str, torch.Tensor]:
        model = load(runtime, who, device, path, train=TrainSettings(lr=lr, grad_clip=grad_clip, seed=seed))
        return stepped(model, batch, rng_seed=seed)[1]

    raw = applied(0.0)
    names = sorted(raw)
    raw_norm = _norm(raw, names)
    observed = {"raw_norm": raw_norm, "tensors": len(names)}
    if raw_norm == 0.0 or not math.isfinite(raw_norm):  # nothing to scale: the prediction's raw_norm > 0 says so
        return {**observed, "max_norm": 0.0, "clipped_max_rel_diff": math.inf, "clipped_norm_ratio": math.inf,
                "tensor_ratio_spread": math.inf, "unclipped_max_rel_diff": math.inf, "names_differ": 0}
    max_norm = clip_fraction * raw_norm
    clipped, loose = applied(max_norm), applied(headroom * raw_norm)
    common = [n for n in names if n in clipped and n in loose]
    differ = len(set(raw) ^ set(clipped)) + len(set(raw) ^ set(loose))
    scale = max_norm / (raw_norm + TORCH_EPS)
    expected = {n: raw[n] * scale for n in common}
    clipped_diff = max((float((clipped[n] - expected[n]).abs().max()) for n in common if raw[n].numel()), default=0.0)
    loose_diff = max((float((loose[n] - raw[n]).abs().max()) for n in common if raw[n].numel()), default=0.0)
    ratios = [float(clipped[n].norm()) / float(raw[n].norm()) for n in common if float(raw[n].norm()) > 0]
    spread = (max(ratios) / min(ratios) - 1.0) if ratios and min(ratios) > 0 else math.inf
    return {**observed, "max_norm": max_norm,
            "clipped_max_rel_diff": clipped_diff / (_largest(expected, common) or 1.0),
            "clipped_norm_ratio": _norm(clipped, common) / max_norm, "tensor_ratio_spread": spread,
            "unclipped_max_rel_diff": loose_diff / (_largest(raw, common) or 1.0), "names_differ": differ}
