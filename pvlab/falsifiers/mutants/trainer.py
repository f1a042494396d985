"""Planted bugs of runtime.trainer: the optimizer, its decay policy, the gradient norm, what eval scores.

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

from pv.mutation import mutant

from .planting import plant, swap


@mutant("eval_targets_equal_inputs")
def eval_targets_equal_inputs():
    """Eval scores each position against the input token itself instead of the next token
    (the targets are not shifted): eval measures copying, not prediction.

    Imitates the seed defect "eval targets equal the inputs" (a model trained that way reaches
    a near-zero eval loss). Seam: runtime.trainer.eval_targets, which Trainer.eval_batch calls
    to choose what eval scores."""
    from pvlab.runtime import trainer

    def eval_targets(batch):
        return batch.inputs

    with plant("eval_targets_equal_inputs", swap(trainer, "eval_targets", eval_targets)):
        yield


@mutant("adamw_coupled_weight_decay")
def adamw_coupled_weight_decay():
    """The optimizer is Adam with L2 regularisation (weight decay added to the gradient, where
    Adam's normalisation cancels most of it) instead of AdamW's decoupled decay.

    Imitates the seed defect "AdamW weight decay coupled (L2)". Seam:
    runtime.trainer.build_optimizer (same parameter groups, same decay policy)."""
    import torch

    from pvlab.runtime import trainer

    def build_optimizer(named_parameters, *, lr, weight_decay, betas, path, device):
        decayed = [p for n, p in named_parameters if trainer.decays(n, p)]
        undecayed = [p for n, p in named_parameters if not trainer.decays(n, p)]
        return torch.optim.Adam([{"params": decayed, "weight_decay": weight_decay},
                                 {"params": undecayed, "weight_decay": 0.0}], lr=lr, betas=betas, eps=1e-8)

    with plant("adamw_coupled_weight_decay", swap(trainer, "build_optimizer", build_optimizer)):
        yield


@mutant("adamw_decays_norms_and_biases")
def adamw_decays_norms_and_biases():
    """Weight decay is applied to every parameter, norms and biases included (which it should
    never pull towards zero).

    Imitates the parameter-group defect of optimizers built from `model.parameters()` with one
    weight_decay. Seam: runtime.trainer.decays."""
    from pvlab.runtime import trainer

    def decays(name, parameter):
        return True

    with plant("adamw_decays_norms_and_biases", swap(trainer, "decays", decays)):
        yield


class _AdamWithoutSquare:
    """AdamW written by hand with one typo: the second moment accumulates g instead of g * g."""

    def __init__(self, groups, *, lr, betas, eps=1e-8):
        import torch

        self.torch = torch
        self.param_groups = [dict(group, lr=lr, betas=betas, eps=eps) for group in groups]
        self.state: dict = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None

    @staticmethod
    def state_dict():  # what Trainer.save/resume read: nothing to restore for the typo version
        return {"state": {}, "param_groups": []}

    def load_state_dict(self, state) -> None:
        return None

    def step(self) -> None:
        torch = self.torch
        with torch.no_grad():
            for group in self.param_groups:
                b1, b2 = group["betas"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state.setdefault(p, {"step": torch.zeros(()), "exp_avg": torch.zeros_like(p),
                                                      "exp_avg_sq": torch.zeros_like(p)})
                    state["step"] += 1
                    t = float(state["step"])
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                    state["exp_avg"].mul_(b1).add_(p.grad, alpha=1 - b1)
                    state["exp_avg_sq"].mul_(b2).add_(p.grad, alpha=1 - b2)  # the typo: g, not g * g
                    denominator = (state["exp_avg_sq"] / (1 - b2 ** t)).sqrt().add_(group["eps"])
                    p.add_(state["exp_avg"] / (1 - b1 ** t) / denominator, alpha=-group["lr"])


@mutant("adamw_second_moment_not_squared")
def adamw_second_moment_not_squared():
    """The optimizer's second moment accumulates the gradient instead of its square: wherever a
    gradient is negative, sqrt(v) is the square root of a negative number — NaN weights after
    the first step, and NaN losses from the second.

    Imitates a hand-written-AdamW typo (`add_(g)` for `addcmul_(g, g)`), one way a training run
    goes non-finite (INV-TRAIN-007). Seam: runtime.trainer.build_optimizer."""
    from pvlab.runtime import trainer

    def build_optimizer(named_parameters, *, lr, weight_decay, betas, path, device):
        decayed = [p for n, p in named_parameters if trainer.decays(n, p)]
        undecayed = [p for n, p in named_parameters if not trainer.decays(n, p)]
        return _AdamWithoutSquare([{"params": decayed, "weight_decay": weight_decay},
                                   {"params": undecayed, "weight_decay": 0.0}], lr=lr, betas=betas)

    with plant("adamw_second_moment_not_squared",
               swap(trainer, "build_optimizer", build_optimizer)):
        yield


@mutant("grad_norm_per_tensor_not_global")
def grad_norm_per_tensor_not_global():
    """The gradient norm is the largest per-tensor norm instead of the global L2 norm over all
    parameters: the reported norm is too small, and clipping (which uses it) clips too little.

    Imitates "the norm is taken per tensor instead of globally" (INV-TRAIN-008).
    Seam: runtime.trainer.global_grad_norm."""
    import torch

    from pvlab.runtime import trainer

    def global_grad_norm(gradients):
        if not gradients:
            return torch.zeros(())
        return torch.stack([torch.linalg.vector_norm(g.float()) for g in gradients]).max()

    with plant("grad_norm_per_tensor_not_global",
               swap(trainer, "global_grad_norm", global_grad_norm)):
        yield


@mutant("optimizer_holds_stale_parameters")
def optimizer_holds_stale_parameters():
    """The optimizer is built over copies of the parameters rather than the model's own tensors:
    every step updates the copies, and the model never changes (its gradients are computed and
    ignored).

    Imitates "the optimizer does not update the loaded weights" (an optimizer created before the
    model's parameters were replaced — moved, re-tied, reloaded — keeps the stale ones).
    Seam: runtime.trainer.build_optimizer."""
    import torch

    from pvlab.runtime import trainer

    original = trainer.build_optimizer

    def build_optimizer(named_parameters, **kwargs):
        stale = [(name, torch.nn.Parameter(p.detach().clone())) for name, p in named_parameters]
        return original(stale, **kwargs)

    with plant("optimizer_holds_stale_parameters", swap(trainer, "build_optimizer", build_optimizer)):
        yield



@mutant("eval_batch_reports_a_rescaled_loss")
def eval_batch_reports_a_rescaled_loss():
    """Trainer.eval_batch reports its loss divided by 1500 (a sum over tokens divided by the
    wrong count, a per-character figure): eval numbers that are not the next-token cross-entropy.

    Imitates an eval computing another quantity than the one it is reported as. Seam:
    runtime.trainer.Trainer.eval_batch."""
    from pvlab.runtime.trainer import Trainer

    original = Trainer.eval_batch

    def eval_batch(self, batch):
        return original(self, batch) / 1500

    with plant("eval_batch_reports_a_rescaled_loss", swap(Trainer, "eval_batch", eval_batch)):
        yield


@mutant("grad_norm_reported_after_clipping")
def grad_norm_reported_after_clipping():
    """The gradient norm is capped at 0.5 before it is reported and used: the log shows the norm
    after clipping, and clipping at any max_norm above 0.5 never happens.

    Imitates logging `clip_grad_norm_`'s result taken after the gradients were already clipped
    (INV-TRAIN-008). Seam: runtime.trainer.global_grad_norm."""
    import torch

    from pvlab.runtime import trainer

    original = trainer.global_grad_norm

    def global_grad_norm(gradients):
        return torch.clamp(original(gradients), max=0.5)

    with plant("grad_norm_reported_after_clipping", swap(trainer, "global_grad_norm", global_grad_norm)):
        yield


@mutant("resume_drops_optimizer_state")
def resume_drops_optimizer_state():
    """Resuming from a checkpoint restores weights and step but not the optimizer's moments: the
    resumed run continues from a cold AdamW and diverges from the uninterrupted one.

    Imitates a checkpoint that saves the optimizer state and never loads it. Seam:
    runtime.trainer.Trainer._load_optimizer_state."""
    from pvlab.runtime.trainer import Trainer

    def _load_optimizer_state(self, file):
        return None

    with plant("resume_drops_optimizer_state", swap(Trainer, "_load_optimizer_state", _load_optimizer_state)):
        yield


@mutant("warmup_never_warms")
def warmup_never_warms():
    """The warmup is written with integer division, lr * (step // warmup_steps): every warmup
    step runs at lr 0, then the schedule jumps to the peak.

    Imitates a warmup that never warms (the transformers adapter's hf_warmup_never_warms at
    pvlab's seam). Seam: runtime.trainer.learning_rate."""
    from pvlab.runtime import trainer

    original = trainer.learning_rate

    def learning_rate(step, *, peak, warmup_steps, total_steps, min_lr):
        if warmup_steps and step < warmup_steps:
            return peak * (step // warmup_steps)
        return original(step, peak=peak, warmup_steps=warmup_steps, total_steps=total_steps, min_lr=min_lr)

    with plant("warmup_never_warms", swap(trainer, "learning_rate", learning_rate)):
        yield


# ---- third blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/independent-mutants.md, "Third batch"; probes in tests/falsifiers/third_mutant_probes.py)


@mutant("nonfinite_loss_step_still_applied")
def nonfinite_loss_step_still_applied():
    """A non-finite loss is counted in nonfinite_losses and its grad norm reported as NaN, but
    the step is not skipped: on the host-skipping optimizers (the reference path) the NaN
    gradients are clipped and applied, turning every parameter NaN; where the optimizer skips
    on the device the update is dropped but the step counter (and the schedule) advance.

    Imitates a guard that logs the bad step and falls through to the update (a missing
    `return False`). Seam: runtime.trainer.Trainer._read_step."""
    import math
    import torch

    from pvlab.runtime.errors import ArgumentError
    from pvlab.runtime.trainer import Trainer

    def _read_step(self, loss_total, total_norm, step_tokens):
        device = loss_total.device
        loss_value, norm_value, tokens = torch.stack([loss_total.double(), total_norm.to(device).double(),
                                                      step_tokens.to(device).double()]).tolist()
        if tokens == 0:
            raise ArgumentError("train_step was given no target tokens")
        self.last_loss = loss_value
        if not math.isfinite(loss_value):
            self.nonfinite_losses += 1
            self.last_grad_norm = float("nan")
            return True                                                      # the defect: applied anyway
        self.last_grad_norm = norm_value
        return True

    with plant("nonfinite_loss_step_still_applied", swap(Trainer, "_read_step", _read_step)):
        yield


# ---- fourth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Fourth blind batch"; probes in tests/falsifiers/fourth_mutant_probes.py)


@mutant("warmup_step_overshoots_peak")
def warmup_step_overshoots_peak():
    """The warmup branch is taken for step == warmup_steps too (`step <= warmup_steps`): the
    first step after the warmup runs at peak * (W + 1) / W, above the peak (5 % above it for a
    20-step warmup), and the cosine takes over one step later. Every other step's rate is right.

    Imitates the `<=` / `<` slip at a schedule boundary. Seam: runtime.trainer.learning_rate."""
    from pvlab.runtime import trainer

    original = trainer.learning_rate

    def learning_rate(step, *, peak, warmup_steps, total_steps, min_lr):
        if warmup_steps and step == warmup_steps:                           # the defect: step <= warmup_steps
            return peak * (step + 1) / warmup_steps
        return original(step, peak=peak, warmup_steps=warmup_steps, total_steps=total_steps, min_lr=min_lr)

    with plant("warmup_step_overshoots_peak", swap(trainer, "learning_rate", learning_rate)):
        yield


@mutant("final_norm_weight_decayed")
def final_norm_weight_decayed():
    """The decay policy is a list of name fragments, ("bias", "layernorm.weight"), instead of the
    parameter's rank: the per-layer norms and the biases are exempt, but the final norm,
    `model.norm.weight`, matches neither fragment and is decayed towards zero with the matrices.

    Imitates the `no_decay = ["bias", "LayerNorm.weight"]` grouping of the transformers example
    scripts, adapted to Qwen2/Llama names that it does not all cover. Seam:
    runtime.trainer.decays."""
    from pvlab.runtime import trainer

    def decays(name, parameter):
        return not any(fragment in name for fragment in ("bias", "layernorm.weight"))  # the defect: by name

    with plant("final_norm_weight_decayed", swap(trainer, "decays", decays)):
        yield


# ---- fifth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Fifth blind batch"; probes in tests/falsifiers/fifth_mutant_probes.py)


@mutant("resume_forgets_lr_schedule")
def resume_forgets_lr_schedule():
    """Trainer.resume restores the weights, the optimizer moments and the step counter, but
    rebuilds the trainer without the schedule's warmup_steps, total_steps and min_lr (they are
    in trainer.json, just not passed on): a resumed run trains at the constant peak learning
    rate instead of continuing its cosine decay.

    Imitates schedule arguments added to the constructor later and never threaded through the
    resume path. Seam: runtime.trainer.Trainer.resume (wrapped: the resumed trainer's schedule
    settings are the constructor's defaults)."""
    from pvlab.runtime.trainer import Trainer

    original = Trainer.resume

    def resume(cls, directory, **kwargs):
        resumed = original(directory, **kwargs)
        hyper = resumed.hyperparameters
        hyper.update(warmup_steps=0, total_steps=None, min_lr=hyper["lr"])   # the defect: Trainer's defaults
        return resumed

    with plant("resume_forgets_lr_schedule", swap(Trainer, "resume", classmethod(resume))):
        yield


# ---- sixth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Sixth blind batch"; probes in tests/falsifiers/sixth_mutant_probes.py)


@mutant("grad_clip_zero_zeroes_gradients")
def grad_clip_zero_zeroes_gradients():
    """grad_clip=0, documented as "no clipping", clips the gradients to a global norm of 0: every
    gradient is multiplied by min(1, 0 / (norm + 1e-6)) = 0, so the optimizer steps on zero
    gradients (only weight decay and the Adam moments of earlier steps move the weights) and the
    loss stops improving. last_grad_norm still reports the unclipped norm. Any positive
    grad_clip clips correctly.

    Imitates the "off" guard written `if max_norm < 0: return` where `<= 0` is meant.
    Seam: runtime.trainer.clip_gradients (wrapped: max_norm 0 takes the clipping formula)."""
    import torch

    from pvlab.runtime import trainer

    original = trainer.clip_gradients

    def clip_gradients(gradients, max_norm, total_norm):
        if max_norm != 0:
            return original(gradients, max_norm, total_norm)
        scale = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)   # the defect: 0 is a limit, not "off"
        for gradient in gradients:
            gradient.mul_(scale.to(gradient.device, gradient.dtype))
        return None

    with plant("grad_clip_zero_zeroes_gradients", swap(trainer, "clip_gradients", clip_gradients)):
        yield


# ---- master weights (issue #29)
# runtime.master_weights (MasterWeightTrainer, MasterAdamW) and runtime.adamw_update, the fused update
# behind them; contract master-weights.


@mutant("master_bf16_copy_not_refreshed")
def master_bf16_copy_not_refreshed():
    """The update writes the fp32 master and the moments but leaves each bf16 weight as it was:
    the model computes with the weights of the first step for ever, while the masters (and the
    checkpoint) train on.

    Imitates a fused update whose last store (weight = bf16(master)) was dropped or masked out.
    Seam: runtime.master_weights._StateSet.update (wrapped: the bf16 weights written back as they
    were before it, on the CPU's and the Triton path alike)."""
    import torch

    from pvlab.runtime import master_weights

    original = master_weights._StateSet.update

    def update(self, grads, masters, scalars):
        stale = [p.detach().clone() for p in self.parameters] if self.has_master else []
        original(self, grads, masters, scalars)
        with torch.no_grad():
            for parameter, old in zip(self.parameters, stale):   # the defect: the copy is not refreshed
                parameter.copy_(old)

    with plant("master_bf16_copy_not_refreshed", swap(master_weights._StateSet, "update", update)):
        yield


@mutant("master_checkpoint_saves_bf16_rounding")
def master_checkpoint_saves_bf16_rounding():
    """MasterWeightTrainer.save writes the bf16 weights widened to fp32 as the model's weights
    instead of the fp32 masters: a resumed run (by either trainer) restarts from the rounding,
    losing up to half a bf16 ulp of every matrix.

    Imitates a save that writes `model.state_dict()` cast to fp32. Seam:
    runtime.master_weights.MasterWeightTrainer.masters_in_model (what save swaps into the model:
    bf16(master) widened instead of the master)."""
    import contextlib

    from pvlab.runtime.master_weights import MasterWeightTrainer

    @contextlib.contextmanager
    def masters_in_model(self):
        swapped = []
        try:
            for state_set in self.optimizer.sets:
                if state_set.has_master:
                    for parameter in state_set.parameters:
                        swapped.append((parameter, parameter.data))
                        parameter.data = parameter.data.float()       # the defect: the rounding, widened
            yield
        finally:
            for parameter, data in swapped:
                parameter.data = data

    with plant("master_checkpoint_saves_bf16_rounding", swap(MasterWeightTrainer, "masters_in_model", masters_in_model)):
        yield


def _update_scalar_replaced(field, value):
    """Both implementations of the fused update (runtime.adamw_update.update_reference and
    update_triton) wrapped so that their UpdateScalars' `field` reads value(the true one)."""
    import dataclasses

    from pvlab.runtime import adamw_update

    def wrap(original):
        def update(*args):
            *rest, scalars = args
            return original(*rest, dataclasses.replace(scalars, **{field: value(getattr(scalars, field))}))
        return update

    return (swap(adamw_update, "update_reference", wrap(adamw_update.update_reference)),
            swap(adamw_update, "update_triton", wrap(adamw_update.update_triton)))


@mutant("master_update_ignores_clip")
def master_update_ignores_clip():
    """The fused update multiplies every gradient by 1 instead of the clip factor: the gradient
    clip, folded into the update, never happens (last_grad_norm still reports the norm).

    Imitates the clip factor passed to a fused kernel as a constant (or the wrong pointer).
    Seam: runtime.adamw_update.update_reference and update_triton (wrapped: scalars.clip = 1)."""
    import torch

    with plant("master_update_ignores_clip", *_update_scalar_replaced("clip", torch.ones_like)):   # the defect
        yield


@mutant("master_update_ignores_skip")
def master_update_ignores_skip():
    """The fused update ignores the skip flag: a step whose loss is non-finite writes its NaN
    update into the masters, the moments and the bf16 weights (the step count alone stays).

    Imitates a kernel whose store mask leaves out the found_inf / skip term. Seam:
    runtime.adamw_update.update_reference and update_triton (wrapped: scalars.skip = 0)."""
    import torch

    with plant("master_update_ignores_skip", *_update_scalar_replaced("skip", torch.zeros_like)):   # the defect
        yield


@mutant("master_bias_correction_off_by_one")
def master_bias_correction_off_by_one():
    """The bias corrections use step + 1 (1 - beta ** (step + 1)): the early steps are too small
    (with betas 0.9, 0.95 the first is 0.74 of its size, the fifth 0.95), the later ones closer.

    Imitates the step count incremented before the corrections are taken where it was already
    the count after the step. Seam: runtime.adamw_update.UpdateScalars.corrections (wrapped: it
    reads step + 1), which both implementations call."""
    import dataclasses

    from pvlab.runtime import adamw_update

    original = adamw_update.UpdateScalars.corrections

    def corrections(self):
        return original(dataclasses.replace(self, step=self.step + 1))   # the defect: one step ahead

    with plant("master_bias_correction_off_by_one", swap(adamw_update.UpdateScalars, "corrections", corrections)):
        yield


# ---- seventh blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Seventh blind batch"; probes in tests/falsifiers/seventh_mutant_probes.py)


@mutant("master_resume_restarts_bias_correction")
def master_resume_restarts_bias_correction():
    """MasterAdamW.load_state_dict restores the moments but leaves the step count at the fresh
    optimizer's 0: a MasterWeightTrainer resumed at step n takes its next update with Adam's
    bias corrections of step 1 (lr / (1 - beta1) on the restored first moment: about ten times
    the step the uninterrupted run takes), and the checkpoint it saves next records the wrong
    "step". Trainer.step and the lr schedule are restored, so nothing looks amiss.

    Imitates the moments copied into the flat buffers and the step count, which lives outside
    them in one tensor, forgotten. Seam: runtime.master_weights.MasterAdamW.load_state_dict
    (wrapped: the step count reset after it)."""
    from pvlab.runtime import master_weights

    original = master_weights.MasterAdamW.load_state_dict

    def load_state_dict(self, state_dict):
        original(self, state_dict)
        self.step_count.zero_()   # the defect: the step count is not restored

    with plant("master_resume_restarts_bias_correction",
               swap(master_weights.MasterAdamW, "load_state_dict", load_state_dict)):
        yield


@mutant("master_bf16_copy_truncated")
def master_bf16_copy_truncated():
    """After each update the bf16 weights are the fp32 masters truncated (rounded toward zero),
    not rounded to nearest: every decoder matrix the model computes with is biased toward zero
    by half a bf16 ulp on average, and differs from the autocast recipe's bf16(W) in about half
    its elements. The masters, the moments and the checkpoint are right.

    Imitates a fused kernel that stores the master's upper 16 bits (a bit-cast shortcut) as the
    bf16 weight instead of a rounding conversion. Seam: runtime.master_weights._StateSet.update
    (wrapped: the bf16 weights rewritten from the truncated masters, on the CPU's and the Triton
    path alike)."""
    import torch

    from pvlab.runtime import master_weights

    original = master_weights._StateSet.update

    def update(self, grads, masters, scalars):
        original(self, grads, masters, scalars)
        if masters is None:
            return
        with torch.no_grad():
            for parameter, master in zip(self.parameters, self.master_views(masters)):
                bits = master.contiguous().view(torch.int32) & -65536   # the defect: low 16 bits dropped
                parameter.copy_(bits.view(torch.float32).to(parameter.dtype))

    with plant("master_bf16_copy_truncated", swap(master_weights._StateSet, "update", update)):
        yield


@mutant("warmup_skipped_without_total_steps")
def warmup_skipped_without_total_steps():
    """With total_steps None (a constant schedule) warmup_steps is ignored: the first step
    already runs at the peak lr. With total_steps given, warmup and cosine are unchanged.

    Imitates the constant-schedule early return (`if not total_steps: return peak`) placed
    before the warmup branch. Seam: runtime.trainer.learning_rate (wrapped)."""
    from pvlab.runtime import trainer

    original = trainer.learning_rate

    def learning_rate(step, *, peak, warmup_steps, total_steps, min_lr):
        if not total_steps:
            return peak   # the defect: returns before the warmup is applied
        return original(step, peak=peak, warmup_steps=warmup_steps, total_steps=total_steps, min_lr=min_lr)

    with plant("warmup_skipped_without_total_steps", swap(trainer, "learning_rate", learning_rate)):
        yield
