"""Each execution path computes in its documented precision: the reference path's products in
fp32 (autocast explicitly off), the fast path's in bf16 (autocast over fp32 weights).

docs/runtime.md's path table: "precision | fp32, autocast explicitly off | bf16 autocast over fp32
master weights". The numeric contracts compare the paths' results within tolerances, and a fast
path that computes in another 16-bit type (fp16: more mantissa than bf16, far less range, no loss
scaling here) lands inside a bf16 tolerance on a tiny model while it overflows or underflows on a
real one; a reference path that quietly runs under an outer autocast region is no fp32 oracle.

What is observed is what the kernels were handed: a TorchDispatchMode (below autocast, so it sees
the products after autocast's casts) records the dtype of the factors of every matrix product
and attention call (not of the term a product is added to: see product_dtype) of a forward, and
of a training loss and its backward, on each path (after one unrecorded pass: the runtime probes
once per process whether a mixed-precision GEMM is available, with an fp32 product that is no
part of the model's computation). The oracle is the documented table itself; nothing of the
runtime decides what is expected.
"""

from __future__ import annotations

import torch

from ._util import torch_device

# ATen ops that are products or attention: the computations autocast puts in 16 bits
_PRODUCTS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_scaled_dot_product_flash_attention_for_cpu",
             "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math")


# Products whose first argument is the term added to the product, not a factor of it: the
# factors are the next two (addmm(input, mat1, mat2) = beta * input + alpha * mat1 @ mat2).
_ADDED_FIRST = ("addmm", "baddbmm")


def product_dtype(name: str, args: tuple) -> str | None:
    """The dtype a product or attention call `name` computes in: that of its factors (the two
    matrices of a product, the query and key of an attention), "mixed:a+b" when they differ,
    None when it has no tensor factors. The term a product is added to is not a factor: on CUDA
    the fused loss adds bf16 products into an fp32 gradient buffer in one GEMM
    (`torch.addmm(acc, a, b, out_dtype=float32, out=acc)`), which multiplies in bf16 with fp32
    accumulation, as every bf16 GEMM accumulates; an H200 run that classified that call by its
    first tensor argument reported it as an fp32 product."""
    candidates = args[1:] if name in _ADDED_FIRST else args
    factors = [a for a in candidates if isinstance(a, torch.Tensor)][:2]
    dtypes = sorted({str(f.dtype).replace("torch.", "") for f in factors})
    if not dtypes:
        return None
    return dtypes[0] if len(dtypes) == 1 else "mixed:" + "+".join(dtypes)


def _dtypes_of_products(run) -> dict[str, int]:
    """{dtype name: number of product/attention calls computing in it (product_dtype)}, over `run()`."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts: dict[str, int] = {}

    class Products(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name in _PRODUCTS:
                key = product_dtype(name, args)
                if key is not None:
                    counts[key] = counts.get(key, 0) + 1
            return func(*args, **(kwargs or {}))

    with Products():
        run()
    return counts


def paths_compute_in_documented_precision(*, device: str, seq_len: int = 16, seed: int = 0) -> dict:
    """A forward, and a loss with its backward, of the tiny model with random weights on each
    path, the dtype of every matrix product and attention call recorded.

    Observations: fast_bf16_products, fast_other_products (products of the fast path in any
    dtype but bfloat16), reference_fp32_products, reference_other_products, fast_dtypes and
    reference_dtypes (the dtypes seen, for the record)."""
    from . import fixtures

    dev = torch_device(device)
    out: dict = {}
    for path, wanted in (("fast", "bfloat16"), ("reference", "float32")):
        model = fixtures.random_model("tiny", seed=seed, device=str(dev), path=path)
        ids = torch.randint(0, model.config.vocab_size, (2, seq_len + 1), generator=torch.Generator().manual_seed(seed))
        inputs, targets = ids[:, :-1].to(dev), ids[:, 1:].to(dev)

        def forward_and_backward() -> None:
            with torch.no_grad():
                model(inputs)
            model.train()
            model.loss(inputs, targets).backward()
            model.eval()

        forward_and_backward()   # once unrecorded: one-off capability probes (a mixed-precision GEMM test) stay out
        model.zero_grad(set_to_none=True)
        counts = _dtypes_of_products(forward_and_backward)
        out[f"{path}_{'bf16' if wanted == 'bfloat16' else 'fp32'}_products"] = counts.get(wanted, 0)
        out[f"{path}_other_products"] = sum(n for d, n in counts.items() if d != wanted)
        out[f"{path}_dtypes"] = ",".join(f"{d}:{n}" for d, n in sorted(counts.items()))
    return out
