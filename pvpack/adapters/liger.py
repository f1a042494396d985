"""transformers + Liger kernels: Liger's Triton kernels as the fast path over transformers.

- reference path: plain transformers (fp32, eager attention) — the transformers adapter's own;
- fast path: the same AutoModelForCausalLM with liger-kernel's patches applied to that model
  instance (`apply_liger_kernel_to_<family>(model=...)`: RMSNorm, RoPE, SwiGLU and the fused
  linear cross-entropy), under bf16 autocast with SDPA attention as the transformers adapter's
  fast path runs. Training steps on the fast path go through Liger's fused linear
  cross-entropy (the model's own loss, `shift_labels` = the batch's targets); logits come from
  the patched forward without labels.

Liger's kernels are Triton kernels and need a CUDA GPU: on any other device the fast path is a
visible SKIP naming why (CapabilityMissing fast_path), never a pass and never a silent fallback
to transformers' kernels. `liger_kernel` is imported only when a fast model is built, so this
module imports (and its SKIP is tested) where liger-kernel and triton are not installed.

Liger's patch functions also rebind names in transformers' modeling module (the rotary
function, the norm and MLP classes). Left in place they would change every transformers model
of the process — the reference path this adapter compares against among them. `ScopedPatch`
records which names the call rebinds, puts the originals back at once, and re-installs Liger's
only while the fast model runs.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from ..protocol import FAST, FAST_PATH, IGNORE_INDEX, REFERENCE, TRAINED, Batch, CapabilityMissing, TrainSettings
from . import transformers as hf

# model_type -> (transformers' modeling module, Liger's patch function for it)
FAMILIES = {
    "qwen2": ("transformers.models.qwen2.modeling_qwen2", "apply_liger_kernel_to_qwen2"),
    "llama": ("transformers.models.llama.modeling_llama", "apply_liger_kernel_to_llama"),
}
KERNELS = {"rope": True, "rms_norm": True, "swiglu": True, "cross_entropy": False, "fused_linear_cross_entropy": True}
_ABSENT = object()


def unavailable(device: str) -> str | None:
    """Why Liger's fast path cannot run on `device` here, or None when it can."""
    if not device.startswith("cuda"):
        return f"Liger's kernels are Triton kernels and need a CUDA GPU; the device is {device}"
    if not torch.cuda.is_available():
        return f"no CUDA GPU on this machine (torch {torch.__version__})"
    for package, install in (("liger_kernel", "pip install liger-kernel"), ("triton", "pip install triton")):
        if importlib.util.find_spec(package) is None:
            return f"{package} is not installed ({install})"
    return None


class ScopedPatch:
    """Liger's patch of one model instance, with its module-level rebindings scoped to `active()`."""

    def __init__(self, module: Any, apply: Callable[..., None], model: torch.nn.Module, **kernels: bool):
        self.module = module
        before = dict(vars(module))
        try:
            apply(model=model, **kernels)
        finally:
            after = dict(vars(module))
            self.patched = {k: v for k, v in after.items() if before.get(k, _ABSENT) is not v}
            self.originals = {k: before.get(k, _ABSENT) for k in self.patched}
            self._install(self.originals)

    def _install(self, values: dict[str, Any]) -> None:
        for name, value in values.items():
            if value is _ABSENT:
                vars(self.module).pop(name, None)
            else:
                setattr(self.module, name, value)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        self._install(self.patched)
        try:
            yield
        finally:
            self._install(self.originals)


class LigerModel(hf.TransformersModel):
    """The fast path: every forward (logits, loss, training, generation) inside Liger's patch."""

    def __init__(self, model, device: torch.device, train: TrainSettings | None, patch: ScopedPatch):
        super().__init__(model, device, train, FAST)
        self.patch = patch

    @contextlib.contextmanager
    def precision(self) -> Iterator[None]:
        with self.patch.active(), super().precision():
            yield

    def train_step(self, batch: Batch) -> float:
        """As the transformers adapter's step, with the loss from Liger's fused linear
        cross-entropy: the model's own loss given `shift_labels` (the batch's targets, already
        aligned), token-weighted across micro-batches."""
        settings = self.settings
        self.model.train()
        lr = self.learning_rate(self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        step_tokens = batch.target_tokens
        if step_tokens == 0:
            raise ValueError("train_step was given no scored target tokens")
        rows = batch.inputs.shape[0]
        size = -(-rows // settings.micro_batches)
        total = 0.0
        for start in range(0, rows, size):
            inputs, targets = batch.inputs[start:start + size], batch.targets[start:start + size]
            tokens = int((targets != IGNORE_INDEX).sum())
            if tokens == 0:
                continue
            with self.precision():
                out = self.model(input_ids=inputs.to(self.device), shift_labels=targets.to(self.device),
                                 use_cache=False)
            loss = out.loss * hf.micro_weight(tokens, step_tokens)
            loss.backward()
            total += float(loss.detach())
        hf.clip(list(self.model.parameters()), settings.grad_clip)
        self.optimizer.step()
        self.step += 1
        self.model.eval()
        return total


class LigerAdapter(hf.TransformersAdapter):
    """transformers (reference) and transformers + Liger kernels (fast, CUDA only)."""

    def version(self) -> str:
        try:
            from importlib.metadata import version

            liger = f"liger-kernel {version('liger-kernel')}"
        except Exception:  # noqa: BLE001 - not installed: the fast path SKIPs and says why
            liger = "liger-kernel not installed"
        return f"{super().version()} + {liger}"

    def load(self, checkpoint: Path, *, device: str, path: str = REFERENCE, init: str = TRAINED, seed: int = 0,
             train: TrainSettings | None = None):
        if path != FAST:
            return super().load(checkpoint, device=device, path=path, init=init, seed=seed, train=train)
        why = unavailable(device)
        if why is not None:
            raise CapabilityMissing(FAST_PATH, detail=why)
        base = super().load(checkpoint, device=device, path=FAST, init=init, seed=seed, train=train)
        model_type = base.model.config.model_type
        if model_type not in FAMILIES:
            raise CapabilityMissing(FAST_PATH, detail=f"this adapter applies Liger to {', '.join(FAMILIES)} "
                                                      f"models, not {model_type!r}")
        module_name, function = FAMILIES[model_type]
        apply = getattr(importlib.import_module("liger_kernel.transformers"), function)
        patch = ScopedPatch(importlib.import_module(module_name), apply, base.model, **KERNELS)
        return LigerModel(base.model, base.device, train, patch)
