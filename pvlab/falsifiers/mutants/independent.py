"""Planted bugs written from the runtime's code, seam by seam, before looking at any check.

Issue #12: the kill matrix read 100 % because every planted bug was written beside the falsifier
that kills it. These were written the other way round — reading pvlab/runtime/model.py,
checkpoint.py, config.py, trainer.py, data.py and generate.py for realistic defects — and listed
in docs/independent-mutants.md before any kill was measured. They are measured with
`pv strength --matrix --device cpu --no-ledger --mutant ...` against every falsifier.

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

import math

from pv.mutation import mutant

from .planting import plant, swap

# ---- model assembly (runtime.model) -------------------------------------------------------------


@mutant("mlp_gate_and_up_swapped")
def mlp_gate_and_up_swapped():
    """The MLP computes down(SiLU(up(x)) * gate(x)): the gate and up projections change roles.

    Imitates a weight conversion that splits a fused gate_up_proj in the wrong order. Seam:
    runtime.model.MLP.forward."""
    from pvlab.runtime import kernels, model

    def forward(self, x):
        gate, up = self.gate_proj(x), self.up_proj(x)
        activation = kernels.swiglu_fast if self.path == "fast" else kernels.swiglu_reference
        return self.down_proj(activation(up, gate))

    with plant("mlp_gate_and_up_swapped", swap(model.MLP, "forward", forward)):
        yield


@mutant("post_attention_norm_reuses_input_norm")
def post_attention_norm_reuses_input_norm():
    """The MLP input is normalised with input_layernorm's weights: post_attention_layernorm is
    loaded but never used.

    Imitates a copy-paste slip in a pre-norm block. Seam: runtime.model.DecoderLayer.forward."""
    from pvlab.runtime import model

    def forward(self, x, cos, sin, cache=None, mask=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, mask)
        return x + self.mlp(self.input_layernorm(x))

    with plant("post_attention_norm_reuses_input_norm", swap(model.DecoderLayer, "forward", forward)):
        yield


@mutant("embeddings_scaled_by_sqrt_hidden")
def embeddings_scaled_by_sqrt_hidden():
    """The token embeddings are multiplied by sqrt(hidden_size) before the first layer.

    Imitates Gemma's embedding normaliser applied to a Qwen2/Llama model. Seam:
    runtime.model.Embedding.forward."""
    from pvlab.runtime import model

    embed = model.Embedding.forward

    def forward(self, input_ids):
        return embed(self, input_ids) * math.sqrt(self.weight.shape[1])

    with plant("embeddings_scaled_by_sqrt_hidden", swap(model.Embedding, "forward", forward)):
        yield


# ---- checkpoint I/O (runtime.checkpoint, runtime.config) ----------------------------------------


@mutant("saved_weights_rounded_to_bfloat16")
def saved_weights_rounded_to_bfloat16():
    """Every tensor is cast to bfloat16 before it is written; loading reads it back as float32,
    silently rounded to 8 mantissa bits.

    Imitates a "halve the checkpoint size" change in the writer. Seam:
    runtime.checkpoint.model_tensors (what save_checkpoint and Trainer.save write)."""
    import torch

    from pvlab.runtime import checkpoint

    original = checkpoint.model_tensors

    def model_tensors(model):
        return {name: tensor.to(torch.bfloat16) for name, tensor in original(model).items()}

    with plant("saved_weights_rounded_to_bfloat16", swap(checkpoint, "model_tensors", model_tensors)):
        yield


@mutant("loader_transposes_square_matrices")
def loader_transposes_square_matrices():
    """Square 2-D tensors are transposed while they are copied into the model; the shapes still
    match, so nothing complains.

    Imitates an (in, out) -> (out, in) layout conversion applied to files that are already
    (out, in). Seam: runtime.checkpoint.copy_tensor."""
    from pvlab.runtime import checkpoint

    original = checkpoint.copy_tensor

    def copy_tensor(parameter, tensor):
        if tensor.dim() == 2 and tensor.shape[0] == tensor.shape[1]:
            tensor = tensor.t()
        original(parameter, tensor)

    with plant("loader_transposes_square_matrices", swap(checkpoint, "copy_tensor", copy_tensor)):
        yield


@mutant("config_rms_norm_eps_not_written")
def config_rms_norm_eps_not_written():
    """config.json is written without rms_norm_eps; whoever reads it (the runtime, transformers)
    falls back to its default (1e-6).

    Imitates a config writer that only writes the keys it thinks are non-default. Seam:
    runtime.config.ModelConfig.to_hf_dict."""
    from pvlab.runtime.config import ModelConfig

    original = ModelConfig.to_hf_dict

    def to_hf_dict(self):
        written = original(self)
        written.pop("rms_norm_eps", None)
        return written

    with plant("config_rms_norm_eps_not_written", swap(ModelConfig, "to_hf_dict", to_hf_dict)):
        yield


# ---- the trainer (runtime.trainer) --------------------------------------------------------------


@mutant("warmup_starts_at_zero")
def warmup_starts_at_zero():
    """Warmup is lr * step / warmup_steps: the first step runs at lr 0 and the peak comes one
    step late.

    Imitates the classic 0-based/1-based warmup slip. Seam: runtime.trainer.learning_rate."""
    from pvlab.runtime import trainer

    original = trainer.learning_rate

    def learning_rate(step, *, peak, warmup_steps, total_steps, min_lr):
        if warmup_steps and step < warmup_steps:
            return peak * step / warmup_steps
        return original(step, peak=peak, warmup_steps=warmup_steps, total_steps=total_steps, min_lr=min_lr)

    with plant("warmup_starts_at_zero", swap(trainer, "learning_rate", learning_rate)):
        yield


@mutant("cosine_floor_ignored")
def cosine_floor_ignored():
    """The cosine decays to 0 instead of min_lr, and stays at 0 after total_steps.

    Imitates a schedule copied from a recipe without a floor. Seam: runtime.trainer.learning_rate."""
    from pvlab.runtime import trainer

    original = trainer.learning_rate

    def learning_rate(step, *, peak, warmup_steps, total_steps, min_lr):
        return original(step, peak=peak, warmup_steps=warmup_steps, total_steps=total_steps, min_lr=0.0)

    with plant("cosine_floor_ignored", swap(trainer, "learning_rate", learning_rate)):
        yield


@mutant("clip_scale_not_capped")
def clip_scale_not_capped():
    """Clipping scales every gradient by max_norm / norm without capping the factor at 1, so a
    small gradient is scaled *up* to the clip norm.

    Imitates a hand-written clip_grad_norm_ without the min(1, ...). Seam:
    runtime.trainer.clip_gradients."""
    from pvlab.runtime import trainer

    def clip_gradients(gradients, max_norm, total_norm):
        if max_norm <= 0:
            return
        scale = max_norm / (total_norm + 1e-6)
        for gradient in gradients:
            gradient.mul_(scale.to(gradient.device, gradient.dtype))

    with plant("clip_scale_not_capped", swap(trainer, "clip_gradients", clip_gradients)):
        yield


@mutant("resume_restarts_schedule")
def resume_restarts_schedule():
    """Trainer.resume restores weights and optimizer moments but not the step counter: the
    learning-rate schedule (warmup) starts again.

    Imitates a resume that forgets trainer.json's step. Seam: runtime.trainer.Trainer.resume."""
    from pvlab.runtime.trainer import Trainer

    original = Trainer.resume

    def resume(cls, directory, **kwargs):
        resumed = original(directory, **kwargs)
        resumed.step = 0
        return resumed

    with plant("resume_restarts_schedule", swap(Trainer, "resume", classmethod(resume))):
        yield


# ---- data (runtime.data) -------------------------------------------------------------------------


@mutant("padding_targets_scored")
def padding_targets_scored():
    """Short sequences are padded with pad_id in the targets too (not IGNORE_INDEX): padding is
    scored as token 0.

    Imitates padding both tensors with the tokenizer's pad id. Seam:
    runtime.data.LMBatch.from_sequences."""
    from pvlab.runtime import kernels
    from pvlab.runtime.data import LMBatch

    original = LMBatch.from_sequences

    def from_sequences(cls, sequences, *, pad_id=0):
        batch = original(sequences, pad_id=pad_id)
        return cls(inputs=batch.inputs, targets=batch.targets.masked_fill(batch.targets == kernels.IGNORE_INDEX, pad_id))

    with plant("padding_targets_scored", swap(LMBatch, "from_sequences", classmethod(from_sequences))):
        yield


@mutant("heldout_windows_overlap")
def heldout_windows_overlap():
    """Held-out windows are taken every seq_len tokens instead of every seq_len + 1: consecutive
    windows share a token (the last target of one is the first input of the next).

    Imitates unfold(size=T+1, step=T). Seam: runtime.data.sequential_batches."""
    from pvlab.runtime import data

    def sequential_batches(stream, *, batch_size, seq_len, max_batches=None):
        window = seq_len + 1
        if stream.numel() < window:
            raise data.DataError(f"held-out stream has {stream.numel()} tokens, fewer than one window of {window}")
        windows = stream.unfold(0, window, seq_len)
        batches = [data.LMBatch.from_sequences(windows[i:i + batch_size]) for i in range(0, len(windows), batch_size)]
        return batches[:max_batches] if max_batches else batches

    with plant("heldout_windows_overlap", swap(data, "sequential_batches", sequential_batches)):
        yield


# ---- generation (runtime.generate) ----------------------------------------------------------------


def _decoder(*, feed_whole_sequence: bool, position: int):
    """runtime.generate.generate's loop with one defect: the step input, or which position's
    logits choose the next token (argument checks left out: planted bugs need no refusals)."""
    import torch

    from pvlab.runtime import kernels
    from pvlab.runtime.generate import Generation
    from pvlab.runtime.model import KVCache

    @torch.no_grad()
    def generate(model, prompt_ids, *, max_new_tokens, temperature=0.0, top_k=None, seed=0, eos_token_id=None,
                 use_cache=True, use_graph=None):  # this loop is the eager decoder, whatever use_graph asks
        prompt = [int(t) for t in prompt_ids]
        was_training = model.training
        model.eval()
        generator = torch.Generator(device=model.device).manual_seed(seed) if temperature > 0 else None
        result = Generation(prompt_ids=prompt)
        cache = KVCache(model.config.num_hidden_layers) if use_cache else None
        sequence = torch.tensor([prompt], dtype=torch.long, device=model.device)
        step_input = sequence
        try:
            for _ in range(max_new_tokens):
                logits = model(step_input, cache)
                next_token = kernels.pick_next_token(logits[:, position, :], temperature, generator, top_k)
                token = int(next_token.item())
                result.new_ids.append(token)
                if eos_token_id is not None and token == eos_token_id:
                    result.stopped_on_eos = True
                    break
                sequence = torch.cat((sequence, next_token.view(1, 1)), dim=1)
                step_input = sequence if (feed_whole_sequence or not use_cache) else sequence[:, -1:]
        finally:
            model.train(was_training)
        return result

    return generate


def _swap_generate(**defect):
    """Swaps of runtime.generate.generate and of its re-export pvlab.runtime.generate (the
    package attribute named like the module is the function, not the module)."""
    import importlib

    package, module = importlib.import_module("pvlab.runtime"), importlib.import_module("pvlab.runtime.generate")
    broken = _decoder(**defect)
    return swap(module, "generate", broken), swap(package, "generate", broken)


@mutant("decode_feeds_full_sequence_with_cache")
def decode_feeds_full_sequence_with_cache():
    """With the KV cache on, every step feeds the whole sequence again: the cache holds every
    position twice and the new positions start after the duplicated ones.

    Imitates a decode loop switched to the cache without switching its input. Seam:
    runtime.generate.generate."""
    with plant("decode_feeds_full_sequence_with_cache", *_swap_generate(feed_whole_sequence=True, position=-1)):
        yield


@mutant("decode_reads_first_position_logits")
def decode_reads_first_position_logits():
    """The next token is chosen from the logits of the first position of the step's input, not
    the last: after the prompt's forward the first new token continues the prompt's first token
    (later one-token steps are unaffected).

    Imitates logits[:, 0] for logits[:, -1]. Seam: runtime.generate.generate."""
    with plant("decode_reads_first_position_logits", *_swap_generate(feed_whole_sequence=False, position=0)):
        yield


# ---- tenth blind batch (docs/independent-mutants.md, "Tenth batch") ------------------------------
# Written from pvlab/runtime and the pack's transformers adapter before reading any check or
# contract. Added as functions of existing modules, never as a module of its own: a registration
# line is module-level code, which every record that imported the package binds.


@mutant("master_second_moment_bias_correction_dropped")
def master_second_moment_bias_correction_dropped():
    """The master-weight AdamW update keeps the first moment's bias correction and drops the
    second's: p -= (lr / bc1) * m / (sqrt(v) + eps). The first steps are sqrt(1 / (1 - beta2^t))
    times too large (4.5x at step 1 with beta2 = 0.95), converging to the right size later.

    Imitates a hand-written Adam that folds only bc1 into the step size. Seam:
    runtime.adamw_update.UpdateScalars.corrections (read by the reference update and the Triton
    kernel alike)."""
    import torch

    from pvlab.runtime import adamw_update

    original = adamw_update.UpdateScalars.corrections

    def corrections(self):
        step_size, bias_correction2_sqrt = original(self)
        return step_size, torch.ones_like(bias_correction2_sqrt)           # the defect: no sqrt(bc2)

    with plant("master_second_moment_bias_correction_dropped",
               swap(adamw_update.UpdateScalars, "corrections", corrections)):
        yield


@mutant("master_eps_inside_square_root")
def master_eps_inside_square_root():
    """The master-weight AdamW update adds eps under the square root: denominator
    sqrt(v / bc2 + eps) instead of sqrt(v) / sqrt(bc2) + eps. With eps = 1e-8 the floor is 1e-4,
    so every coordinate whose gradient is below ~1e-4 takes a much smaller step.

    Imitates eps placed as in RMSProp/Adafactor (or torch's `eps` confused with an `eps_root`).
    Seam: runtime.adamw_update.update_reference (the CPU's update; the Triton kernel is left
    as it is)."""
    import torch

    from pvlab.runtime import adamw_update

    @torch.no_grad()
    def update_reference(weights, grads, masters, exp_avgs, exp_avg_sqs, decays, scalars):
        step_size, bias_correction2_sqrt = (t.float() for t in scalars.corrections())
        keep = (scalars.skip == 0).float()
        lr = scalars.lr.float()
        for index, (weight, grad) in enumerate(zip(weights, grads)):
            value = weight if masters is None else masters[index]
            exp_avg, exp_avg_sq = exp_avgs[index], exp_avg_sqs[index]
            g = grad.float() * scalars.clip
            new_value = value - lr * decays[index] * value
            new_m = scalars.beta1 * exp_avg + (1 - scalars.beta1) * g
            new_v = scalars.beta2 * exp_avg_sq + (1 - scalars.beta2) * g * g
            denom = (new_v / bias_correction2_sqrt ** 2 + scalars.eps).sqrt()     # the defect: eps inside
            new_value = new_value - step_size * new_m / denom
            value.copy_(torch.where(keep.bool(), new_value, value))
            exp_avg.copy_(torch.where(keep.bool(), new_m, exp_avg))
            exp_avg_sq.copy_(torch.where(keep.bool(), new_v, exp_avg_sq))
            if masters is not None:
                weight.copy_(value.to(weight.dtype))

    with plant("master_eps_inside_square_root", swap(adamw_update, "update_reference", update_reference)):
        yield


@mutant("master_grad_norm_keeps_last_dtype_group")
def master_grad_norm_keeps_last_dtype_group():
    """MasterAdamW's global gradient norm is taken over the last dtype group only (the bf16
    decoder matrices): the fp32 embedding, norms and biases drop out of the norm, so clipping
    uses too small a norm (clips too little) and last_grad_norm under-reports.

    Imitates `norms = ...` for `norms += ...` in a loop over dtype groups. Seam:
    runtime.master_weights.MasterAdamW.grad_norm."""
    import torch

    from pvlab.runtime import master_weights

    def grad_norm(self):
        by_dtype = {}
        for gradient in self.gradients():
            by_dtype.setdefault(gradient.dtype, []).append(gradient)
        if not by_dtype:
            return torch.zeros((), device=self.device)
        norms = []
        for group in by_dtype.values():
            norms = list(torch._foreach_norm(group, 2, dtype=torch.float32))   # the defect: = for +=
        return torch.linalg.vector_norm(torch.stack(norms))

    with plant("master_grad_norm_keeps_last_dtype_group", swap(master_weights.MasterAdamW, "grad_norm", grad_norm)):
        yield


@mutant("clip_inside_accumulation_loop")
def clip_inside_accumulation_loop():
    """Under gradient accumulation the running gradient is clipped after every micro-batch's
    backward (and not once after the last): early micro-batches are scaled down again and again,
    the step is not the whole batch's clipped gradient; the reported norm is the last running
    norm. With one micro-batch nothing changes.

    Imitates `clip_grad_norm_` moved inside the accumulation loop. Seam:
    runtime.trainer.Trainer.train_step."""
    import torch

    from pvlab.runtime import trainer
    from pvlab.runtime.errors import ArgumentError
    from pvlab.runtime.kernels import IGNORE_INDEX

    def train_step(self, micro_batches):
        if not micro_batches:
            raise ArgumentError("train_step needs at least one micro-batch")
        self.model.train()
        micro_batches = [b.to(self.device) for b in micro_batches]
        lr = self.current_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        counts = [(b.targets != IGNORE_INDEX).sum() for b in micro_batches]
        step_tokens = torch.stack(counts).sum()
        loss_total = total_norm = None
        for micro, count in zip(micro_batches, counts):
            weight = trainer.micro_batch_weight(count, step_tokens, len(micro_batches))
            loss = trainer._batch_loss(self.model, micro, micro.targets) * weight
            loss_total = loss.detach() if loss_total is None else loss_total + loss.detach()
            if loss.requires_grad:
                loss.backward()
            running = [p.grad for _, p in self.named_parameters if p.grad is not None]
            total_norm = trainer.global_grad_norm(running)
            trainer.clip_gradients(running, self.hyperparameters["grad_clip"], total_norm)   # the defect
        finite = torch.isfinite(loss_total) & (step_tokens > 0)
        if trainer.skips_on_device(self.optimizer):
            self.optimizer.found_inf = (~finite).float()
            try:
                self.optimizer.step()
            finally:
                del self.optimizer.found_inf
            applied = self._read_step(loss_total, total_norm, step_tokens)
        else:
            applied = self._read_step(loss_total, total_norm, step_tokens)
            if applied:
                self.optimizer.step()
        if applied:
            self.step += 1
        return self.last_loss

    with plant("clip_inside_accumulation_loop", swap(trainer.Trainer, "train_step", train_step)):
        yield


@mutant("resume_drops_grad_clip")
def resume_drops_grad_clip():
    """Trainer.resume builds the new trainer without the saved grad_clip: a run saved with
    clipping off (or at 0.25) continues clipping at the constructor's default 1.0, and saves 1.0
    from then on. Invisible for runs that use the default.

    Imitates a hyperparameter not threaded through the resume path. Seam:
    runtime.trainer.Trainer.resume."""
    from pvlab.runtime import trainer

    original = trainer.Trainer.resume.__func__

    def resume(cls, directory, *, device="cpu", path=None):
        resumed = original(cls, directory, device=device, path=path)
        resumed.hyperparameters["grad_clip"] = 1.0       # the defect: Trainer(...)'s default, not the saved value
        return resumed

    with plant("resume_drops_grad_clip", swap(trainer.Trainer, "resume", classmethod(resume))):
        yield
