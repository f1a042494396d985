"""Exact checkpoint round trips: what the runtime writes is what it (and transformers) reads back.

save_load_bit_exact: runtime.save_checkpoint then runtime.load; every tensor compared byte for
byte in the dtype the model holds, the tensor names in the written file listed with safetensors
(not by the runtime), the config compared field by field.
transformers_reopens_saved: the directory the runtime wrote is opened by transformers'
AutoModelForCausalLM, whose logits must equal those of the model that was saved.
(Trainer save -> resume is `training.checkpoint_resume`.)

The saved model is a loaded checkpoint whose every parameter was then moved by seeded noise, so
the writer must write what the model holds now, not bytes it could copy from the file it came
from.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import torch

from . import fixtures
from ._util import rtol_atol, torch_device


def _moved_model(checkpoint: str, device: str, seed: int):
    """A runtime model of `checkpoint` (reference path on `device`) with every parameter shifted
    by N(0, (0.01 * its own std)²) noise drawn on the CPU from `seed`."""
    from . import oracle_transformers

    model = fixtures.fresh_copy(oracle_transformers._runtime_model(checkpoint, device, "reference"))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            scale = float(parameter.detach().float().std()) if parameter.numel() > 1 else 1.0
            noise = torch.randn(parameter.shape, generator=generator) * 0.01 * (scale or 1.0)
            parameter.add_(noise.to(parameter.device, parameter.dtype))
    return model


def _bytes(tensor: torch.Tensor) -> bytes:
    return tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _file_tensors(directory: Path) -> dict[str, torch.dtype]:
    """name -> dtype of every tensor in the directory's model*.safetensors, read with safetensors."""
    from safetensors import safe_open

    found: dict[str, torch.dtype] = {}
    for file in sorted(directory.glob("model*.safetensors")):
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            for name in handle.keys():
                found[name] = handle.get_slice(name).get_dtype()
    return found


_SAFETENSORS_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}


def save_load_bit_exact(*, device: str, checkpoint: str = "tiny-trained", seed: int = 0) -> dict:
    """Save a moved copy of `checkpoint` (see module docstring) with runtime.save_checkpoint,
    load it with runtime.load on the same device, and compare.

    Observations: tensors (in the saved model's state dict, a tied head once), tensors_missing /
    tensors_extra (loaded model vs saved model, by name), file_missing / file_extra (the written
    file's tensor names vs the config's tensor list, tied head left out of both), dtype_mismatches
    (loaded dtype != saved model's dtype, plus file dtype != model dtype), bit_mismatches (tensors
    whose bytes differ), config_fields_differing (ModelConfig fields that differ after loading),
    config_fields."""
    from pvlab.runtime import checkpoint as runtime_checkpoint

    torch_device(device)
    model = _moved_model(checkpoint, device, seed)
    saved = {name: tensor for name, tensor in model.state_dict().items()}
    with tempfile.TemporaryDirectory(prefix="pv-roundtrip-") as tmp:
        directory = Path(tmp) / "ckpt"
        runtime_checkpoint.save_checkpoint(model, directory)
        in_file = {name: _SAFETENSORS_DTYPES.get(dtype, dtype) for name, dtype in _file_tensors(directory).items()}
        loaded_model = runtime_checkpoint.load(directory, device=device, path="reference", parity_gate=False)
    loaded = loaded_model.state_dict()
    expected_in_file = [n for n in saved if not (model.config.tie_word_embeddings and n == "lm_head.weight")]
    dtype_mismatches = sum(1 for n, t in saved.items() if n in loaded and loaded[n].dtype != t.dtype)
    dtype_mismatches += sum(1 for n, t in saved.items() if n in in_file and in_file[n] != t.dtype)
    bit_mismatches = sum(1 for n, t in saved.items()
                         if n in loaded and (loaded[n].dtype != t.dtype or loaded[n].shape != t.shape
                                             or _bytes(loaded[n]) != _bytes(t)))
    fields = [f.name for f in dataclasses.fields(model.config)]
    differing = sum(1 for f in fields if getattr(model.config, f) != getattr(loaded_model.config, f))
    return {"tensors": len(saved), "tensors_missing": sum(1 for n in saved if n not in loaded),
            "tensors_extra": sum(1 for n in loaded if n not in saved),
            "file_missing": sum(1 for n in expected_in_file if n not in in_file),
            "file_extra": sum(1 for n in in_file if n not in expected_in_file),
            "dtype_mismatches": dtype_mismatches, "bit_mismatches": bit_mismatches,
            "config_fields_differing": differing, "config_fields": len(fields)}


def transformers_reopens_saved(*, device: str, checkpoint: str = "tiny-trained", seed: int = 0,
                               tolerance=None) -> dict:
    """Save a moved copy of `checkpoint` with runtime.save_checkpoint; open the directory with
    transformers (CPU, float32, eager attention); compare its logits with the logits of the model
    that was saved (runtime, reference path on `device`), at the float32 tolerance.

    transformers missing or unable to open the written directory is an ERROR naming the file.

    Observations: max_abs_diff, max_abs_ref, max_rel_diff, allclose_ratio, nonfinite, rtol, atol,
    argmax_agreement, positions."""
    from pvlab.runtime import checkpoint as runtime_checkpoint

    from . import oracle_transformers

    dev = torch_device(device)
    rtol, atol = rtol_atol(tolerance, "float32")
    model = _moved_model(checkpoint, device, seed).eval()
    windows = oracle_transformers.token_windows(checkpoint, 1, seed)[0]
    inputs = windows[:, :-1]
    with tempfile.TemporaryDirectory(prefix="pv-reopen-") as tmp:
        directory = Path(tmp) / "ckpt"
        runtime_checkpoint.save_checkpoint(model, directory)
        oracle = oracle_transformers.open_with_transformers(directory)
    with torch.no_grad():
        theirs = oracle(input_ids=inputs).logits.detach().double()
        ours = model(inputs.to(dev)).detach().to("cpu", torch.float64)
    return oracle_transformers.logits_compared(ours, theirs, rtol=rtol, atol=atol)
