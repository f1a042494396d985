"""Training and evaluation steps, optimizer state, and resumable checkpoints.

One `Trainer` owns a model, an AdamW optimizer with decoupled weight decay, gradient clipping
and a learning-rate schedule. `train_batch` and `eval_batch` share no buffers: eval runs under
no_grad in eval mode on its own batch and writes nothing the training step reads.

`save(dir)` writes a Hugging Face checkpoint directory plus `optimizer.safetensors` and
`trainer.json`; `Trainer.resume(dir)` continues bit for bit on the CPU.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save as save_tensors_to_bytes

# Sibling modules, not their functions: calls look them up at call time (docs/runtime.md, "Seams").
from . import checkpoint, devices
from .data import LMBatch
from .errors import ArgumentError, CheckpointError
from .kernels import IGNORE_INDEX
from .model import CausalLM

OPTIMIZER_STATE_NAME = "optimizer.safetensors"
TRAINER_STATE_NAME = "trainer.json"
TRAINER_STATE_VERSION = 1


# ---- seams: each training-path choice is a module-level function a patch can reach ------------

def decays(name: str, parameter: torch.nn.Parameter) -> bool:
    """Weight decay applies to matrices (projections, embeddings); never to norms or biases,
    whose decay only pulls them towards a meaningless zero."""
    return parameter.dim() >= 2


def build_optimizer(named_parameters: Sequence[tuple[str, torch.nn.Parameter]], *, lr: float, weight_decay: float,
                    betas: tuple[float, float], path: str, device: torch.device) -> torch.optim.Optimizer:
    """AdamW with decoupled weight decay (p -= lr * wd * p, separate from the Adam update).

    Fast path: the fused multi-tensor kernel where torch has one for this device, else foreach.
    Reference path: torch's single-tensor for-loop implementation.
    """
    decayed = [p for n, p in named_parameters if decays(n, p)]
    undecayed = [p for n, p in named_parameters if not decays(n, p)]
    groups = [{"params": decayed, "weight_decay": weight_decay}, {"params": undecayed, "weight_decay": 0.0}]
    if path == "fast":
        implementation = {"fused": True} if _fused_adamw_available(device) else {"foreach": True}
    else:
        implementation = {"foreach": False}
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=1e-8, **implementation)


def _fused_adamw_available(device: torch.device) -> bool:
    probe = torch.nn.Parameter(torch.zeros(1, device=device))
    try:
        torch.optim.AdamW([probe], fused=True)
        return True
    except (RuntimeError, ValueError):
        return False


def global_grad_norm(gradients: Sequence[torch.Tensor]) -> torch.Tensor:
    """L2 norm of all gradients taken together: sqrt(sum over every element of g^2), as a
    0-dim tensor on the gradients' device (reading it is the caller's choice: a host sync)."""
    if not gradients:
        return torch.zeros(())
    dtype = torch.float64 if any(g.dtype == torch.float64 for g in gradients) else torch.float32
    per_tensor = torch._foreach_norm([g.to(dtype) for g in gradients])   # one multi-tensor kernel, not one per tensor
    return torch.linalg.vector_norm(torch.stack(per_tensor))


def clip_gradients(gradients: Sequence[torch.Tensor], max_norm: float, total_norm: torch.Tensor) -> None:
    """Scale all gradients by one factor so their global norm is at most max_norm (0: no clipping).
    The factor stays a tensor on the device: clipping never waits for the host."""
    if max_norm <= 0:
        return
    scale = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for gradient in gradients:
        groups.setdefault((gradient.device, gradient.dtype), []).append(gradient)
    for (device, dtype), group in groups.items():
        # One multi-tensor kernel per device and dtype, not one launch per parameter (~290 for Qwen2).
        torch._foreach_mul_(group, scale.to(device, dtype))


def skips_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """Whether this optimizer can skip a step on the device (torch's fused AdamW reads a
    `found_inf` tensor, as GradScaler uses it: parameters, moments and step counts untouched
    when it is 1), so the trainer need not read the loss before queueing the update."""
    return bool(getattr(optimizer, "defaults", {}).get("fused"))   # an optimizer of any other kind reads first


def micro_batch_weight(micro_batch_tokens: int | torch.Tensor, step_tokens: int | torch.Tensor,
                       num_micro_batches: int) -> float | torch.Tensor:
    """Weight of one micro-batch's mean loss in an accumulated step: its share of the step's
    target tokens. Summed over the micro-batches this is the mean over *every* token of the
    step, i.e. the loss of one batch holding them all. (Dividing each micro-batch's mean by the
    number of micro-batches instead over-weights the tokens of short micro-batches: the
    gradient-accumulation defect transformers fixed in 2024.)"""
    return micro_batch_tokens / step_tokens


COMPILE_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile_module(module: torch.nn.Module, mode: str | None = None) -> None:
    """torch.compile a module in place (the compiled training path compiles each decoder layer,
    or the whole decoder body, forward and backward; inductor by default). `mode` is
    torch.compile's, which takes no inductor options beside it: "reduce-overhead" replays the
    compiled graphs as CUDA graphs (one launch for the whole body instead of hundreds),
    "max-autotune-no-cudagraphs" benchmarks Triton GEMM templates against cuBLAS for every shape
    (minutes of compilation; on an H100 cuBLAS won every qwen2-0.5b shape)."""
    if mode is not None:
        module.compile(mode=mode)
        return
    # Inductor recomputes a pointwise value (a SiLU, a cast, the rotary angles) in every kernel
    # that reads it unless its expression has at least `realize_opcount_threshold` operations
    # (default 30). At 8 the SwiGLU backward and the rotary embedding stop recomputing shared
    # values: on an H100 at qwen2-0.5b shape, 16.5 ms of compiled kernels a training step
    # instead of 17.5 (4 gave 21.6 and 16 gave 20.9; docs/performance.md, "Inductor's recompute
    # threshold"). A setting this torch's inductor lacks is left out: torch.compile refuses an
    # unknown option, and a renamed setting should cost speed, not the run.
    from torch._inductor import config as inductor_config

    options = {"realize_opcount_threshold": 8}
    module.compile(options={key: value for key, value in options.items() if hasattr(inductor_config, key)})


COMPILE_SCOPES = ("layers", "model")


def compile_scope(compile: bool | str | None) -> str | None:
    """What Trainer(compile=...) compiles: None (eager), "layers" (each decoder layer on its own:
    compile=True) or "model" (the decoder body - embedding, every layer, final norm - as one
    graph, so inductor can fuse across layer boundaries and launch fewer kernels; the fused
    loss after it stays eager, being a loop of large matrix products)."""
    if compile is None or compile is False:
        return None
    if compile is True:
        return "layers"
    if compile not in COMPILE_SCOPES:
        raise ArgumentError(f"compile must be True, False or one of {COMPILE_SCOPES}, got {compile!r}")
    return compile


def eval_targets(batch: LMBatch) -> torch.Tensor:
    """What eval scores: the batch's next-token targets (never the inputs themselves)."""
    return batch.targets


def _batch_loss(model: CausalLM, batch: LMBatch, targets: torch.Tensor) -> torch.Tensor:
    # A plain batch keeps the two-argument call (planted bugs patch CausalLM.loss as such).
    if batch.document_ids is None:
        return model.loss(batch.inputs, targets)
    return model.loss(batch.inputs, targets, document_ids=batch.document_ids)


def learning_rate(step: int, *, peak: float, warmup_steps: int, total_steps: int | None, min_lr: float) -> float:
    """Linear warmup to `peak`, then cosine decay to `min_lr` at `total_steps` (constant without)."""
    if warmup_steps and step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    if not total_steps or step >= total_steps:
        return peak if not total_steps else min_lr
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return min_lr + 0.5 * (peak - min_lr) * (1 + math.cos(math.pi * progress))


# ---- the trainer -------------------------------------------------------------------------------

def hyperparameters(*, lr: float, weight_decay: float, betas: Sequence[float], grad_clip: float, seed: int,
                    warmup_steps: int, total_steps: int | None, min_lr: float | None) -> dict[str, Any]:
    """The optimizer settings a trainer saves with its state (ArgumentError for invalid ones);
    the single-process and the distributed trainer share them."""
    if lr <= 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
        raise ArgumentError(f"invalid optimizer settings: lr={lr}, weight_decay={weight_decay}, betas={betas}")
    return {
        "lr": float(lr), "weight_decay": float(weight_decay), "betas": [float(b) for b in betas],
        "grad_clip": float(grad_clip), "seed": int(seed), "warmup_steps": int(warmup_steps),
        "total_steps": None if total_steps is None else int(total_steps),
        "min_lr": float(lr if min_lr is None else min_lr),
    }


class Trainer:
    """Trains `model` in place.

    lr is the peak learning rate (warmup_steps/total_steps/min_lr shape the schedule; by default
    it is constant). grad_clip <= 0 disables clipping. path and device default to the model's
    own; giving them moves / switches the model. compile=True (or "layers") wraps each decoder
    layer in torch.compile, compile="model" the whole decoder body as one graph (compile_scope;
    off by default: compilation costs more than it saves on short CPU runs, and no GPU
    measurement yet says which scope to make the CUDA default).
    micro_batch_size=m runs each train_batch as forward/backward passes of at most m rows whose
    gradients accumulate into one optimizer step (see train_step). attention_backend pins the
    fast path's SDPA kernel (CausalLM.set_attention_backend). compile_mode is torch.compile's
    mode for the compiled scope (compile_module; None: torch's default).
    """

    def __init__(self, model: CausalLM, *, lr: float = 3e-3, weight_decay: float = 0.1,
                 betas: tuple[float, float] = (0.9, 0.95), grad_clip: float = 1.0, seed: int = 0,
                 path: str | None = None, device: str | torch.device | None = None,
                 warmup_steps: int = 0, total_steps: int | None = None, min_lr: float | None = None,
                 compile: bool | str = False, micro_batch_size: int | None = None, attention_backend: str | None = None,
                 compile_mode: str | None = None):
        if micro_batch_size is not None and micro_batch_size <= 0:
            raise ArgumentError(f"micro_batch_size must be positive, got {micro_batch_size}")
        self.hyperparameters = hyperparameters(lr=lr, weight_decay=weight_decay, betas=betas, grad_clip=grad_clip,
                                               seed=seed, warmup_steps=warmup_steps, total_steps=total_steps,
                                               min_lr=min_lr)
        self.compile_scope = compile_scope(compile)   # refused before any work
        if compile_mode not in COMPILE_MODES:
            raise ArgumentError(f"compile_mode must be one of {COMPILE_MODES}, got {compile_mode!r}")
        self.compile_mode = compile_mode
        self.model = model
        if device is not None:
            model.to(devices.resolve_device(device))
        if path is not None:
            model.set_path(path)
        if attention_backend is not None:
            model.set_attention_backend(attention_backend)
        self.micro_batch_size = micro_batch_size
        self.device = model.device
        self.path = model.path
        # Nothing in the model draws random numbers today (no dropout); seeding keeps it so if
        # something ever does, and the seed is saved with the trainer state.
        torch.manual_seed(seed)
        self.named_parameters = list(model.named_parameters())
        self.optimizer = build_optimizer(self.named_parameters, lr=lr, weight_decay=weight_decay,
                                         betas=tuple(betas), path=self.path, device=self.device)
        self.step = 0
        self.last_loss: float | None = None
        self.last_grad_norm: float | None = None
        self.nonfinite_losses = 0
        # The one-argument call when no mode is asked for (planted bugs patch compile_module as such).
        mode = {} if compile_mode is None else {"mode": compile_mode}
        if self.compile_scope == "layers":
            for layer in model.model.layers:
                compile_module(layer, **mode)
        elif self.compile_scope == "model":
            compile_module(model.model, **mode)

    # ---- steps ------------------------------------------------------------------------------
    def current_lr(self) -> float:
        h = self.hyperparameters
        return learning_rate(self.step, peak=h["lr"], warmup_steps=h["warmup_steps"],
                             total_steps=h["total_steps"], min_lr=h["min_lr"])

    def train_batch(self, batch: LMBatch) -> float:
        """One optimizer step on `batch`; returns its loss (before the update).

        With micro_batch_size set, the batch is split into micro-batches of that many rows (the
        last may be short) whose gradients accumulate (train_step); the result equals one
        pass over the whole batch. Afterwards `last_grad_norm` is the global L2 norm of the
        gradients before clipping, and each parameter's .grad holds the (clipped) gradient that
        was applied. A non-finite loss skips the update and is counted in `nonfinite_losses`.
        """
        if self.micro_batch_size is not None:
            return self.train_step(batch.split(self.micro_batch_size))
        return self.train_step([batch])

    def train_step(self, micro_batches: Sequence[LMBatch]) -> float:
        """One optimizer step on the union of `micro_batches` (any widths, any numbers of rows),
        one forward/backward each, gradients accumulated. Each micro-batch's mean loss is weighted
        by its share of all target tokens (micro_batch_weight), so the step's loss and gradients
        are those of one batch of every token. Returns that loss."""
        if not micro_batches:
            raise ArgumentError("train_step needs at least one micro-batch")
        self.model.train()
        micro_batches = [b.to(self.device) for b in micro_batches]
        lr = self.current_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        # Token counts, loss, grad norm and clip factor stay tensors on the device for the whole
        # step; the step reads them back once (the one host synchronisation of a step), after
        # the optimizer update is queued where the optimizer can skip it on the device.
        counts = [(b.targets != IGNORE_INDEX).sum() for b in micro_batches]
        step_tokens = torch.stack(counts).sum()
        loss_total = None
        for micro, count in zip(micro_batches, counts):
            weight = micro_batch_weight(count, step_tokens, len(micro_batches))
            loss = _batch_loss(self.model, micro, micro.targets) * weight
            loss_total = loss.detach() if loss_total is None else loss_total + loss.detach()
            if loss.requires_grad:  # a non-finite loss is differentiated too: its update is skipped below
                loss.backward()
        gradients = [p.grad for _, p in self.named_parameters if p.grad is not None]
        total_norm = global_grad_norm(gradients)
        finite = torch.isfinite(loss_total) & (step_tokens > 0)
        if skips_on_device(self.optimizer):
            clip_gradients(gradients, self.hyperparameters["grad_clip"], total_norm)
            self.optimizer.found_inf = (~finite).float()
            try:
                self.optimizer.step()
            finally:
                del self.optimizer.found_inf
            applied = self._read_step(loss_total, total_norm, step_tokens)
        else:
            applied = self._read_step(loss_total, total_norm, step_tokens)
            if applied:
                clip_gradients(gradients, self.hyperparameters["grad_clip"], total_norm)
                self.optimizer.step()
        if applied:
            self.step += 1
        return self.last_loss

    def _read_step(self, loss_total: torch.Tensor, total_norm: torch.Tensor, step_tokens: torch.Tensor) -> bool:
        """The step's one host read: loss, pre-clip grad norm and token count. Sets last_loss,
        last_grad_norm and the non-finite count; says whether the update applies."""
        device = loss_total.device
        loss_value, norm_value, tokens = torch.stack([loss_total.double(), total_norm.to(device).double(),
                                                      step_tokens.to(device).double()]).tolist()
        if tokens == 0:
            raise ArgumentError("train_step was given no target tokens")
        self.last_loss = loss_value
        if not math.isfinite(loss_value):
            self.nonfinite_losses += 1
            self.last_grad_norm = float("nan")
            return False
        self.last_grad_norm = norm_value
        return True

    def eval_batch(self, batch: LMBatch) -> float:
        """Mean next-token loss on `batch`: eval mode, no gradients, nothing written to training state."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                batch = batch.to(self.device)
                return float(_batch_loss(self.model, batch, eval_targets(batch)))
        finally:
            self.model.train(was_training)

    def evaluate(self, batches: Iterable[LMBatch]) -> float:
        """Token-weighted mean loss over several batches."""
        total, tokens = 0.0, 0
        for batch in batches:
            count = batch.num_target_tokens
            total += self.eval_batch(batch) * count
            tokens += count
        if tokens == 0:
            raise ArgumentError("evaluate() was given no target tokens")
        return total / tokens

    # ---- optimizer state --------------------------------------------------------------------
    def _named_optimizer_state(self) -> dict[str, torch.Tensor]:
        """Every optimizer state tensor as '<parameter name>::<state key>', sorted by name."""
        named = {}
        for name, parameter in self.named_parameters:
            for key, value in self.optimizer.state.get(parameter, {}).items():
                tensor = value if isinstance(value, torch.Tensor) else torch.tensor(value)
                named[f"{name}::{key}"] = tensor.detach().to("cpu").contiguous()
        return dict(sorted(named.items()))

    def optimizer_digest(self) -> str:
        """sha256 over the optimizer state tensors (name, key, dtype, shape and bytes), in sorted
        name order, so two runs that should agree can be compared with one string."""
        digest = hashlib.sha256()
        for key, tensor in self._named_optimizer_state().items():
            digest.update(f"{key}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    # ---- checkpoints ------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {"version": TRAINER_STATE_VERSION, "step": self.step, "path": self.path,
                "hyperparameters": self.hyperparameters, "last_loss": self.last_loss,
                "torch": torch.__version__}

    def save(self, directory: Path | str, *, runtime_meta: dict[str, Any] | None = None) -> Path:
        """Model checkpoint + optimizer state + trainer state, published atomically."""
        meta = dict(getattr(self.model, "runtime_meta", None) or {})
        meta.update(runtime_meta or {})
        extra = {
            OPTIMIZER_STATE_NAME: save_tensors_to_bytes(self._named_optimizer_state()),
            TRAINER_STATE_NAME: (json.dumps(self.state(), indent=2) + "\n").encode(),
        }
        return checkpoint.save_checkpoint(self.model, directory, runtime_meta=meta, extra_files=extra)

    @classmethod
    def resume(cls, directory: Path | str, *, device: str | torch.device | None = "cpu",
               path: str | None = None) -> "Trainer":
        """Continue a run saved by `save`: same weights, optimizer moments, step and schedule."""
        directory = Path(directory)
        state_file = directory / TRAINER_STATE_NAME
        if not state_file.is_file():
            raise CheckpointError(f"{state_file}: missing; {directory} is a model checkpoint without trainer "
                                  "state (use runtime.load() and a new Trainer to fine-tune it)")
        try:
            state = json.loads(state_file.read_text(encoding="utf-8"))
            hyper = state["hyperparameters"]
            saved_path, step = state["path"], int(state["step"])
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise CheckpointError(f"{state_file}: unreadable trainer state ({error})") from None
        model = checkpoint.load(directory, device=device, path=path or saved_path)
        trainer = cls(model, lr=hyper["lr"], weight_decay=hyper["weight_decay"], betas=tuple(hyper["betas"]),
                      grad_clip=hyper["grad_clip"], seed=hyper["seed"], warmup_steps=hyper["warmup_steps"],
                      total_steps=hyper["total_steps"], min_lr=hyper["min_lr"])
        trainer._load_optimizer_state(directory / OPTIMIZER_STATE_NAME)
        trainer.step = step
        trainer.last_loss = state.get("last_loss")
        return trainer

    def _load_optimizer_state(self, file: Path) -> None:
        try:
            saved = load_file(str(file))
        except FileNotFoundError:
            raise CheckpointError(f"{file}: missing optimizer state") from None
        except SafetensorError as error:
            raise CheckpointError(f"{file}: corrupt optimizer state ({error})") from None
        index_of = {id(p): i for i, p in enumerate(p for g in self.optimizer.param_groups for p in g["params"])}
        per_parameter: dict[int, dict[str, torch.Tensor]] = {}
        known = {name for name, _ in self.named_parameters}
        for key, tensor in saved.items():
            name, _, state_key = key.partition("::")
            if name not in known:
                raise CheckpointError(f"{file}: optimizer state for unknown parameter {name!r}")
            parameter = dict(self.named_parameters)[name]
            per_parameter.setdefault(index_of[id(parameter)], {})[state_key] = tensor
        missing = [name for name, p in self.named_parameters if index_of[id(p)] not in per_parameter]
        if missing and per_parameter:
            raise CheckpointError(f"{file}: no optimizer state for parameter {missing[0]!r}")
        groups = self.optimizer.state_dict()["param_groups"]
        self.optimizer.load_state_dict({"state": per_parameter, "param_groups": groups})
