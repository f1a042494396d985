"""Q/K/V projection biases (Qwen2-family models, Llama/Mistral with attention_bias, ...): are they on
the device after loading, with the checkpoint's values, and does the forward on the device path
actually add them?

Assumes: Hugging Face tensor names, `...layers.<i>.self_attn.{q,k,v}_proj.{weight,bias}` (the
presence check also counts a fused projection's bias: GPT-2's `attn.c_attn`, GPT-NeoX's
`attention.query_key_value`, Phi-3's `self_attn.qkv_proj`), rotary position embeddings, and an
attention output that feeds the logits. The **key** bias has an effect only with rotary
positions: without them a key bias adds q_i . b to every score of query i, a constant that
softmax removes; with rotary the bias is rotated by each key's position, so the scores change.

Where the checks do not apply they SKIP saying why (NotApplicable), never pass: an architecture
whose transformers implementation holds no Q/K/V bias (Llama, Mistral, Gemma, Phi-3 as shipped),
and for the effect check a fused projection (its q, k and v parts sit in a layout of the
architecture's own, which the check does not split) or positions that are not rotary (GPT-2,
OPT: k_bias_effect would be 0 correctly). A checkpoint whose file lacks biases that transformers'
implementation of its architecture holds is measured, and fails.

The effect is measured through files and logits only (no module of the runtime is touched): the
checkpoint is copied with one projection's weight zeroed and its bias set to one of two random
values, each copy loaded on the device path, and the logits of one held-out prefix compared.
With a zero weight the projection's output *is* its bias, so a forward that skips the bias add
gives identical logits for both copies.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import torch

from ..protocol import FAST, LOAD, LOGITS, STATE, CapabilityMissing
from ._base import hf_weight_files, load, subject_of, torch_device, uses

PROJECTIONS = ("q_proj", "k_proj", "v_proj")
FUSED = ("attn.c_attn.bias", "attention.query_key_value.bias", "self_attn.qkv_proj.bias")


class NotApplicable(CapabilityMissing):
    """The subject's architecture lacks what the check measures: a SKIP saying why, never a pass."""

    def __init__(self, check: str, why: str):
        self.capability, self.adapter = "architecture", ""
        Exception.__init__(self, f"{check} does not apply to this checkpoint's architecture: {why}")


def _bias_names(names) -> list[str]:
    return [n for n in names if any(n.endswith(f"self_attn.{p}.bias") for p in PROJECTIONS)]


def _fused_bias_names(names) -> list[str]:
    return [n for n in names if n.endswith(FUSED)]


def _architecture(checkpoint: Path) -> tuple[str, set[str], bool] | None:
    """(model class, tensor names, rotary positions?) of transformers' implementation of the
    checkpoint's architecture, built on the meta device: independent of the runtime under test.
    None where transformers is absent or does not implement it."""
    try:
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(str(checkpoint))
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception:  # noqa: BLE001 - not transformers' to judge: measure as the file says
        return None
    rotary = any(name.endswith("rotary_emb") for name, _ in model.named_modules())
    return type(model).__name__, set(model.state_dict()), rotary


def _no_biases(check: str, checkpoint: Path) -> None:
    """SKIP when transformers' implementation of the architecture holds no Q/K/V bias either (the
    file is right to have none); return (measure, and fail) when it does or cannot tell."""
    architecture = _architecture(checkpoint)
    if architecture is not None and not (_bias_names(architecture[1]) or _fused_bias_names(architecture[1])):
        raise NotApplicable(check, f"{architecture[0]} has no Q/K/V projection biases (neither the checkpoint "
                                   "nor transformers' implementation of the architecture holds any)")


@uses(LOAD, STATE)
def qkv_bias_presence(*, runtime, device: str, subject: str, path: str = FAST) -> dict:
    """Observations: qkv_bias_expected (q/k/v bias tensors in the checkpoint file),
    qkv_bias_on_device (of those, how many the loaded model holds on `device` with the file's
    values), qkv_bias_nonzero (file biases not all zero: all-zero biases could not show a drop)."""
    from safetensors import safe_open

    dev = torch_device(device)
    who = subject_of(subject)
    files = hf_weight_files(who, "qkv_bias_presence")
    names = []
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            keys = list(handle.keys())
            names += _bias_names(keys) + _fused_bias_names(keys)
    if not names:
        _no_biases("qkv_bias_presence", who.checkpoint)
    model = load(runtime, who, device, path)
    held = model.state()
    expected = on_device = nonzero = 0
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            for name in [n for n in handle.keys() if n in names]:
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


def _projection(tensors: dict, layer: int, projection: str) -> str:
    """The name (without .weight/.bias) of layer `layer`'s `projection`: `model.layers.0.self_attn.q_proj`
    in most families, under another stem in some (`model.decoder.layers.0...`)."""
    pattern = re.compile(rf"(^|\.)layers\.{layer}\.self_attn\.{projection}\.bias$")
    found = [n for n in _bias_names(tensors) if pattern.search(n)]
    if len(found) != 1:
        raise RuntimeError(f"layer {layer}'s {projection} bias: {len(found)} tensors match ({found[:3]})")
    return found[0][:-len(".bias")]


def _variant(source: Path, out: Path, tensors: dict, layer: int, projection: str, bias: torch.Tensor) -> Path:
    """A copy of the checkpoint directory with layer `layer`'s `projection` weight zeroed and its
    bias replaced (other files linked, never modified)."""
    from safetensors.torch import save_file

    out.mkdir()
    for item in source.iterdir():
        if item.is_file() and not item.name.endswith(".safetensors") and item.name != "model.safetensors.index.json":
            (out / item.name).symlink_to(item)
    prefix = _projection(tensors, layer, projection)
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
        fused = _fused_bias_names(tensors)
        if fused:
            raise NotApplicable("qkv_bias_effect", f"a fused Q/K/V projection ({fused[0]}) holds the q, k and v "
                                                   "biases in one tensor in a layout of the architecture's own; "
                                                   "the check sets each separately and does not split it")
        _no_biases("qkv_bias_effect", who.checkpoint)
        raise RuntimeError(f"{who.checkpoint}: no Q/K/V bias tensors, though transformers' implementation of "
                           "its architecture has them (or transformers cannot tell): their effect cannot be "
                           "measured")
    architecture = _architecture(who.checkpoint)
    if architecture is not None and not architecture[2]:
        raise NotApplicable("qkv_bias_effect", f"{architecture[0]} has no rotary position embedding: a key "
                                               "bias adds a per-query constant to the scores, which softmax "
                                               "removes, so k_bias_effect = 0 would be right")
    probe = who.heldout(1)[0].inputs[:1, :seq]
    generator = torch.Generator().manual_seed(seed)
    effects, largest = {}, 0.0
    with tempfile.TemporaryDirectory(prefix="pv-bias-") as tmp:
        for projection in PROJECTIONS:
            shape = tensors[f"{_projection(tensors, layer, projection)}.bias"].shape
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
