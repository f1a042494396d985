"""AdamW as the trainer builds it (runtime.trainer.build_optimizer, with runtime.trainer.decays
choosing which parameters decay) against an independent float64 AdamW written here.

Decoupled weight decay (Loshchilov & Hutter) shrinks the weights directly,
    p <- p * (1 - lr * wd);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
    p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
whereas L2-regularised Adam adds wd * p to the gradient, where Adam's normalisation then
largely cancels it. The two trajectories separate quickly; the checks report the separation
so that "the comparison could tell them apart" is itself observed.

The parameters are named like a model's: matrices decay; biases and norm weights do not.
"""

from __future__ import annotations

import torch

from ._util import randn, rtol_atol, torch_device

# (name, shape, decays) — the decay policy the contract states, independently of runtime.trainer.decays.
PARAMETERS = (
    ("model.embed_tokens.weight", (37, 8), True),
    ("model.layers.0.self_attn.q_proj.weight", (12, 8), True),
    ("model.layers.0.self_attn.q_proj.bias", (12,), False),
    ("model.layers.0.input_layernorm.weight", (8,), False),
    ("model.layers.0.mlp.down_proj.weight", (8, 21), True),
)


def _reference_adamw(params, grads, *, steps, lr, weight_decay, betas, eps, decoupled: bool):
    """float64 trajectory; decoupled=False is Adam with L2 regularisation (wd * p added to g)."""
    b1, b2 = betas
    out = []
    for (name, _, decays), p0 in zip(PARAMETERS, params):
        p = p0.double().clone()
        m, v = torch.zeros_like(p), torch.zeros_like(p)
        wd = weight_decay if decays else 0.0
        for t in range(1, steps + 1):
            g = grads[t - 1][name].double()
            if decoupled:
                p = p * (1 - lr * wd)
            else:
                g = g + wd * p
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            m_hat, v_hat = m / (1 - b1 ** t), v / (1 - b2 ** t)
            p = p - lr * m_hat / (v_hat.sqrt() + eps)
        out.append(p)
    return out


def _runtime_trajectory(params, grads, *, steps, lr, weight_decay, betas, path, device):
    from pvlab.runtime import trainer

    named = [(name, torch.nn.Parameter(p.clone().to(device))) for (name, _, _), p in zip(PARAMETERS, params)]
    optimizer = trainer.build_optimizer(named, lr=lr, weight_decay=weight_decay, betas=betas, path=path,
                                        device=device)
    for t in range(steps):
        for name, parameter in named:
            parameter.grad = grads[t][name].to(device=device, dtype=parameter.dtype).clone()
        optimizer.step()
    return [p.detach() for _, p in named]


def _max_diff(a, b) -> tuple[float, float]:
    diff = max(float((x.double().cpu() - y.double().cpu()).abs().max()) for x, y in zip(a, b))
    ref = max(float(y.double().abs().max()) for y in b)
    return diff, ref


def adamw_matches_reference(*, device: str, path: str = "reference", steps: int = 10, lr: float = 1e-2,
                            weight_decay: float = 0.1, seed: int = 0, tolerance: dict | None = None) -> dict:
    """`steps` AdamW steps on random gradients. Observations: max_abs_diff (runtime vs decoupled
    reference), max_abs_ref, rtol, atol (float32), coupled_separation (max |decoupled - L2 Adam|
    of the two references: how far apart the wrong algorithm would be), coupled_diff (runtime vs
    the L2-regularised reference)."""
    dev = torch_device(device)
    rtol, atol = rtol_atol(tolerance, "float32")
    betas = (0.9, 0.95)
    params = [randn(shape, seed=seed + i) for i, (_, shape, _) in enumerate(PARAMETERS)]
    grads = [{name: randn(shape, seed=1000 * (t + 1) + i, scale=0.1)
              for i, (name, shape, _) in enumerate(PARAMETERS)} for t in range(steps)]
    got = _runtime_trajectory(params, grads, steps=steps, lr=lr, weight_decay=weight_decay, betas=betas,
                              path=path, device=dev)
    decoupled = _reference_adamw(params, grads, steps=steps, lr=lr, weight_decay=weight_decay, betas=betas,
                                 eps=1e-8, decoupled=True)
    coupled = _reference_adamw(params, grads, steps=steps, lr=lr, weight_decay=weight_decay, betas=betas,
                               eps=1e-8, decoupled=False)
    max_abs_diff, max_abs_ref = _max_diff(got, decoupled)
    return {
        "max_abs_diff": max_abs_diff,
        "max_abs_ref": max_abs_ref,
        "coupled_separation": _max_diff(coupled, decoupled)[0],
        "coupled_diff": _max_diff(got, coupled)[0],
        "rtol": rtol,
        "atol": atol,
    }


def adamw_zero_gradient_step(*, device: str, path: str = "reference", lr: float = 1e-2, weight_decay: float = 0.1,
                             seed: int = 0) -> dict:
    """One step with all-zero gradients: Adam's update is exactly zero, so a decaying parameter
    becomes p * (1 - lr * wd) and a non-decaying one stays put. (L2-regularised Adam would
    instead move every decaying weight by about lr, towards zero.)

    Observations: decayed_max_rel_error (| p' - p (1 - lr wd) | / |p|, worst element of the
    decaying parameters), undecayed_max_abs_change, expected_shrink (lr * wd), nonfinite."""
    dev = torch_device(device)
    params = [randn(shape, seed=seed + i) for i, (_, shape, _) in enumerate(PARAMETERS)]
    grads = [{name: torch.zeros(shape) for name, shape, _ in PARAMETERS}]
    got = _runtime_trajectory(params, grads, steps=1, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95),
                              path=path, device=dev)
    decayed_err, undecayed_change, nonfinite = 0.0, 0.0, 0
    for (name, _, decays), before, after in zip(PARAMETERS, params, got):
        before64, after64 = before.double(), after.double().cpu()
        nonfinite += int((~torch.isfinite(after64)).sum())
        if decays:
            expected = before64 * (1 - lr * weight_decay)
            decayed_err = max(decayed_err, float(((after64 - expected).abs() / before64.abs()).max()))
        else:
            undecayed_change = max(undecayed_change, float((after64 - before64).abs().max()))
    return {"decayed_max_rel_error": decayed_err, "undecayed_max_abs_change": undecayed_change,
            "expected_shrink": lr * weight_decay, "nonfinite": nonfinite}
