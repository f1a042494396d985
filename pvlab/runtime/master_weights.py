"""Training with bf16 weights and fp32 master weights: the fast path's recipe, minus its casts.

The fast path trains fp32 parameters under bf16 autocast: every product of a decoder layer
rounds its fp32 weight to bf16 first (in the forward, and again in the backward where the
compiled graph recomputes it), and the weight's gradient arrives in bf16 and is widened to fp32.
`MasterWeightTrainer` holds those matrices (the `Linear` weights of the decoder layers) in bf16
instead, with an fp32 master of each beside the optimizer's moments, and updates the master and
rewrites the bf16 weight in one kernel (adamw_update). What stays the same, and why it is the
same recipe:

* The products. Autocast multiplies bf16(W) with W the fp32 parameter; here the weight *is*
  bf16(master), rewritten after every update, so each product sees the same bf16 operands.
* The gradients. Autocast's weight gradient is a bf16 product widened to fp32; here it is that
  bf16 product. The global norm is taken from it with fp32 accumulation.
* The update. AdamW on the fp32 master with fp32 moments, in torch's fused kernel's order of
  operations; the gradient clip's factor is applied inside the update instead of in a pass of
  its own. The embedding (also the tied output head), the norms and the biases stay fp32
  parameters, updated by the same kernel in place.
* The checkpoint. `save` writes the fp32 masters as the model's weights, so a checkpoint is the
  one a `Trainer` writes: either trainer resumes the other's.

What differs from `Trainer`: one batch a step (micro-batches would accumulate bf16 gradients,
which rounds); after a step each parameter's `.grad` holds the gradient *before* clipping (the
clip is applied inside the update); the model's decoder matrices are bf16 while the trainer owns
it (use `save`, or `masters_in_model()`, to see the fp32 values). Why: on an H100 the casts,
the clip's pass and the fp32 gradient copies cost ~3 ms of a 69 ms step at qwen2-0.5b shape
(docs/performance.md, "Four more levers measured, and what 40 % MFU needs").

`GraphedMasterTrainer` is the same step replayed as one CUDA graph (step_graph.GraphedTrainer).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import torch

# Sibling modules, not their functions: calls look them up at call time (docs/runtime.md, "Seams").
from . import adamw_update, kernels, trainer
from .errors import ArgumentError, CheckpointError
from .kernels import IGNORE_INDEX
from .model import CausalLM, Linear
from .step_graph import GraphedTrainer

MASTER_DTYPE = torch.bfloat16


def master_parameter_names(model: CausalLM) -> set[str]:
    """The parameters held in bf16 with an fp32 master: the weights of the decoder layers' Linear
    modules, the matrices every product under autocast rounds to bf16. (The embedding is read
    by a lookup whose fp32 rows start the residual stream, so it stays fp32, and with it a tied
    output head.)"""
    names = set()
    for layer_name, module in model.model.layers.named_modules():
        if isinstance(module, Linear):
            names.add(f"model.layers.{layer_name}.weight")
    return names


class MasterAdamW:
    """AdamW (decoupled weight decay, torch's fused arithmetic) over `named_parameters`, the ones
    named in `masters` turned into bf16 weights with fp32 masters (adamw_update). The interface
    `Trainer` uses of a torch optimizer: `param_groups`, `state` (per parameter: "step",
    "exp_avg", "exp_avg_sq", as torch names them, once a step has run), `zero_grad`,
    `state_dict` / `load_state_dict` and `defaults["fused"]` (it skips a non-finite step on the
    device). The step itself is `step(lr=, total_norm=, max_norm=, skip=)`."""

    def __init__(self, named_parameters: Sequence[tuple[str, torch.nn.Parameter]], masters: set[str], *,
                 lr: float, weight_decay: float, betas: tuple[float, float], eps: float = 1e-8):
        unknown = masters - {name for name, _ in named_parameters}
        if unknown:
            raise ArgumentError(f"master weights for unknown parameters: {sorted(unknown)[:3]}")
        self.defaults = {"fused": True, "lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        self.betas, self.eps = (float(betas[0]), float(betas[1])), float(eps)
        decayed = [(n, p) for n, p in named_parameters if trainer.decays(n, p)]
        undecayed = [(n, p) for n, p in named_parameters if not trainer.decays(n, p)]
        self.param_groups = [
            {"params": [p for _, p in decayed], "lr": lr, "weight_decay": weight_decay, "betas": betas, "eps": eps},
            {"params": [p for _, p in undecayed], "lr": lr, "weight_decay": 0.0, "betas": betas, "eps": eps}]
        decay_of = {id(p): weight_decay for _, p in decayed} | {id(p): 0.0 for _, p in undecayed}
        ordered = decayed + undecayed
        self._parameters = [p for _, p in ordered]
        device = self._parameters[0].device
        self.device = device
        half = [(n, p) for n, p in ordered if n in masters]
        full = [(n, p) for n, p in ordered if n not in masters]
        if any(p.dtype != torch.float32 for _, p in ordered):
            raise ArgumentError("MasterAdamW starts from fp32 parameters (a model fresh from runtime.load or init_model)")
        with torch.no_grad():
            self.masters = None
            if half:
                offsets, total = adamw_update.state_layout([p.numel() for _, p in half])
                self.masters = torch.zeros(total, dtype=torch.float32, device=device)
                for offset, (_, p) in zip(offsets, half):
                    self.masters[offset:offset + p.numel()].copy_(p.detach().reshape(-1))
                    p.data = p.data.to(MASTER_DTYPE)
        self.sets = [_StateSet([p for _, p in group], [decay_of[id(p)] for _, p in group], device)
                     for group in (half, full) if group]
        self.step_count = torch.zeros((), dtype=torch.float32, device=device)
        self.lr_tensor = torch.full((), lr, dtype=torch.float32, device=device)
        self._no_clip = torch.ones((), dtype=torch.float32, device=device)
        self._stepped = False     # torch creates an optimizer's state at its first step call

    # ---- the torch optimizer interface Trainer uses ----------------------------------------------
    @property
    def state(self) -> dict[torch.nn.Parameter, dict[str, torch.Tensor]]:
        if not self._stepped:
            return {}
        return {p: {"step": self.step_count, "exp_avg": m, "exp_avg_sq": v}
                for s in self.sets for p, m, v in zip(s.parameters, s.exp_avg_views, s.exp_avg_sq_views)}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for parameter in self._parameters:
            if set_to_none:
                parameter.grad = None
            elif parameter.grad is not None:
                parameter.grad.zero_()

    def state_dict(self) -> dict[str, Any]:
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        groups = [{k: v for k, v in g.items() if k != "params"} | {"params": [index[id(p)] for p in g["params"]]}
                  for g in self.param_groups]
        return {"state": {index[id(p)]: s for p, s in self.state.items()}, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Moments and step count from a torch AdamW's state (or this optimizer's), by parameter index."""
        ordered = [p for g in self.param_groups for p in g["params"]]
        saved = state_dict["state"]
        if not saved:
            return
        steps = set()
        views = {id(p): (m, v) for s in self.sets for p, m, v in zip(s.parameters, s.exp_avg_views, s.exp_avg_sq_views)}
        with torch.no_grad():
            for index, parameter in enumerate(ordered):
                if index not in saved:
                    raise CheckpointError(f"optimizer state has no moments for parameter {index}")
                entry = saved[index]
                m, v = views[id(parameter)]
                m.copy_(entry["exp_avg"])
                v.copy_(entry["exp_avg_sq"])
                steps.add(float(entry["step"]))
            if len(steps) != 1:
                raise CheckpointError(f"optimizer state holds different step counts per parameter: {sorted(steps)[:3]}")
            self.step_count.fill_(steps.pop())
        self._stepped = True

    # ---- the step ----------------------------------------------------------------------------
    def gradients(self) -> list[torch.Tensor]:
        return [p.grad for p in self._parameters if p.grad is not None]

    def grad_norm(self) -> torch.Tensor:
        """Global L2 norm of the gradients as trainer.global_grad_norm defines it (per-tensor norms,
        then the norm of those), each tensor read in its own dtype with fp32 accumulation: no fp32
        copy of a bf16 gradient."""
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for gradient in self.gradients():
            by_dtype.setdefault(gradient.dtype, []).append(gradient)
        if not by_dtype:
            return torch.zeros((), device=self.device)
        norms = [n for group in by_dtype.values() for n in torch._foreach_norm(group, 2, dtype=torch.float32)]
        return torch.linalg.vector_norm(torch.stack(norms))

    @torch.no_grad()
    def step(self, *, lr: float | torch.Tensor, total_norm: torch.Tensor, max_norm: float,
             skip: torch.Tensor) -> None:
        """One update of every parameter with a gradient: clip factor min(1, max_norm / (norm +
        1e-6)) as trainer.clip_gradients computes it (none when max_norm <= 0), nothing changed
        where `skip` is true. Every value stays on the device (nothing waits for the host)."""
        missing = [p for p in self._parameters if p.grad is None]
        if missing:
            raise ArgumentError(f"MasterAdamW.step: {len(missing)} parameter(s) have no gradient (every parameter "
                                "of the model takes part in the loss)")
        if isinstance(lr, torch.Tensor):
            lr_tensor = lr.to(self.device, torch.float32)
        else:
            self.lr_tensor.fill_(lr)
            lr_tensor = self.lr_tensor
        clip = (torch.clamp(max_norm / (total_norm + 1e-6), max=1.0).float() if max_norm > 0 else self._no_clip)
        skip = skip.to(self.device, torch.float32)
        self.step_count.add_(1 - skip)
        scalars = adamw_update.UpdateScalars(lr_tensor, self.step_count, clip, skip, *self.betas, self.eps)
        for state_set in self.sets:
            state_set.update([p.grad for p in state_set.parameters], self.masters if state_set.has_master else None,
                             scalars)
        self._stepped = True

    # ---- the fp32 values ------------------------------------------------------------------------
    @contextlib.contextmanager
    def masters_in_model(self) -> Iterator[None]:
        """The fp32 masters in place of the bf16 weights for the duration (to save or read them)."""
        half = [s for s in self.sets if s.has_master]
        swapped = []
        try:
            for state_set in half:
                for parameter, master in zip(state_set.parameters, state_set.master_views(self.masters)):
                    swapped.append((parameter, parameter.data))
                    parameter.data = master
            yield
        finally:
            for parameter, data in swapped:
                parameter.data = data


class _StateSet:
    """Parameters of one dtype and their flat fp32 moments (and masters, for the bf16 set)."""

    def __init__(self, parameters: list[torch.nn.Parameter], decays: list[float], device: torch.device):
        self.parameters = parameters
        self.decays = decays
        self.has_master = parameters[0].dtype == MASTER_DTYPE
        self._offsets, total = adamw_update.state_layout([p.numel() for p in parameters])
        self.exp_avg = torch.zeros(total, dtype=torch.float32, device=device)
        self.exp_avg_sq = torch.zeros(total, dtype=torch.float32, device=device)
        self.exp_avg_views = self._views(self.exp_avg)
        self.exp_avg_sq_views = self._views(self.exp_avg_sq)
        self._triton = device.type == "cuda" and kernels._triton_available()
        self._tensors = adamw_update.TensorSet(parameters, decays, device) if self._triton else None

    def _views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        return [flat[o:o + p.numel()].view(p.shape) for o, p in zip(self._offsets, self.parameters)]

    def master_views(self, masters: torch.Tensor) -> list[torch.Tensor]:
        return self._views(masters)

    def update(self, grads: list[torch.Tensor], masters: torch.Tensor | None,
               scalars: adamw_update.UpdateScalars) -> None:
        if self._triton:
            adamw_update.update_triton(self._tensors, grads, masters, self.exp_avg, self.exp_avg_sq, scalars)
        else:
            adamw_update.update_reference(self.parameters, grads, None if masters is None else self.master_views(masters),
                                          self.exp_avg_views, self.exp_avg_sq_views, self.decays, scalars)


class MasterWeightTrainer(trainer.Trainer):
    """Trainer(...) on the fast path whose decoder matrices are bf16 with fp32 masters (module
    docstring). Every option is Trainer's, but micro_batch_size (one batch a step) and a path
    other than "fast" (the reference path computes in fp32: it has no bf16 products to feed)."""

    def __init__(self, model: CausalLM, **options):
        if options.get("micro_batch_size") is not None:
            raise ArgumentError("MasterWeightTrainer takes one batch a step; micro_batch_size would accumulate "
                                "bf16 gradients (use Trainer for gradient accumulation)")
        super().__init__(model, **options)
        if self.path != "fast":
            raise ArgumentError(f"MasterWeightTrainer trains the fast path (bf16 products); this model runs the "
                                f"{self.path} path (pass path='fast', or use Trainer)")
        h = self.hyperparameters
        self.optimizer = MasterAdamW(self.named_parameters, master_parameter_names(model), lr=h["lr"],
                                     weight_decay=h["weight_decay"], betas=tuple(h["betas"]))

    def train_step(self, micro_batches: Sequence) -> float:
        """Trainer.train_step for one batch: forward and backward, the global norm of the bf16 and
        fp32 gradients, one update with the clip inside it (skipped on the device when the loss is
        not finite), then the step's one host read."""
        if len(micro_batches) != 1:
            raise ArgumentError(f"MasterWeightTrainer takes one batch a step, got {len(micro_batches)}")
        self.model.train()
        batch = micro_batches[0].to(self.device)
        lr = self.current_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        step_tokens = (batch.targets != IGNORE_INDEX).sum()
        loss = trainer._batch_loss(self.model, batch, batch.targets)
        if loss.requires_grad:  # a non-finite loss is differentiated too: its update is skipped below
            loss.backward()
        loss_total = loss.detach()
        total_norm = self.optimizer.grad_norm()
        finite = torch.isfinite(loss_total) & (step_tokens > 0)
        self.optimizer.step(lr=lr, total_norm=total_norm, max_norm=self.hyperparameters["grad_clip"], skip=~finite)
        applied = self._read_step(loss_total, total_norm, step_tokens)
        if applied:
            self.step += 1
        return self.last_loss

    def masters_in_model(self):
        """The model with its fp32 masters in place of the bf16 weights, for the duration."""
        return self.optimizer.masters_in_model()

    def _named_optimizer_state(self) -> dict[str, torch.Tensor]:
        """Trainer's, each tensor a copy of its own: every parameter's "step" is the one
        step_count tensor and the moments are views of flat buffers, which safetensors refuses to
        write as shared memory (on the CPU, where Trainer's .to("cpu") copies nothing)."""
        return {key: tensor.clone() for key, tensor in super()._named_optimizer_state().items()}

    def save(self, directory, *, runtime_meta: dict[str, Any] | None = None):
        """Trainer.save with the fp32 masters as the model's weights (never their bf16 rounding)."""
        with self.masters_in_model():
            return super().save(directory, runtime_meta=runtime_meta)


class GraphedMasterTrainer(GraphedTrainer, MasterWeightTrainer):
    """MasterWeightTrainer's step replayed as one CUDA graph (step_graph.GraphedTrainer captures
    `train_batch`, which runs MasterWeightTrainer.train_step)."""
