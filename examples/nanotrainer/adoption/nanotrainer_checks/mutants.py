"""Planted bugs in nanotrainer, each the kind a GPT trainer really ships with. Each patches one
function of nanotrainer on entry and restores it on exit; `pv strength` runs the pack's
falsifiers under the bugs they declare and expects them to FAIL (killed).

The adapter calls nanotrainer through its modules (`model.fused_qkv`, `train.lr_at`, ...) at
call time, so one swap here reaches every caller."""

from __future__ import annotations

import contextlib

from pv.mutation import mutant

import nanotrainer.model
import nanotrainer.train


@contextlib.contextmanager
def _swapped(owner, name: str, new):
    original = getattr(owner, name)
    setattr(owner, name, new)
    try:
        yield
    finally:
        setattr(owner, name, original)


@mutant("nano_fused_qkv_drops_bias")
def nano_fused_qkv_drops_bias():
    """The fast path's fused QKV matmul concatenates the weights but forgets the biases: the
    reference path (three nn.Linear) keeps them. Imitates the CUDA forward that dropped Qwen's
    Q/K/V biases. Seam: nanotrainer.model.fused_qkv (fast path only)."""
    import torch
    import torch.nn.functional as F

    def fused_qkv(x, attn):
        return F.linear(x, torch.cat([attn.q.weight, attn.k.weight, attn.v.weight]))

    with _swapped(nanotrainer.model, "fused_qkv", fused_qkv):
        yield


@mutant("nano_fast_attention_not_causal")
def nano_fast_attention_not_causal():
    """The fast path calls scaled_dot_product_attention without is_causal: every position sees
    the future, the reference path's explicit mask does not. Imitates a fast path that diverges
    from the reference. Seam: nanotrainer.model.fast_attention."""
    import torch.nn.functional as F

    def fast_attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    with _swapped(nanotrainer.model, "fast_attention", fast_attention):
        yield


@mutant("nano_evaluate_averages_batch_means")
def nano_evaluate_averages_batch_means():
    """evaluate() averages each batch's mean loss: a short or padded batch weighs as much as a
    full one. Imitates `sum(losses) / len(losses)` for a token-weighted mean.
    Seam: nanotrainer.train.evaluate."""
    import torch

    @torch.no_grad()
    def evaluate(model, batches):
        model.eval()
        losses = [model.loss(ids, labels).item() for ids, labels in batches]
        return sum(losses) / len(losses)

    with _swapped(nanotrainer.train, "evaluate", evaluate):
        yield


@mutant("nano_warmup_never_warms")
def nano_warmup_never_warms():
    """Warmup written with integer division, lr * (step // warmup_steps): the learning rate is 0
    for every warmup step and then jumps to the peak. Imitates a warmup that never warms.
    Seam: nanotrainer.train.lr_at."""
    original = nanotrainer.train.lr_at

    def lr_at(step, tc):
        if step < tc.warmup_steps:
            return tc.lr * (step // tc.warmup_steps)
        return original(step, tc)

    with _swapped(nanotrainer.train, "lr_at", lr_at):
        yield


@mutant("nano_lr_set_after_step")
def nano_lr_set_after_step():
    """Trainer.train_step writes the step's learning rate into the optimizer after
    optimizer.step(), not before: each update runs at the previous step's rate, the first at
    the optimizer's initial rate (the peak, no warmup at all). Imitates a scheduler stepped in
    the wrong place. lr_at itself is right, so only a measurement of the rate the optimizer
    applies sees it. Seam: nanotrainer.train.Trainer.train_step."""
    import torch

    def train_step(self, ids, labels=None):
        self.optimizer.zero_grad(set_to_none=True)
        self.model.train()
        loss = self.model.loss(ids, ids if labels is None else labels)
        loss.backward()
        if self.tc.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.tc.grad_clip)
        self.optimizer.step()
        for group in self.optimizer.param_groups:
            group["lr"] = nanotrainer.train.lr_at(self.step, self.tc)
        self.step += 1
        return loss.item()

    with _swapped(nanotrainer.train.Trainer, "train_step", train_step):
        yield


@mutant("nano_checkpoint_keys_not_loaded")
def nano_checkpoint_keys_not_loaded():
    """load() reads checkpoints saved from a torch.compile'd model ("_orig_mod." key prefix) with
    strict=False and no check of what matched: no key matches, every weight keeps its random
    initialisation, and nothing complains. Seam: nanotrainer.train.load."""
    import json
    from pathlib import Path

    from safetensors.torch import load_file

    def load(checkpoint_dir, device="cpu"):
        path = Path(checkpoint_dir)
        config = json.loads((path / "config.json").read_text())
        config.pop("model_type", None)
        gpt = nanotrainer.model.GPT(nanotrainer.model.GPTConfig(**config))
        state = {f"_orig_mod.{k}": v for k, v in load_file(str(path / "model.safetensors")).items()}
        gpt.load_state_dict(state, strict=False)
        return gpt.to(device)

    with _swapped(nanotrainer.train, "load", load):
        yield


@mutant("nano_loss_targets_not_shifted")
def nano_loss_targets_not_shifted():
    """GPT.loss scores the logits at t against labels[t], not labels[t + 1]: the model is asked
    for the token it was just given. Imitates the classic missing shift. Seam:
    nanotrainer.model.GPT.loss."""
    import torch.nn.functional as F

    def loss(self, ids, labels, reduction="mean"):
        logits = self(ids)[:, :-1]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, :-1].reshape(-1),
                               ignore_index=nanotrainer.model.IGNORE_INDEX, reduction=reduction)

    with _swapped(nanotrainer.model.GPT, "loss", loss):
        yield


@mutant("nano_trainer_reinitialises_weights")
def nano_trainer_reinitialises_weights():
    """Trainer() re-runs the model's weight initialisation before building the optimizer (an
    init call moved from the model into the trainer): a fine-tune silently starts from random
    weights. Seam: nanotrainer.train.Trainer.__init__."""
    original = nanotrainer.train.Trainer.__init__

    def __init__(self, model, tc):
        model.apply(model._init)
        original(self, model, tc)

    with _swapped(nanotrainer.train.Trainer, "__init__", __init__):
        yield


@mutant("nano_loss_ignores_reduction")
def nano_loss_ignores_reduction():
    """GPT.loss accepts `reduction` but always returns the mean: evaluate() adds batch means
    where it expects sums and divides by the token count, reporting a loss near zero.
    Seam: nanotrainer.model.GPT.loss."""
    import torch.nn.functional as F

    def loss(self, ids, labels, reduction="mean"):
        logits = self(ids)[:, :-1]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                               ignore_index=nanotrainer.model.IGNORE_INDEX)

    with _swapped(nanotrainer.model.GPT, "loss", loss):
        yield


@mutant("nano_generate_samples")
def nano_generate_samples():
    """generate() draws the next token from the softmax instead of taking the argmax (a sampling
    decode left where greedy was asked). Imitates the seeds' "greedy decode samples".
    Seam: nanotrainer.train.generate."""
    import torch

    @torch.no_grad()
    def generate(model, ids, new_tokens):
        model.eval()
        generator = torch.Generator(device=ids.device).manual_seed(0)
        for _ in range(new_tokens):
            probs = model(ids[:, -model.cfg.max_seq_len:])[:, -1].softmax(dim=-1)
            ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], dim=1)
        return ids

    with _swapped(nanotrainer.train, "generate", generate):
        yield


@mutant("nano_reference_mask_sees_next_key")
def nano_reference_mask_sees_next_key():
    """The reference path's causal mask starts one key late (`triu(2)` for `triu(1)`): every
    position also attends to the token right after it. A trained model reads the next token it
    is asked to predict, and its loss looks better, not worse. Seam: nanotrainer.model.future_keys."""
    import torch

    def future_keys(length, device):
        return torch.ones(length, length, dtype=torch.bool, device=device).triu(2)

    with _swapped(nanotrainer.model, "future_keys", future_keys):
        yield


@mutant("nano_adam_l2_weight_decay")
def nano_adam_l2_weight_decay():
    """The optimizer is Adam with weight decay added to the gradient (L2), not AdamW's decoupled
    decay: Adam's normalisation cancels most of the decay. Imitates `torch.optim.Adam(...,
    weight_decay=wd)` where AdamW was meant. Seam: nanotrainer.train.build_optimizer."""
    import torch

    def build_optimizer(model, tc):
        params = [p for p in model.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": tc.weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        return torch.optim.Adam(groups, lr=tc.lr, betas=tc.betas, eps=tc.eps)

    with _swapped(nanotrainer.train, "build_optimizer", build_optimizer):
        yield


@mutant("nano_heads_merged_across_rows")
def nano_heads_merged_across_rows():
    """The attention output's heads are merged with `transpose(0, 2)` where `transpose(1, 2)` is
    meant: for a batch of one the two lay the values out alike, for a larger batch each row
    receives slices of the others. A test at batch size 1 cannot see it. Seam:
    nanotrainer.model.merge_heads."""

    def merge_heads(y):
        B, H, T, D = y.shape
        return y.transpose(0, 2).reshape(B, T, H * D)

    with _swapped(nanotrainer.model, "merge_heads", merge_heads):
        yield


@mutant("nano_clip_per_parameter")
def nano_clip_per_parameter():
    """Each parameter's gradient is clipped to max_norm on its own, not the whole gradient by its
    global norm: large tensors are cut, small ones pass, and the update's direction changes.
    Imitates calling clip_grad_norm_ inside the loop over parameters. Seam:
    nanotrainer.train.clip_gradients."""
    import torch

    def clip_gradients(model, max_norm):
        for parameter in model.parameters():
            if parameter.grad is not None:
                torch.nn.utils.clip_grad_norm_([parameter], max_norm)

    with _swapped(nanotrainer.train, "clip_gradients", clip_gradients):
        yield


@mutant("nano_tied_head_detached")
def nano_tied_head_detached():
    """The tied output head multiplies by the embedding detached: the logits are bit-identical,
    but the embedding learns only from its input role, never from the head's. Imitates
    `F.linear(h, embed.weight.detach())` written to save memory. Only a check of the gradient
    against the loss sees it (the loss still falls). Seam: nanotrainer.model.output_head."""
    import torch.nn.functional as F

    def output_head(model, h):
        weight = model.head.weight.detach() if model.cfg.tie_embeddings else model.head.weight
        return F.linear(h, weight, model.head.bias)

    with _swapped(nanotrainer.model, "output_head", output_head):
        yield
