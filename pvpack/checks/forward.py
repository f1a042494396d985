"""Forward sanity of a loaded checkpoint, and populate coverage measured independently.

Assumes: a decoder-only causal LM with a Hugging Face checkpoint (config.json with vocab_size)
whose logits have one row per input position. Populate coverage assumes transformers
implements the architecture (its tensor list, built on the meta device, is the expectation:
independent of the runtime under test, which a loader bug would corrupt along with the
weights).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..protocol import IGNORE_INDEX, LOAD, LOGITS, REFERENCE, STATE
from ._base import hf_weight_files, load, subject_of, torch_device, uses


@uses(LOAD, LOGITS)
def forward_sanity(*, runtime, device: str, subject: str, path: str = REFERENCE, batches: int = 2) -> dict:
    """Logits of `batches` held-out batches on `device`/`path`, at every scored position.

    Observations: nonfinite_logits, logit_std (std across the vocabulary, mean over positions),
    logit_std_min, peak_to_mean (max softmax probability x vocab_size, mean over positions; 1
    for a uniform distribution), argmax_min, argmax_max, vocab_size (the config's),
    logits_width (the last dimension returned), positions."""
    who = subject_of(subject)
    model = load(runtime, who, device, path)
    vocab = who.vocab_size
    nonfinite = positions = 0
    std_sum = peak_sum = 0.0
    std_min = float("inf")
    argmax_min, argmax_max, width = vocab, -1, None
    for batch in who.heldout(batches):
        for b in range(batch.inputs.shape[0]):    # one row at a time: float64 (T, V) stays small
            logits = model.logits(batch.inputs[b:b + 1]).to(torch.float64)[0]          # (T, V)
            width = logits.shape[-1]
            rows = logits[batch.targets[b] != IGNORE_INDEX]                             # (N, V)
            nonfinite += int((~torch.isfinite(rows)).sum())
            finite_rows = rows[torch.isfinite(rows).all(dim=-1)]
            if finite_rows.numel():
                std = finite_rows.std(dim=-1)
                std_sum += float(std.sum())
                std_min = min(std_min, float(std.min()))
                peak_sum += float(torch.softmax(finite_rows, dim=-1).max(dim=-1).values.sum() * vocab)
                top = finite_rows.argmax(dim=-1)
                argmax_min, argmax_max = min(argmax_min, int(top.min())), max(argmax_max, int(top.max()))
            positions += rows.shape[0]
    model.close()
    if positions == 0:
        raise RuntimeError(f"subject {who.name}: no scored held-out positions")
    return {"nonfinite_logits": nonfinite, "logit_std": std_sum / positions, "logit_std_min": std_min,
            "peak_to_mean": peak_sum / positions, "argmax_min": argmax_min, "argmax_max": argmax_max,
            "vocab_size": vocab, "logits_width": width, "positions": positions}


def expected_tensors(checkpoint) -> dict[str, tuple[int, ...]]:
    """(name -> shape) of every tensor transformers' implementation of the checkpoint's
    architecture holds, built on the meta device (nothing allocated), a tied head left out."""
    try:
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        raise RuntimeError("populate_coverage takes the expected tensor list from transformers, which is not "
                           "installed: `pip install transformers` (it applies only to architectures "
                           "transformers implements)") from None
    try:
        config = AutoConfig.from_pretrained(str(checkpoint))
    except (ValueError, KeyError, OSError) as error:
        raise RuntimeError(f"populate_coverage: transformers cannot read {Path(checkpoint) / 'config.json'} "
                           f"({str(error).splitlines()[0]}); the check applies only to architectures "
                           "transformers implements (config.json with their model_type)") from None
    with torch.device("meta"):
        reference = AutoModelForCausalLM.from_config(config)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    return {key: tuple(t.shape) for key, t in _as_saved(reference).items()
            if not (tied and key == "lm_head.weight")}


def _as_saved(reference) -> dict:
    """The reference's tensors by the names its checkpoint files hold: transformers 5 renames
    some on load and back on save (GPT-NeoX: file `embed_out.weight`, module `lm_head.weight`),
    so module names alone would call a correct file's tensors missing and extra."""
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # transformers 4: module names are the file's names
        return reference.state_dict()
    return revert_weight_conversion(reference, dict(reference.state_dict()))


@uses(LOAD, STATE)
def populate_coverage(*, runtime, device: str, subject: str, path: str = REFERENCE) -> dict:
    """What the model on `device` holds (the adapter's `state`) against the checkpoint files,
    tensor by tensor, against transformers' tensor list for the architecture.

    Observations: tensors_expected, tensors_populated (expected tensors held on `device` with
    the file's exact values and shape), tensors_missing (expected, absent from the file),
    tensors_extra (in the file, not expected; rotary inv_freq excepted), tensors_mismatched
    (file shape differs from the expected one), tensors_in_file."""
    from safetensors import safe_open

    dev = torch_device(device)
    who = subject_of(subject)
    files = hf_weight_files(who, "populate_coverage")
    expected = expected_tensors(who.checkpoint)
    model = load(runtime, who, device, path)
    held = model.state()
    in_file: dict[str, tuple[int, ...]] = {}
    populated = mismatched = 0
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            for name in handle.keys():
                tensor = handle.get_tensor(name)
                in_file[name] = tuple(tensor.shape)
                if name not in expected:
                    continue
                if tuple(tensor.shape) != expected[name]:
                    mismatched += 1
                    continue
                on_device = held.get(name)
                if on_device is None or tuple(on_device.shape) != tuple(tensor.shape):
                    continue
                if on_device.device.type != dev.type:
                    continue
                if torch.equal(on_device.detach().to("cpu", tensor.dtype), tensor):
                    populated += 1
    model.close()
    extra = [n for n in in_file if n not in expected and not n.endswith("rotary_emb.inv_freq")]
    return {"tensors_expected": len(expected), "tensors_populated": populated,
            "tensors_missing": sum(1 for n in expected if n not in in_file), "tensors_extra": len(extra),
            "tensors_mismatched": mismatched, "tensors_in_file": len(in_file)}
