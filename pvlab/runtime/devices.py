"""Choosing the device and the execution path.

`resolve_device` is the only place the runtime asks torch.cuda anything, and it does not ask
at all when the caller forbids the GPU (`allow_gpu=False`, the CLI's --no-gpu) or names the CPU:
even `torch.cuda.is_available()` loads the driver, and --no-gpu promises not to touch it.
"""

from __future__ import annotations

import torch

from .errors import DeviceError


def resolve_device(requested: str | torch.device | None = None, *, allow_gpu: bool = True,
                   argument: str = "device") -> torch.device:
    """Turn "cpu", "cuda", "cuda:1", "auto" or None into a torch.device that exists here.

    None / "auto" means a GPU when one is allowed and present, else the CPU. `argument` names the
    option in error messages (e.g. "--device").
    """
    text = "auto" if requested is None else str(requested).strip().lower()
    if text == "cpu":
        return torch.device("cpu")
    if text == "auto":
        if not allow_gpu:
            return torch.device("cpu")
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if text == "cuda" or text.startswith("cuda:"):
        if not allow_gpu:
            raise DeviceError(f"{argument} {requested!r} conflicts with --no-gpu (the GPU is forbidden for this run)")
        if not torch.cuda.is_available():
            raise DeviceError(f"{argument} {requested!r}: no CUDA GPU is available on this machine "
                              f"(torch {torch.__version__}, built with CUDA: {torch.version.cuda or 'no'})")
        try:
            device = torch.device(text)
        except RuntimeError:
            raise DeviceError(f"{argument} {requested!r} is not a valid device name") from None
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DeviceError(f"{argument} {requested!r}: only {torch.cuda.device_count()} CUDA device(s) present")
        return device
    raise DeviceError(f"{argument} {requested!r} is not a device this runtime supports (cpu, cuda, cuda:N, auto)")


def default_path(device: torch.device) -> str:
    """The fast path (bf16, fused kernels) is the CUDA default; the CPU defaults to the fp32
    reference path. Either path may be asked for explicitly on either device."""
    return "fast" if device.type == "cuda" else "reference"
