"""Planted bugs that the independent oracles (issue #12) must kill: defects that sit on *both*
sides of the runtime's self-comparisons (reference vs fast path, CPU vs CUDA, its writer vs its
reader), so only transformers, a textbook training loop or a byte-exact round trip sees them.

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

from pv.mutation import mutant

from .planting import plant, swap

# ---- seen by transformers as oracle ---------------------------------------------------------------


@mutant("qkv_bias_added_after_rope")
def qkv_bias_added_after_rope():
    """The Q and K biases are added after the rotary embedding instead of before it (V as
    usual). Both execution paths share the mistake, so reference and fast path still agree.

    Imitates a fused QKV kernel that rotates the bias-free product and adds the bias last.
    Seam: runtime.model.Attention.forward."""
    from pvlab.runtime import kernels, model

    def forward(self, x, cos, sin, cache=None, mask=None):
        batch, seq, _ = x.shape

        def rotated_then_biased(linear, heads):
            kernel = kernels.linear_fast if linear.path == "fast" else kernels.linear_reference
            y = kernel(x, linear.weight, None).view(batch, seq, heads, self.head_dim).transpose(1, 2)
            y = kernels.apply_rope(y, cos, sin)
            if linear.bias is not None:
                y = y + linear.bias.view(heads, self.head_dim)[None, :, None, :].to(y.dtype)
            return y

        q = rotated_then_biased(self.q_proj, self.num_heads)
        k = rotated_then_biased(self.k_proj, self.num_kv_heads)
        v = self.v_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(self.layer_index, k, v)
        if self.path == "fast":
            y = self._attend_fast(q, k, v, mask)
        else:
            y = kernels.attention_reference(q, k, v) if mask is None else kernels.attention_reference(q, k, v, mask)
        return self.o_proj(y.transpose(1, 2).reshape(batch, seq, self.num_heads * self.head_dim))

    with plant("qkv_bias_added_after_rope", swap(model.Attention, "forward", forward)):
        yield


@mutant("tied_head_gradient_detached")
def tied_head_gradient_detached():
    """In the training loss a tied output head uses the embedding detached: the embedding
    learns only from its input role. Logits are unchanged; only gradients differ.

    Imitates `F.linear(hidden, embed.weight.detach())` written to save memory. Seam:
    runtime.model.CausalLM.loss."""
    import torch

    from pvlab.runtime import kernels
    from pvlab.runtime.model import CausalLM

    def loss(self, input_ids, targets):
        weight = self.lm_head.weight.detach() if self.config.tie_word_embeddings else self.lm_head.weight
        with kernels.autocast_for(self.path, self.device.type):
            hidden = self.model(input_ids)
            if self.path == "fast":
                return kernels.chunked_linear_cross_entropy(hidden, weight, targets, chunk_tokens=self.loss_chunk_tokens,
                                                            compute_dtype=torch.bfloat16)
            return kernels.cross_entropy_reference(kernels.linear_reference(hidden, weight, None), targets)

    with plant("tied_head_gradient_detached", swap(CausalLM, "loss", loss)):
        yield


@mutant("kv_cache_keeps_only_newest")
def kv_cache_keeps_only_newest():
    """KVCache.update returns the full keys/values but stores only the step's new ones: from the
    second decoding step on, attention sees the prompt no more.

    Imitates a cache that forgets to keep the concatenation. Seam: runtime.model.KVCache.update."""
    import torch

    from pvlab.runtime.model import KVCache

    def update(self, layer_index, k, v):
        full_k, full_v = k, v
        if self.keys[layer_index] is not None:
            full_k = torch.cat((self.keys[layer_index], k), dim=-2)
            full_v = torch.cat((self.values[layer_index], v), dim=-2)
        self.keys[layer_index], self.values[layer_index] = k, v
        return full_k, full_v

    with plant("kv_cache_keeps_only_newest", swap(KVCache, "update", update)):
        yield


# ---- seen by the textbook training loop -----------------------------------------------------------


@mutant("lr_schedule_one_step_late")
def lr_schedule_one_step_late():
    """The learning rate of step s is the schedule's value at s - 1 (the first step repeats step
    0): the schedule lags one step.

    Imitates setting the optimizer's lr after optimizer.step() instead of before. Seam:
    runtime.trainer.Trainer.current_lr."""
    from pvlab.runtime import trainer

    def current_lr(self):
        h = self.hyperparameters
        return trainer.learning_rate(max(self.step - 1, 0), peak=h["lr"], warmup_steps=h["warmup_steps"],
                                     total_steps=h["total_steps"], min_lr=h["min_lr"])

    with plant("lr_schedule_one_step_late", swap(trainer.Trainer, "current_lr", current_lr)):
        yield


@mutant("embeddings_not_decayed")
def embeddings_not_decayed():
    """The embedding matrix (and so a tied head) is put in the no-decay group.

    Imitates GPT-style grouping that exempts embeddings, against the documented policy
    (matrices decay). Seam: runtime.trainer.decays."""
    from pvlab.runtime import trainer

    def decays(name, parameter):
        return parameter.dim() >= 2 and "embed" not in name

    with plant("embeddings_not_decayed", swap(trainer, "decays", decays)):
        yield


# ---- seen by exact round trips --------------------------------------------------------------------


@mutant("saved_biases_rounded_to_float16")
def saved_biases_rounded_to_float16():
    """One-dimensional tensors (norm weights, biases) are written in float16; they come back as
    float32, rounded.

    Imitates a writer that stores "small" tensors in half precision. Seam:
    runtime.checkpoint.model_tensors."""
    import torch

    from pvlab.runtime import checkpoint

    original = checkpoint.model_tensors

    def model_tensors(model):
        return {name: tensor.to(torch.float16) if tensor.dim() == 1 else tensor
                for name, tensor in original(model).items()}

    with plant("saved_biases_rounded_to_float16", swap(checkpoint, "model_tensors", model_tensors)):
        yield


@mutant("config_written_with_fixed_norm_eps")
def config_written_with_fixed_norm_eps():
    """config.json always says rms_norm_eps 1e-5, whatever the model uses.

    Imitates a config writer with a hard-coded Llama default. Seam:
    runtime.config.ModelConfig.to_hf_dict."""
    from pvlab.runtime.config import ModelConfig

    original = ModelConfig.to_hf_dict

    def to_hf_dict(self):
        written = original(self)
        written["rms_norm_eps"] = 1e-5
        return written

    with plant("config_written_with_fixed_norm_eps", swap(ModelConfig, "to_hf_dict", to_hf_dict)):
        yield


@mutant("optimizer_moments_swapped_on_save")
def optimizer_moments_swapped_on_save():
    """The optimizer state is written with exp_avg and exp_avg_sq under each other's names, so a
    resumed run continues from swapped moments.

    Imitates a state-dict key mix-up in the trainer's serialiser. Seam:
    runtime.trainer.Trainer._named_optimizer_state (what Trainer.save writes)."""
    from pvlab.runtime.trainer import Trainer

    original = Trainer._named_optimizer_state
    renamed = {"exp_avg": "exp_avg_sq", "exp_avg_sq": "exp_avg"}

    def _named_optimizer_state(self):
        out = {}
        for key, tensor in original(self).items():
            name, _, state_key = key.partition("::")
            out[f"{name}::{renamed.get(state_key, state_key)}"] = tensor
        return dict(sorted(out.items()))

    with plant("optimizer_moments_swapped_on_save", swap(Trainer, "_named_optimizer_state", _named_optimizer_state)):
        yield


# ---- eighth blind batch ----
# Written from pvlab/runtime and docs/runtime.md alone, before any kill was measured (docs/mutants.md,
# "Eighth blind batch"; probes in tests/falsifiers/eighth_mutant_probes.py).


@mutant("adamw_eps_one_e_minus_six")
def adamw_eps_one_e_minus_six():
    """The AdamW built by build_optimizer (Trainer, DistributedTrainer; both paths) has eps 1e-6
    instead of the documented 1e-8: every update is m / (sqrt(v) + 1e-6), damping the steps of
    parameters with small gradients (late in training, norms, rarely seen embedding rows). The
    master-weight optimizer is unaffected.

    Imitates an optimizer eps copied from a BERT/RoBERTa fine-tuning recipe. Quiet: the loss
    curve is nearly the same. Seam: runtime.trainer.build_optimizer (wrapped: each group's eps)."""
    from pvlab.runtime import trainer

    original = trainer.build_optimizer

    def build_optimizer(named_parameters, *, lr, weight_decay, betas, path, device):
        optimizer = original(named_parameters, lr=lr, weight_decay=weight_decay, betas=betas, path=path,
                             device=device)
        for group in optimizer.param_groups:
            group["eps"] = 1e-6   # the defect: not 1e-8
        return optimizer

    with plant("adamw_eps_one_e_minus_six", swap(trainer, "build_optimizer", build_optimizer)):
        yield
