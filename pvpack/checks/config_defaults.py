"""A config.json in transformers' minimal form (defaults left out) reads as the full one.

transformers' `save_pretrained` writes a config's *diff* against its class defaults
(PretrainedConfig.to_diff_dict): a key whose value is the class default — `tie_word_embeddings`
false for Qwen2 and Llama, `rms_norm_eps` 1e-6, `hidden_act` "silu", `initializer_range` 0.02 —
may be absent from a real checkpoint. A runtime that fills an absent key with a default other
than the model class's (a tied head where the class unties it, another epsilon) loads such a
checkpoint without complaint and computes another model; with every key written (as most
runtimes write their own configs) nothing shows.

The check writes two copies of the subject's checkpoint with an *untied* output head (the
subject's head, or, for a tied subject, its embedding plus seeded noise: so reading the head as
tied changes the logits): one whose config.json states every key, one with every key equal to
the transformers config class's default removed (model_type kept, as to_diff_dict keeps it),
`tie_word_embeddings` among them. Oracle: transformers (float32, eager attention) reading the
full copy; the runtime's logits of both copies are judged against it.

Assumes: a Hugging Face checkpoint (config.json + model*.safetensors) of a family transformers
implements, whose output head is `lm_head.weight` when untied and whose embedding is the one
`embed_tokens.weight`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from ..protocol import LOAD, LOGITS, REFERENCE, AdapterError
from ._base import checkpoint_copy, hf_weight_files, max_relative_diff, subject_of, torch_device, uses
from .bias import NotApplicable


def class_defaults(model_type: str) -> dict:
    """The transformers config class's own values for `model_type` (what to_diff_dict compares with)."""
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type).to_dict()


def minimal_config(config: dict, defaults: dict) -> dict:
    """`config` without the keys whose value is the class default (model_type always kept)."""
    missing = object()
    return {key: value for key, value in config.items()
            if key == "model_type" or defaults.get(key, missing) != value}


def _untied_tensors(tensors: dict, seed: int) -> dict:
    embed = [name for name in tensors if name.endswith("embed_tokens.weight")]
    if len(embed) != 1:
        raise NotApplicable("minimal_config_reads_as_full", f"no single embed_tokens.weight ({embed[:3]})")
    out = dict(tensors)
    if "lm_head.weight" not in out:
        weight = tensors[embed[0]]
        noise = torch.randn(tuple(weight.shape), generator=torch.Generator().manual_seed(seed), dtype=torch.float32)
        out["lm_head.weight"] = (weight.float() + 0.5 * weight.float().std() * noise).to(weight.dtype)
    return out


@uses(LOAD, LOGITS)
def minimal_config_reads_as_full(*, runtime, device: str, subject: str, seq: int = 16, seed: int = 0) -> dict:
    """The untied copy of the subject's checkpoint with its full and its minimal config.json,
    loaded on `device` (reference path): the logits of the first `seq` tokens of a held-out row.

    Observations: dropped_keys (how many keys the minimal config leaves out), tie_key_dropped (1
    when tie_word_embeddings is among them), full_rel_diff and minimal_rel_diff (the runtime's
    logits of each copy against transformers' of the full copy; inf when the minimal copy is
    refused), minimal_refused (1 when loading the minimal copy raised: a checkpoint transformers
    reads, not read; its text in refusal), separation (transformers' logits
    of the full copy against those with the head tied to the embedding: how much reading the
    head as tied would change)."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    torch_device(device)
    who = subject_of(subject)
    tensors: dict[str, torch.Tensor] = {}
    for file in hf_weight_files(who, "minimal_config_reads_as_full"):
        tensors.update(load_file(str(file)))
    full = dict(who.config)
    if "model_type" not in full:
        raise NotApplicable("minimal_config_reads_as_full", "config.json names no model_type")
    full["tie_word_embeddings"] = False
    defaults = class_defaults(full["model_type"])
    if defaults.get("tie_word_embeddings") is not False:
        raise NotApplicable("minimal_config_reads_as_full", f"{full['model_type']}'s config class ties the head by "
                                                            "default: leaving the key out means tied")
    minimal = minimal_config(full, defaults)
    probe = who.heldout(1)[0].inputs[:1, :seq]

    def oracle(directory: Path, tie: bool) -> torch.Tensor:
        model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32, attn_implementation="eager")
        if tie:  # the head read as the embedding: what a reader that ties it computes
            model.get_output_embeddings().weight = model.get_input_embeddings().weight
        model.eval()
        with torch.no_grad():
            return model(input_ids=probe, use_cache=False).logits.to(torch.float64)

    def runtime_logits(directory: Path) -> torch.Tensor:
        model = runtime.load(directory, device=device, path=REFERENCE)
        try:
            return model.logits(probe).to(torch.float64)
        finally:
            model.close()

    untied = _untied_tensors(tensors, seed)
    with tempfile.TemporaryDirectory(prefix="pv-config-") as tmp:
        full_dir = checkpoint_copy(who.checkpoint, Path(tmp) / "full", tensors=untied, config=full)
        minimal_dir = checkpoint_copy(who.checkpoint, Path(tmp) / "minimal", tensors=untied, config=minimal)
        expected = oracle(full_dir, tie=False)
        tied = oracle(full_dir, tie=True)
        got_full = runtime_logits(full_dir)   # must load: a runtime that reads no config of this form ERRORs
        refusal = ""
        try:
            got_minimal = runtime_logits(minimal_dir)
        except AdapterError as error:     # a checkpoint transformers reads, refused: not read as the full one
            refusal = str(error)
    return {"dropped_keys": len(full) - len(minimal), "tie_key_dropped": int("tie_word_embeddings" not in minimal),
            "full_rel_diff": max_relative_diff(got_full, expected), "minimal_refused": int(bool(refusal)),
            "minimal_rel_diff": float("inf") if refusal else max_relative_diff(got_minimal, expected),
            "separation": max_relative_diff(tied, expected), "refusal": refusal[:300]}
