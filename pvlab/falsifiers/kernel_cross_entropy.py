"""Cross-entropy: the reference kernel (runtime.kernels.cross_entropy_reference, full logits) and
the fast path's fused chunked linear + cross-entropy (runtime.kernels.chunked_linear_cross_entropy)
against an independent float64 computation, values and gradients.

The float64 reference is the textbook definition, written here: mean over non-ignored
positions of logsumexp(z) - z[target], with z = hidden @ weight^T. Gradients of the reference
come from autograd on that float64 expression. Targets are already aligned with the logits
(position t scores target t): a kernel that shifts them again is off by one position and fails.
"""

from __future__ import annotations

import torch

from ._util import compared, generator, randn, rtol_atol, torch_device, torch_dtype

IGNORE_INDEX = -100  # the value torch, transformers and the runtime use for padding


def _problem(batch: int, seq: int, hidden: int, vocab: int, *, seed: int, logit_scale: float,
             ignored: int, device: torch.device):
    """hidden (B, T, C) and weight (V, C) scaled so the logits have std ~ logit_scale; targets
    (B, T) with the last `ignored` positions of the first row set to IGNORE_INDEX (a shorter,
    right-padded sequence), so padding sits mid-stream and the final, partial chunk is real."""
    h = randn((batch, seq, hidden), seed=seed, device=device)
    w = randn((vocab, hidden), seed=seed + 1, scale=logit_scale / hidden ** 0.5, device=device)
    targets = torch.randint(0, vocab, (batch, seq), generator=generator(seed + 2))
    if ignored:
        targets[0, seq - min(ignored, seq):] = IGNORE_INDEX
    return h, w, targets.to(device)


def _reference_loss(h: torch.Tensor, w: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    z = h.double() @ w.double().t()                                          # (B, T, V)
    flat_z, flat_t = z.reshape(-1, z.shape[-1]), targets.reshape(-1)
    keep = flat_t != IGNORE_INDEX
    z_kept, t_kept = flat_z[keep], flat_t[keep]
    nll = torch.logsumexp(z_kept, dim=-1) - z_kept.gather(1, t_kept[:, None]).squeeze(1)
    return nll.mean()


def cross_entropy_matches_reference(*, device: str, batch: int = 3, seq: int = 13, hidden: int = 24,
                                    vocab: int = 1031, logit_scale: float = 4.0, ignored: int = 5,
                                    seed: int = 0, tolerance: dict | None = None) -> dict:
    """cross_entropy_reference on full fp32 logits vs the float64 definition (loss value).
    Observations: max_abs_diff, max_rel_diff, max_abs_ref, rtol, atol (float32), nonfinite,
    loss, reference_loss."""
    from pvlab.runtime import kernels

    dev = torch_device(device)
    rtol, atol = rtol_atol(tolerance, "float32")
    h, w, targets = _problem(batch, seq, hidden, vocab, seed=seed, logit_scale=logit_scale,
                             ignored=ignored, device=dev)
    with torch.no_grad():
        loss = kernels.cross_entropy_reference(h @ w.t(), targets)
    ref = _reference_loss(h, w, targets)
    obs = compared(loss.reshape(1), ref.reshape(1), rtol=rtol, atol=atol)
    obs.update(loss=float(loss), reference_loss=float(ref))
    return obs


def chunked_cross_entropy_matches_reference(*, device: str, compute_dtype: str = "float32", batch: int = 3,
                                            seq: int = 13, hidden: int = 24, vocab: int = 1031,
                                            chunk_tokens: int = 7, logit_scale: float = 4.0, ignored: int = 5,
                                            seed: int = 0, tolerance: dict | None = None) -> dict:
    """The fused chunked linear+CE (chunks that do not divide the token count, padding included)
    vs the float64 definition: loss value and both gradients (d/d hidden, d/d weight).

    Observations: loss_abs_diff, loss_tol (atol + rtol*|loss|), grad_hidden_max_abs_diff,
    grad_hidden_max_abs_ref, grad_weight_max_abs_diff, grad_weight_max_abs_ref, rtol, atol (for
    compute_dtype), nonfinite (in loss or gradients), ignored_grad_max_abs (gradient reaching the
    hidden state of padded positions; must be 0)."""
    from pvlab.runtime import kernels

    dev, cdt = torch_device(device), torch_dtype(compute_dtype)
    rtol, atol = rtol_atol(tolerance, compute_dtype)
    h, w, targets = _problem(batch, seq, hidden, vocab, seed=seed, logit_scale=logit_scale,
                             ignored=ignored, device=dev)
    h_k, w_k = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
    loss = kernels.chunked_linear_cross_entropy(h_k, w_k, targets, chunk_tokens=chunk_tokens, compute_dtype=cdt)
    loss.backward()
    h_r = h.detach().cpu().double().requires_grad_(True)
    w_r = w.detach().cpu().double().requires_grad_(True)
    ref = _reference_loss(h_r, w_r, targets.cpu())
    ref.backward()

    g_h = compared(h_k.grad, h_r.grad, rtol=rtol, atol=atol)
    g_w = compared(w_k.grad, w_r.grad, rtol=rtol, atol=atol)
    loss_value, ref_value = float(loss.detach()), float(ref.detach())
    flat_ignored = (targets.reshape(-1) == IGNORE_INDEX).cpu()
    ignored_grad = h_k.grad.detach().reshape(-1, hidden).cpu()[flat_ignored]
    nonfinite = int(not torch.isfinite(loss.detach()).all()) + g_h["nonfinite"] + g_w["nonfinite"]
    return {
        "loss": loss_value,
        "reference_loss": ref_value,
        "loss_abs_diff": abs(loss_value - ref_value) if not nonfinite else float("nan"),
        "loss_tol": atol + rtol * abs(ref_value),
        "grad_hidden_max_abs_diff": g_h["max_abs_diff"],
        "grad_hidden_max_abs_ref": g_h["max_abs_ref"],
        "grad_weight_max_abs_diff": g_w["max_abs_diff"],
        "grad_weight_max_abs_ref": g_w["max_abs_ref"],
        "ignored_grad_max_abs": float(ignored_grad.abs().max()) if ignored_grad.numel() else 0.0,
        "nonfinite": nonfinite,
        "rtol": rtol,
        "atol": atol,
    }
