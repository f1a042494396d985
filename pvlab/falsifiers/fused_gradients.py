"""On the fast path with fused projections, one backward trains every parameter.

`CausalLM.set_fused_projections(True)` makes the fast path compute each layer's Q/K/V and
gate/up as one product (kernels.fused_linear_fast): the five weights are stacked per call. The
forward does not care how the stack was made; the backward does. A stack cut from autograd
(built under no_grad, from `.data`, or from a detached copy) gives bit-identical logits while
q/k/v/gate/up never receive a gradient, and AdamW skips a parameter whose `.grad` is None: the
loss still falls (o_proj, down_proj, norms, embeddings and the head still train), so nothing
that watches the loss or the logits sees it.

Oracle, independent of everything the fast path runs (fused_linear_fast, linear_fast,
attention_fast, swiglu_fast, the fused chunked loss, bf16 autocast): the same model copied to
float64, run on the *reference* path (unfused, unautocast), its logits formed here as
hidden @ W_head^T and its loss written here as mean next-token cross-entropy over the scored
tokens (torch.nn.functional.cross_entropy), differentiated by plain autograd. Shared with the
runtime (blind to a bug on both sides): the reference path's decoder body, which
transformers-oracle checks against transformers.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from ._util import generator, torch_device

IGNORE = -100  # the scored-token convention of torch and transformers, written here


def _config(*, kv_heads: int, tied: bool):
    from pvlab.runtime.config import ModelConfig

    return ModelConfig(model_type="qwen2", vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=64,
                       rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=tied, qkv_bias=True,
                       bos_token_id=0, eos_token_id=0, initializer_range=0.2)


class _CountCalls:
    """Wraps the runtime's kernels.fused_linear_fast *as it is at call time* (a planted bug
    included) for the duration of a `with`, counting calls; the attribute is put back on exit."""

    def __init__(self) -> None:
        self.calls = 0

    def __enter__(self) -> "_CountCalls":
        from pvlab.runtime import kernels

        self._kernels, self._inner = kernels, kernels.fused_linear_fast

        def counted(*args, **kwargs):
            self.calls += 1
            return self._inner(*args, **kwargs)

        kernels.fused_linear_fast = counted
        return self

    def __exit__(self, *exc) -> None:
        self._kernels.fused_linear_fast = self._inner


def fused_projections_train_every_parameter(*, device: str, seed: int = 0) -> dict:
    """For a grouped-query model with an untied head (4 query / 2 KV heads) and a multi-head one
    with a tied head (4 / 4), Q/K/V biases, 2 layers: one training loss (CausalLM.loss, train
    mode) on the fast path with fused projections, one backward. Every parameter must get a
    finite gradient equal to the float64 reference-path gradient of the same model and batch
    (see the module docstring) within bf16 error: ||g - g_ref|| / ||g_ref|| per parameter.

    Observations: cases, parameters (named parameters over the cases), compared (those with a
    finite gradient on both sides), missing_gradients (None on the fast path), nonfinite,
    worst_relative_error (over the compared parameters), fused_calls (calls of
    kernels.fused_linear_fast during the fast forward+backward), expected_fused_calls (2 per
    layer per case: Q/K/V and gate/up), fused_flags_off (attention/MLP modules not flagged
    fused and fast), reference_grad_norm_min (the smallest reference gradient norm: a
    parameter without any reference gradient would make its ratio meaningless)."""
    from pvlab.runtime import checkpoint
    from pvlab.runtime.model import MLP, Attention

    torch_device(device)  # the CPU: the fast path runs there too (bf16 autocast, SDPA)
    ids = torch.randint(0, 97, (2, 12), generator=generator(seed))
    targets = torch.full_like(ids, IGNORE)
    targets[:, :-1] = ids[:, 1:]                                # the next token; the last has none
    targets[1, :3] = IGNORE                                     # and a few unscored positions
    cases = parameters = compared = missing = nonfinite = flags_off = fused_calls = expected_calls = 0
    worst, ref_norm_min = 0.0, float("inf")
    for case, (kv_heads, tied) in enumerate(((2, False), (4, True))):
        cases += 1
        model = checkpoint.init_model(config=_config(kv_heads=kv_heads, tied=tied), weights="random",
                                      seed=seed + case, device="cpu", path="reference", parity_gate=False)
        reference = copy.deepcopy(model).double().set_path("reference").set_fused_projections(False).train()
        hidden = reference.model(ids)                                               # (B, T, C), float64
        logits = hidden @ reference.lm_head.weight.t()                              # (B, T, V)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE).backward()
        want = {name: p.grad for name, p in reference.named_parameters()}

        model.set_path("fast").set_fused_projections(True).train()
        flags_off += sum(1 for m in model.modules() if isinstance(m, (Attention, MLP))
                         and not (m.path == "fast" and m.fused_projections))
        model.zero_grad(set_to_none=True)
        with _CountCalls() as counter:
            model.loss(ids, targets).backward()
        fused_calls += counter.calls
        expected_calls += 2 * model.config.num_hidden_layers
        for name, p in model.named_parameters():
            parameters += 1
            if p.grad is None:
                missing += 1
                continue
            g, r = p.grad.detach().double(), want[name]
            if r is None or not bool(torch.isfinite(g).all()) or not bool(torch.isfinite(r).all()):
                nonfinite += 1
                continue
            compared += 1
            ref_norm = float(r.norm())
            ref_norm_min = min(ref_norm_min, ref_norm)
            worst = max(worst, float((g - r).norm() / r.norm()) if ref_norm > 0 else float("inf"))
    return {"cases": cases, "parameters": parameters, "compared": compared, "missing_gradients": missing,
            "nonfinite": nonfinite, "worst_relative_error": worst, "fused_calls": fused_calls,
            "expected_fused_calls": expected_calls, "fused_flags_off": flags_off,
            "reference_grad_norm_min": ref_norm_min}
