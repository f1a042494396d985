"""Q/K/V projection biases (Qwen2-family models): are they on the device after loading, with the
checkpoint's values, and does the forward on the device path actually add them?

Assumes: Hugging Face tensor names `model.layers.<i>.self_attn.{q,k,v}_proj.{weight,bias}`,
rotary position embeddings, and an attention output that feeds the logits. The **key** bias has
an effect only with rotary positions: without them a key bias adds q_i . b to every score of
query i, a constant that softmax removes; with rotary the bias is rotated by each key's position,
so the scores change. A runtime with learned absolute positions would show k_bias_effect = 0
correctly — this check does not apply to it.

The effect is measured through files and logits only (no module of the runtime is touched): the
checkpoint is copied with one projection's weight zeroed and its bias set to one of two random
values, each copy loaded on the device path, and the logits of one held-out prefix compared.
With a zero weight the projection's output *is* its bias, so a forward that skips the bias add
gives identical logits for both copies.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch

from ..protocol import FAST, LOAD, LOGITS, STATE
from ._base import hf_weight_files, load, subject_of, torch_device, uses

PROJECTIONS = ("q_proj", "k_proj", "v_proj")


def _bias_names(names) -> list[str]:
    return [n for n in names if any(n.endswith(f"self_attn.{p}.bias") for p in PROJECTIONS)]


@uses(LOAD, STATE)
def qkv_bias_presence(*, runtime, device: str, subject: str, path: str = FAST) -> dict:
    """Observations: qkv_bias_expected (q/k/v bias tensors in the checkpoint file),
    qkv_bias_on_device (of those, how many the loaded model holds on `device` with the file's
    values), qkv_bias_nonzero (file biases not all zero: all-zero biases could not show a drop)."""
    from safetensors import safe_open

    dev = torch_device(device)
    who = subject_of(subject)
    files = hf_weight_files(who, "qkv_bias_presence")
    model = load(runtime, who, device, path)
    held = model.state()
    expected = on_device = nonzero = 0
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            for name in _bias_names(handle.keys()):
                expected += 1
                stored = handle.get_tensor(name)
                nonzero += int(bool(stored.abs().max() > 0))
                tensor = held.get(name)
                if tensor is None or tensor.device.type != dev.type or tuple(tensor.shape) != tuple(stored.shape):
                    continue
                if torch.equal(tensor.detach().to("cpu", stored.dtype), stored):
                    on_device += 1
    model.close()
    return {"qkv_bias_expected": expected, "qkv_bias_on_device": on_device, "qkv_bias_nonzero": nonzero}


def _variant(source: Path, out: Path, tensors: dict, layer: int, projection: str, bias: torch.Tensor) -> Path:
    """A copy of the checkpoint directory with layer `layer`'s `projection` weight zeroed and its
    bias replaced (other files linked, never modified)."""
    from safetensors.torch import save_file

    out.mkdir()
    for item in source.iterdir():
        if item.is_file() and not item.name.endswith(".safetensors") and item.name != "model.safetensors.index.json":
            (out / item.name).symlink_to(item)
    prefix = f"model.layers.{layer}.self_attn.{projection}"
    changed = dict(tensors)
    changed[f"{prefix}.weight"] = torch.zeros_like(tensors[f"{prefix}.weight"])
    changed[f"{prefix}.bias"] = bias.to(tensors[f"{prefix}.bias"].dtype)
    save_file({k: v.contiguous() for k, v in changed.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    return out


@uses(LOAD, LOGITS)
def qkv_bias_effect(*, runtime, device: str, subject: str, path: str = FAST, layer: int = 0, seq: int = 9,
                    seed: int = 0) -> dict:
    """For each of q, k, v in turn: two copies of the checkpoint whose layer-`layer` projection
    weight is zero and whose bias is one of two random normal vectors (seeded, drawn on the CPU),
    each loaded on `device`/`path`; the logits of the first `seq` tokens of a held-out row under
    both. Effect = max |logits difference|.

    Observations: bias_effect_max_abs (the smallest of the three effects: every bias must
    matter), q_bias_effect, k_bias_effect, v_bias_effect, logits_max_abs."""
    from safetensors.torch import load_file

    torch_device(device)
    who = subject_of(subject)
    files = hf_weight_files(who, "qkv_bias_effect")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        tensors.update(load_file(str(file)))
    if not _bias_names(tensors):
        raise RuntimeError(f"{who.checkpoint}: no Q/K/V bias tensors; their effect cannot be measured "
                           "(this check applies to Qwen2-family checkpoints)")
    probe = who.heldout(1)[0].inputs[:1, :seq]
    generator = torch.Generator().manual_seed(seed)
    effects, largest = {}, 0.0
    with tempfile.TemporaryDirectory(prefix="pv-bias-") as tmp:
        for projection in PROJECTIONS:
            shape = tensors[f"model.layers.{layer}.self_attn.{projection}.bias"].shape
            outputs = []
            for variant in (0, 1):
                bias = torch.randn(tuple(shape), generator=generator, dtype=torch.float64)
                directory = _variant(who.checkpoint, Path(tmp) / f"{projection}-{variant}", tensors, layer,
                                     projection, bias)
                model = runtime.load(directory, device=device, path=path)
                outputs.append(model.logits(probe).double())
                model.close()
            effects[projection] = float((outputs[0] - outputs[1]).abs().max())
            largest = max(largest, float(outputs[0].abs().max()))
    return {"bias_effect_max_abs": min(effects.values()), "q_bias_effect": effects["q_proj"],
            "k_bias_effect": effects["k_proj"], "v_bias_effect": effects["v_proj"], "logits_max_abs": largest}
