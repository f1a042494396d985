"""A checkpoint whose config.json asks for scaled rotary positions: refused, or computed as asked.

Long-context checkpoints stretch RoPE (linear position interpolation, NTK/dynamic, YaRN, Llama
3's frequency bands) through a field of config.json: `rope_parameters` in transformers 5
(`{"rope_type": "linear", "factor": 4.0, "rope_theta": ...}`), `rope_scaling` before it. A
runtime that does not implement a variant must refuse the config; one that reads past the field
(a key misspelt, the legacy key looked up in the new object) runs plain RoPE and returns logits
that are fluent-looking and wrong at every position after the first.

The check writes two copies of the subject's checkpoint (weights linked, only config.json
rewritten in transformers-5 keys): a control whose `rope_parameters` names the default RoPE,
and one with linear scaling by `factor`. The runtime must load the control (so a refusal of the
scaled copy is a refusal of the scaling, not a loader that breaks on rewritten configs) and
either refuse the scaled copy at load or give transformers' logits for it.

Oracle: transformers (AutoModelForCausalLM, float32, eager attention) reading the same scaled
config.json, an implementation independent of the runtime under test; the fixture is shown to
matter by transformers' own logits of the scaled and the control copy differing.

Assumes: a Hugging Face checkpoint (config.json + model*.safetensors) of a rotary-position
family that transformers implements with `rope_parameters` (transformers >= 5).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from ..protocol import LOAD, LOGITS, REFERENCE, AdapterError
from ._base import checkpoint_copy, hf_weight_files, max_relative_diff, subject_of, torch_device, uses
from .bias import NotApplicable


def _copy_with_rope(source: Path, out: Path, rope: dict) -> Path:
    """`source` with config.json's RoPE fields replaced by `rope_parameters` = rope (other files linked)."""
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    config.pop("rope_scaling", None)
    config["rope_parameters"] = rope
    config["rope_theta"] = rope["rope_theta"]
    return checkpoint_copy(source, out, config=config)


def _transformers_logits(directory: Path, probe: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        return model(input_ids=probe, use_cache=False).logits.to(torch.float64)


@uses(LOAD, LOGITS)
def scaled_rope_refused_or_computed(*, runtime, device: str, subject: str, factor: float = 4.0,
                                    seq: int = 32) -> dict:
    """The control copy (default RoPE) and the linearly scaled copy (`factor`) of the subject's
    checkpoint, loaded on `device` (reference path); the logits of the first `seq` tokens of a
    held-out row from each, against transformers' logits of the same copy.

    Observations: control_rel_diff (the runtime's control logits against transformers': the
    copy is read at all), refused (1 when loading the scaled copy raised, else 0), scaled_rel_diff
    (the runtime's scaled logits against transformers' scaled logits; 0 when refused),
    separation (transformers' scaled logits against its control logits: how much the scaling
    changes; the fixture tells plain RoPE from scaled only when this is large), refusal (the
    error's text, empty when loaded)."""
    torch_device(device)
    who = subject_of(subject)
    hf_weight_files(who, "scaled_rope_refused_or_computed")
    config = who.config
    theta = (config.get("rope_parameters") or {}).get("rope_theta", config.get("rope_theta"))
    if theta is None:
        raise NotApplicable("scaled_rope_refused_or_computed", "config.json names no rope_theta: not a "
                                                               "rotary-position checkpoint")
    probe = who.heldout(1)[0].inputs[:1, :seq]
    with tempfile.TemporaryDirectory(prefix="pv-rope-") as tmp:
        control = _copy_with_rope(who.checkpoint, Path(tmp) / "control", {"rope_type": "default",
                                                                            "rope_theta": float(theta)})
        scaled = _copy_with_rope(who.checkpoint, Path(tmp) / "scaled", {"rope_type": "linear", "factor": float(factor),
                                                                          "rope_theta": float(theta)})
        oracle = {"control": _transformers_logits(control, probe), "scaled": _transformers_logits(scaled, probe)}
        model = runtime.load(control, device=device, path=REFERENCE)
        control_logits = model.logits(probe).to(torch.float64)
        model.close()
        refusal = ""
        try:
            model = runtime.load(scaled, device=device, path=REFERENCE)
        except AdapterError as error:
            refusal = str(error)
        else:
            scaled_logits = model.logits(probe).to(torch.float64)
            model.close()
    return {"control_rel_diff": max_relative_diff(control_logits, oracle["control"]), "refused": int(bool(refusal)),
            "scaled_rel_diff": 0.0 if refusal else max_relative_diff(scaled_logits, oracle["scaled"]),
            "separation": max_relative_diff(oracle["scaled"], oracle["control"]), "refusal": refusal[:300]}
