"""Does the fast path keep float32's exponent range? Logits past float16's largest value.

A fast path that computes in a 16-bit type may trade mantissa bits for speed (bfloat16 keeps
8 bits of mantissa and float32's 8 exponent bits), but a value float32 holds must not overflow:
bfloat16 reaches 3.4e38 like float32; float16 stops at 65504, and an autocast to float16 with
no loss scaling turns any activation or logit beyond that into inf. On a tolerance check that
compares the fast path with the reference path, float16 even looks *better* than bfloat16
(three more mantissa bits), so only a check of the range tells the two apart.

The check scales the checkpoint's final norm weight by a power of two s, which multiplies every
logit by exactly s (the output head is linear in the final norm's output; a power of two
commutes with every rounding of float32, bfloat16 and float16 as long as nothing overflows or
underflows), chosen so that the largest logit passes 2^20 (16x float16's largest). The oracle is
that scaling law, applied to the runtime's own fast-path logits of the unscaled checkpoint:
independent of the dtype the runtime picks and of any implementation of the model.

Assumes: a pre-norm decoder whose final normalisation has a weight tensor named `norm.weight`
outside its layers (`model.norm.weight` in the Llama/Qwen2/Mistral families), multiplied into
its output, followed by a linear output head without bias; a checkpoint in safetensors files.
"""

from __future__ import annotations

import math
import re
import tempfile
from pathlib import Path

import torch

from ..protocol import FAST, FAST_PATH, LOAD, LOGITS, REFERENCE
from ._base import checkpoint_copy, hf_weight_files, subject_of, torch_device, uses
from .bias import NotApplicable

FLOAT16_MAX = 65504.0
TARGET_MAGNITUDE = 2.0 ** 20   # the scaled logits' largest magnitude: 16x float16's range, far inside bfloat16's

_FINAL_NORM = re.compile(r"(^|\.)norm\.weight$")


def final_norm_name(tensors: dict) -> str:
    """The final norm's weight: the one `...norm.weight` not inside a layer."""
    found = [name for name in tensors if _FINAL_NORM.search(name) and ".layers." not in f".{name}"]
    if len(found) != 1:
        raise NotApplicable("fast_path_exponent_range", f"no single final norm weight `norm.weight` outside the "
                                                        f"layers ({found[:3]}): the logits cannot be scaled exactly")
    return found[0]


@uses(LOAD, FAST_PATH, LOGITS)
def fast_path_exponent_range(*, runtime, device: str, subject: str, seq: int = 16, rows: int = 2) -> dict:
    """The fast-path logits of `rows` held-out rows (first `seq` tokens) from the checkpoint as it
    is and from a copy whose final norm weight is multiplied by s = 2^k (the smallest power of two
    that takes the largest logit past TARGET_MAGNITUDE), against s times the first.

    Observations: scale, logits_max_abs (the unscaled fast-path logits), scaled_max_abs (s x
    that: the magnitude the scaled run must reach), nonfinite_logits (in the scaled run),
    rel_diff (max |scaled run - s x unscaled run| / max |s x unscaled run|, over finite and
    non-finite entries alike: inf where any is non-finite), reference_rel_diff (the same for the
    reference path: the scaling law itself, where no 16-bit type is involved)."""
    from safetensors.torch import load_file

    torch_device(device)
    if not runtime.supports_path(FAST):
        raise NotApplicable("fast_path_exponent_range", "the runtime has no fast path")
    who = subject_of(subject)
    tensors: dict[str, torch.Tensor] = {}
    for file in hf_weight_files(who, "fast_path_exponent_range"):
        tensors.update(load_file(str(file)))
    name = final_norm_name(tensors)
    probe = who.heldout(1)[0].inputs[:rows, :seq]

    def logits(directory: Path, path: str) -> torch.Tensor:
        model = runtime.load(directory, device=device, path=path)
        try:
            return model.logits(probe).to(torch.float64)
        finally:
            model.close()

    plain = {path: logits(who.checkpoint, path) for path in (REFERENCE, FAST)}
    largest = float(plain[FAST].abs().max())
    if not math.isfinite(largest) or largest == 0:
        raise RuntimeError(f"the unscaled fast-path logits' largest magnitude is {largest}: nothing to scale")
    scale = 2.0 ** math.ceil(math.log2(TARGET_MAGNITUDE / largest))
    with tempfile.TemporaryDirectory(prefix="pv-range-") as tmp:
        directory = checkpoint_copy(who.checkpoint, Path(tmp) / "scaled", tensors={**tensors, name: tensors[name] * scale})
        scaled = {path: logits(directory, path) for path in (REFERENCE, FAST)}

    def rel(path: str) -> float:
        expected = plain[path] * scale
        if not torch.isfinite(scaled[path]).all():
            return float("inf")
        return float((scaled[path] - expected).abs().max() / expected.abs().max())

    return {"scale": scale, "logits_max_abs": largest, "scaled_max_abs": largest * scale,
            "nonfinite_logits": int((~torch.isfinite(scaled[FAST])).sum()), "rel_diff": rel(FAST),
            "reference_rel_diff": rel(REFERENCE)}
