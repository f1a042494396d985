"""Forward sanity of a populated checkpoint, and populate coverage measured independently.

forward_sanity feeds held-out batches through the model (on `device`, `path`) and describes the
logits: finite? spread across the vocabulary? peaked? argmax inside the vocabulary?
populate_coverage compares what the model on the device actually holds with the checkpoint file,
tensor by tensor, against the tensor list of transformers' own implementation of the
architecture — not against the runtime's self-reported PopulateReport, which a loader bug would
corrupt along with the weights.
"""

from __future__ import annotations

import torch

from . import fixtures
from ._util import torch_device


def forward_sanity(*, device: str, checkpoint: str = "tiny-trained", path: str = "reference",
                   batches: int = 2) -> dict:
    """Observations over every non-padding position of `batches` held-out batches:
    nonfinite_logits (count of NaN/Inf logits), logit_std (std across the vocabulary, mean over
    positions), logit_std_min (smallest per-position std), peak_to_mean (max softmax probability x
    vocab_size, mean over positions; 1 for a uniform distribution), argmax_min, argmax_max,
    vocab_size (the config's), logits_width (the last dimension the model returned), positions."""
    from pvlab.runtime.kernels import IGNORE_INDEX

    dev = torch_device(device)
    model = fixtures.model(checkpoint, device, path)
    vocab = model.config.vocab_size
    nonfinite = positions = 0
    std_sum = peak_sum = 0.0
    std_min = float("inf")
    argmax_min, argmax_max = vocab, -1
    width = None
    with torch.no_grad():
        for batch, b in ((batch, b) for batch in fixtures.heldout_batches(checkpoint, batches)
                         for b in range(batch.inputs.shape[0])):
            # One sequence at a time: its float64 logits stay ~1 GB even at V = 151,936.
            logits = model(batch.inputs[b:b + 1].to(dev)).detach().to("cpu", torch.float64)[0]   # (T, V)
            width = logits.shape[-1]
            rows = logits[batch.targets[b] != IGNORE_INDEX]                                     # (N, V)
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
    if positions == 0:
        raise RuntimeError("no held-out positions to score")
    return {
        "nonfinite_logits": nonfinite,
        "logit_std": std_sum / positions,
        "logit_std_min": std_min,
        "peak_to_mean": peak_sum / positions,
        "argmax_min": argmax_min,
        "argmax_max": argmax_max,
        "vocab_size": vocab,
        "logits_width": width,
        "positions": positions,
    }


def populate_coverage(*, device: str, checkpoint: str = "tiny-trained", path: str = "reference") -> dict:
    """Observations: tensors_expected (transformers' tensor list for the architecture, tied head
    excluded), tensors_populated (expected tensors that the model on `device` holds with the file's
    exact values and shape), tensors_missing (expected but absent from the file), tensors_extra (in
    the file but not expected; rotary inv_freq buffers excepted), tensors_mismatched (present in
    both with different shapes), tensors_in_file."""
    from safetensors import safe_open

    torch_device(device)
    directory = fixtures.checkpoint_dir(checkpoint)
    expected = dict(fixtures.transformers_expected_tensors(checkpoint))
    model = fixtures.model(checkpoint, device, path)
    held = {name: tensor for name, tensor in model.state_dict().items()}
    files = sorted(directory.glob("*.safetensors"))
    files = [f for f in files if f.name.startswith("model")]
    if not files:
        raise RuntimeError(f"{directory}: no model*.safetensors")
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
                if on_device.device.type != torch.device(device).type:
                    continue
                if torch.equal(on_device.detach().to("cpu", tensor.dtype), tensor):
                    populated += 1
    extra = [n for n in in_file if n not in expected and not n.endswith("rotary_emb.inv_freq")]
    missing = [n for n in expected if n not in in_file]
    return {
        "tensors_expected": len(expected),
        "tensors_populated": populated,
        "tensors_missing": len(missing),
        "tensors_extra": len(extra),
        "tensors_mismatched": mismatched,
        "tensors_in_file": len(in_file),
    }
