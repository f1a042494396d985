"""The fused loss keeps its softmax statistics in fp32 whatever its compute dtype.

runtime.kernels.chunked_linear_cross_entropy documents: "Matmuls run in `compute_dtype`, softmax
statistics and gradient accumulation in fp32". The other cross-entropy checks compare the fast
path's bf16 loss with the fp32 reference within a bf16 bound, which is loose enough to hold a
loss whose log-sum-exp, target logit and sum were themselves rounded to bf16 (a few parts per
thousand): a kernel that forgets its upcast passes them.

This check removes the product's rounding from the comparison instead of widening the bound:
hidden states are small integers and head weights small multiples of 1/8, so every logit is a
multiple of 1/8 below 64 in magnitude, exactly representable in bf16, and the bf16 product is
exact (checked: exact_logits). The oracle is then the mean cross-entropy of those exact logits
in float64, written here (log-sum-exp minus the target logit over the scored rows), and the
fused loss, with fp32 statistics, must equal it to fp32 rounding, on the path that computes
gradients too (chunk_loss_and_logit_gradient) and on the loss-only path (chunk_loss_sum), over
several chunks with padding rows.
"""

from __future__ import annotations

import torch

from ._util import torch_device


def _exact_problem(seed: int, tokens: int, hidden: int, vocab: int):
    from pvlab.runtime.kernels import IGNORE_INDEX

    generator = torch.Generator().manual_seed(seed)
    states = torch.randint(-2, 3, (tokens, hidden), generator=generator).float()
    head = torch.randint(-2, 3, (vocab, hidden), generator=generator).float() / 8
    targets = torch.randint(0, vocab, (tokens,), generator=generator)
    targets[torch.randperm(tokens, generator=generator)[: tokens // 5]] = IGNORE_INDEX   # padding rows
    return states, head, targets


def _float64_loss(states: torch.Tensor, head: torch.Tensor, targets: torch.Tensor) -> float:
    from pvlab.runtime.kernels import IGNORE_INDEX

    logits = states.double() @ head.double().t()
    scored = targets != IGNORE_INDEX
    rows, picked = logits[scored], targets[scored]
    return float((torch.logsumexp(rows, dim=-1) - rows.gather(1, picked[:, None]).squeeze(1)).mean())


def fused_loss_statistics_in_fp32(*, device: str, seed: int = 0, tokens: int = 320, hidden: int = 16,
                                  vocab: int = 1000, chunk_tokens: int = 64) -> dict:
    """Observations: loss_rel_error_with_gradients / loss_rel_error_loss_only (the fused loss in
    bf16 compute against the float64 oracle, relative), fp64_loss, exact_logits (the bf16
    product of the check's operands equals the float64 one exactly: 1/0), chunks."""
    target = torch_device(device)
    from pvlab.runtime import kernels

    states, head, targets = _exact_problem(seed, tokens, hidden, vocab)
    expected = _float64_loss(states, head, targets)
    product = (states.to(target, torch.bfloat16) @ head.to(target, torch.bfloat16).t()).double().cpu()
    exact = int(torch.equal(product, states.double() @ head.double().t()))
    with torch.enable_grad():
        h = states.to(target).requires_grad_(True)
        w = head.to(target).requires_grad_(True)
        with_gradients = float(kernels.chunked_linear_cross_entropy(h, w, targets.to(target), chunk_tokens=chunk_tokens,
                                                                    compute_dtype=torch.bfloat16).detach())
    with torch.no_grad():
        loss_only = float(kernels.chunked_linear_cross_entropy(states.to(target), head.to(target), targets.to(target),
                                                               chunk_tokens=chunk_tokens, compute_dtype=torch.bfloat16))
    return {
        "loss_rel_error_with_gradients": abs(with_gradients - expected) / abs(expected),
        "loss_rel_error_loss_only": abs(loss_only - expected) / abs(expected),
        "fp64_loss": expected, "exact_logits": exact, "chunks": -(-tokens // chunk_tokens),
    }
