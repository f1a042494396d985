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


# ---- blind batch (docs/independent-mutants.md, "Eleventh batch"): written from nanotrainer's code,
# its adapter, its subjects and pvpack/protocol.py, before reading the pack's checks or contracts ----

def _attention_forward(*, split=None, scale=None):
    """Attention.forward as nanotrainer writes it, with the head split (q/k/v (B, T, C) -> (B, H,
    T, D)) or the reference path's score scale replaced: one copy of the method for two bugs."""
    import math

    model = nanotrainer.model

    def heads(t, B, T, H, C):
        return t.view(B, T, H, C // H).transpose(1, 2)

    split = split or heads
    scale = scale or (lambda C, H: math.sqrt(C // H))

    def forward(self, x, fast):
        B, T, C = x.shape
        H = self.cfg.n_head
        if fast:
            q, k, v = model.fused_qkv(x, self).split(C, dim=-1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q, k, v = (split(t, B, T, H, C) for t in (q, k, v))
        if self.cfg.positions == "rotary":
            q, k = model.rotary(q, self.cfg.rope_theta), model.rotary(k, self.cfg.rope_theta)
        if fast:
            y = model.fast_attention(q, k, v)
        else:
            scores = q @ k.transpose(-2, -1) / scale(C, H)
            y = scores.masked_fill(model.future_keys(T, x.device), float("-inf")).softmax(dim=-1) @ v
        return self.o(model.merge_heads(y))

    return forward


@mutant("nano_block_mlp_skips_norm")
def nano_block_mlp_skips_norm():
    """The block's MLP reads the raw residual stream, `x + mlp(x)` for `x + mlp(ln2(x))`: ln2 is
    built, saved and loaded, and never used (a copy-paste of a refactor that moved the norm).
    Both paths alike, so no parity check sees it; a trained checkpoint loses what it learnt.
    Seam: nanotrainer.model.Block.forward."""

    def forward(self, x, fast):
        x = x + self.attn(self.ln1(x), fast)
        return x + self.mlp(x)

    with _swapped(nanotrainer.model.Block, "forward", forward):
        yield


@mutant("nano_mlp_gelu_tanh_approximation")
def nano_mlp_gelu_tanh_approximation():
    """The MLP's GELU is the tanh approximation (`gelu_new`, GPT-2's) where the weights were
    trained with the exact erf GELU (nn.GELU()): logits move by ~1e-3, the loss barely.
    Imitates the gelu / gelu_new / gelu_pytorch_tanh confusion of converted checkpoints.
    Seam: nanotrainer.model.Block.forward (both paths)."""
    import torch.nn.functional as F

    def forward(self, x, fast):
        x = x + self.attn(self.ln1(x), fast)
        up, _, down = self.mlp
        return x + down(F.gelu(up(self.ln2(x)), approximate="tanh"))

    with _swapped(nanotrainer.model.Block, "forward", forward):
        yield


@mutant("nano_rope_frequencies_over_head_dim")
def nano_rope_frequencies_over_head_dim():
    """RoPE's inverse frequencies are theta ** (-i / D) over the whole head dimension D where
    the pairs (i, i + D/2) need theta ** (-i / (D/2)) (= theta ** (-2i / D)): the slow channels
    rotate far too fast, the position encoding differs from the one trained. Both paths.
    Seam: nanotrainer.model.rotary."""
    import torch

    def rotary(x, theta):
        half = x.shape[-1] // 2
        freqs = theta ** (-torch.arange(half, device=x.device, dtype=torch.float32) / x.shape[-1])
        angles = torch.arange(x.shape[-2], device=x.device, dtype=torch.float32)[:, None] * freqs
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    with _swapped(nanotrainer.model, "rotary", rotary):
        yield


@mutant("nano_heads_split_without_transpose")
def nano_heads_split_without_transpose():
    """Q, K and V are split into heads with `view(B, H, T, D)` straight from (B, T, C) instead of
    `view(B, T, H, D).transpose(1, 2)`: shapes match, but each "head" row mixes channels of
    several positions, so a query position carries features of later tokens (the future leaks
    through the split, not the mask). Seam: nanotrainer.model.Attention.forward (both paths)."""

    def split(t, B, T, H, C):
        return t.reshape(B, H, T, C // H)

    with _swapped(nanotrainer.model.Attention, "forward", _attention_forward(split=split)):
        yield


@mutant("nano_reference_scores_scaled_by_model_width")
def nano_reference_scores_scaled_by_model_width():
    """The reference path divides the attention scores by sqrt(d_model) where sqrt(head_dim) is
    meant (SDPA's default on the fast path): the written-out attention is flatter than the fused
    one. Seam: nanotrainer.model.Attention.forward (reference path only)."""
    import math

    with _swapped(nanotrainer.model.Attention, "forward",
                  _attention_forward(scale=lambda C, H: math.sqrt(C))):
        yield


@mutant("nano_fused_qkv_key_value_swapped")
def nano_fused_qkv_key_value_swapped():
    """The fused QKV weight (and bias) is stacked Q, V, K while the output is split Q, K, V: the
    fast path attends with values as keys and keys as values. Imitates a fused-weight layout
    conversion in the wrong order. Seam: nanotrainer.model.fused_qkv (fast path only)."""
    import torch
    import torch.nn.functional as F

    def fused_qkv(x, attn):
        weight = torch.cat([attn.q.weight, attn.v.weight, attn.k.weight])
        bias = torch.cat([attn.q.bias, attn.v.bias, attn.k.bias]) if attn.q.bias is not None else None
        return F.linear(x, weight, bias)

    with _swapped(nanotrainer.model, "fused_qkv", fused_qkv):
        yield


@mutant("nano_evaluate_counts_padding")
def nano_evaluate_counts_padding():
    """evaluate() divides the summed loss by every label position, `labels[:, 1:].numel()`,
    padding included: on unpadded batches it is exact, on padded ones the reported loss is too
    low by the padding fraction. Seam: nanotrainer.train.evaluate."""
    import torch

    @torch.no_grad()
    def evaluate(model, batches):
        model.eval()
        total, tokens = 0.0, 0
        for ids, labels in batches:
            total += model.loss(ids, labels, reduction="sum").item()
            tokens += labels[:, 1:].numel()
        if tokens == 0:
            raise ValueError("evaluate() got no scored tokens")
        return total / tokens

    with _swapped(nanotrainer.train, "evaluate", evaluate):
        yield


@mutant("nano_decay_on_norms_and_biases")
def nano_decay_on_norms_and_biases():
    """build_optimizer puts every parameter in the decayed group (`p.dim() >= 1` for `>= 2`):
    LayerNorm gains and biases are pulled to zero, against nanotrainer's documented policy
    (decay on matrices only). Seam: nanotrainer.train.build_optimizer."""
    import torch

    def build_optimizer(model, tc):
        params = [p for p in model.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if p.dim() >= 1], "weight_decay": tc.weight_decay},
                  {"params": [p for p in params if p.dim() < 1], "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=tc.lr, betas=tc.betas, eps=tc.eps)

    with _swapped(nanotrainer.train, "build_optimizer", build_optimizer):
        yield


@mutant("nano_cosine_progress_from_step_zero")
def nano_cosine_progress_from_step_zero():
    """The cosine's progress is step / total_steps, not (step - warmup) / (total - warmup): the
    decay starts under the warmup, so the first step after it is already below the peak (the
    rate drops at the boundary) though the floor is still reached at total_steps. Seam:
    nanotrainer.train.lr_at."""
    import math

    def lr_at(step, tc):
        if step < tc.warmup_steps:
            return tc.lr * (step + 1) / tc.warmup_steps
        if tc.total_steps is None:
            return tc.lr
        progress = min(1.0, step / max(1, tc.total_steps))
        return tc.min_lr + 0.5 * (tc.lr - tc.min_lr) * (1 + math.cos(math.pi * progress))

    with _swapped(nanotrainer.train, "lr_at", lr_at):
        yield


@mutant("nano_clip_matrices_only")
def nano_clip_matrices_only():
    """clip_gradients passes only the matrices (the decayed group's parameters) to
    clip_grad_norm_: the norm leaves out biases and norm gains, and their gradients are not
    scaled with the rest. Imitates clipping `optimizer.param_groups[0]["params"]`. Seam:
    nanotrainer.train.clip_gradients."""
    import torch

    def clip_gradients(model, max_norm):
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.dim() >= 2], max_norm)

    with _swapped(nanotrainer.train, "clip_gradients", clip_gradients):
        yield


@mutant("nano_save_rounds_to_bfloat16")
def nano_save_rounds_to_bfloat16():
    """save() writes every floating tensor as bfloat16 (a "half the disk" change): load() copies
    them back into float32 parameters, silently rounded to 8 bits of mantissa. Seam:
    nanotrainer.train.save."""
    import json
    from dataclasses import asdict
    from pathlib import Path

    import torch
    from safetensors.torch import save_file

    def save(model, out_dir):
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps({"model_type": "nanotrainer-gpt", **asdict(model.cfg)}, indent=2))
        state = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v).detach().contiguous().cpu()
                 for k, v in model.state_dict().items()}
        if model.cfg.tie_embeddings:
            state.pop("head.weight")
        save_file(state, str(out / "model.safetensors"))
        return out

    with _swapped(nanotrainer.train, "save", save):
        yield


@mutant("nano_generate_window_keeps_oldest")
def nano_generate_window_keeps_oldest():
    """generate() crops the context to the first max_seq_len tokens (`ids[:, :max_seq_len]`)
    instead of the last: identical while prompt + output fit, and once they do not, every step
    predicts from the same stale window and the output repeats. Seam:
    nanotrainer.train.generate."""
    import torch

    @torch.no_grad()
    def generate(model, ids, new_tokens):
        model.eval()
        for _ in range(new_tokens):
            window = ids[:, :model.cfg.max_seq_len]
            next_id = model(window)[:, -1].argmax(dim=-1, keepdim=True)
            ids = torch.cat([ids, next_id], dim=1)
        return ids

    with _swapped(nanotrainer.train, "generate", generate):
        yield


@mutant("nano_corpus_train_includes_heldout")
def nano_corpus_train_includes_heldout():
    """data.corpus returns the whole stream as "train" and its tail as "heldout": the held-out
    tokens are trained on (the cut applied to one side only). Held-out losses look better than
    they are. Seam: nanotrainer.data.corpus (what a data split is built from)."""
    import nanotrainer.data

    original = nanotrainer.data.corpus

    def corpus(vocab_size, *, seed=0, tokens=20_000, heldout=0.1, lag=2):
        split = original(vocab_size, seed=seed, tokens=tokens, heldout=heldout, lag=lag)
        import torch

        return {"train": torch.cat([split["train"], split["heldout"]]), "heldout": split["heldout"]}

    with _swapped(nanotrainer.data, "corpus", corpus):
        yield


@mutant("nano_adapter_grad_clip_not_passed")
def nano_adapter_grad_clip_not_passed():
    """The adapter builds nanotrainer's TrainConfig without grad_clip: TrainConfig's default 1.0
    applies whatever TrainSettings says, so a run asked for no clipping (grad_clip=0) is clipped
    at 1.0 and one asked for another bound gets 1.0. An adopter's bug: one setting forgotten in
    the translation. Seam: nanotrainer_checks.adapter.NanoModel.__init__."""
    from nanotrainer_checks import adapter

    original = adapter.NanoModel.__init__

    def __init__(self, gpt, device, settings):
        original(self, gpt, device, settings)
        if self.trainer is not None:
            self.trainer.tc.grad_clip = nanotrainer.train.TrainConfig.grad_clip

    with _swapped(adapter.NanoModel, "__init__", __init__):
        yield
