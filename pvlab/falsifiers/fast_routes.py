"""The fast path takes the routes it claims, and refuses only what torch cannot run.

The CUDA fast path decides at run time which route each piece takes: whether the fused loss
multiplies bf16 operands into fp32 in one GEMM (and may let the first chunk overwrite its
accumulator), whether the loss's per-chunk steps are compiled, which SDPA backends exist. Each
decision is a probe or a condition in pvlab/runtime/kernels.py, and each wrong answer is
*silent*: the fallback computes the same numbers, slower, or a backend that runs is refused.
`pv mutate` on an H100 (issue #26) left such mutants alive. These checks ask torch itself — with
their own shapes, values and float64 answers, never through the runtime's probes — what it can
run on this device, and hold the runtime's routes to that answer.

Oracles, independent of the runtime under test: torch's own kernels called directly
(torch.mm(out_dtype=), torch.addmm(beta=0), scaled_dot_product_attention under torch's
sdpa_kernel), float64 products on the CPU, whether Triton imports (importlib.util.find_spec),
torch.profiler's record of which kernels ran, and the reference path in float64.
"""

from __future__ import annotations

import importlib.util
import math

import torch
import torch.nn.functional as F

from ._util import randn, torch_device
from .fast_path_cpu import CACHED_STEPS, NO_CACHE_LENGTHS, _run

_TORCH_REFUSES = (RuntimeError, TypeError, NotImplementedError, ValueError)


# ---- the mixed-precision GEMM routes of the fused loss -----------------------------------------

def _torch_mixed_precision(dev: torch.device) -> tuple[bool, bool]:
    """(product, overwrite): whether torch multiplies bf16 operands into fp32 here correctly — as
    a product and accumulated in place — and whether addmm with beta=0 ignores the NaN in its
    output. Shapes and values of this check's own, compared with float64 products on the CPU."""
    a = randn((40, 24), seed=11).to(dev, torch.bfloat16).t()                    # (24, 40) view
    b = randn((12, 40), seed=12).to(dev, torch.bfloat16).t()                    # (40, 12) view
    start = randn((24, 12), seed=13).to(dev)
    want = a.double().cpu() @ b.double().cpu()                                   # exact: bf16 products

    def close(got: torch.Tensor, expected: torch.Tensor) -> bool:
        return got.dtype == torch.float32 and bool(((got.double().cpu() - expected).abs() <= 1e-4).all())

    try:
        product = torch.mm(a, b, out_dtype=torch.float32)
        accumulated = start.clone()
        torch.addmm(accumulated, a, b, out_dtype=torch.float32, out=accumulated)
        product_ok = close(product, want) and close(accumulated, start.double().cpu() + want)
    except _TORCH_REFUSES:
        product_ok = False
    try:
        overwritten = torch.full((24, 12), float("nan"), device=dev)
        torch.addmm(overwritten, a, b, out_dtype=torch.float32, beta=0, out=overwritten)
        overwrite_ok = close(overwritten, want)
    except _TORCH_REFUSES:
        overwrite_ok = False
    return product_ok, overwrite_ok


def mixed_precision_routes_match_torch(*, device: str) -> dict:
    """The fused loss takes the one-GEMM mixed-precision route (bf16 operands, fp32 result, no
    low-precision intermediate) exactly when torch offers it correctly on a device, and lets the
    first chunk overwrite its accumulator exactly when torch's beta=0 does: a route taken where
    torch lacks it crashes or is wrong; a route not taken where torch has it is a silent fallback
    (a bf16 product, a cast kernel and an add per chunk). Judged on `device` and, on a GPU, on
    the CPU beside it (a probe answering for the wrong device shows only where the two differ).

    Observations: torch_product, torch_overwrite (what torch offers on `device`: 1/0),
    route_mismatches (of the runtime's two answers per device judged, those that differ from
    torch's; a probe that raises counts)."""
    from pvlab.runtime import kernels

    dev = torch_device(device)
    mismatches = 0
    for judged in dict.fromkeys([dev, torch.device("cpu")]):
        product_ok, overwrite_ok = _torch_mixed_precision(judged)
        if judged == dev:
            offered_here = (product_ok, overwrite_ok)
        for probe, offered in ((kernels._mixed_precision_matmul_available, product_ok),
                               (kernels._mixed_precision_overwrite_available, overwrite_ok and product_ok)):
            try:
                answer = bool(probe(judged.type))
            except Exception:  # noqa: BLE001 - a probe that crashes takes no route
                answer = None
            mismatches += int(answer is not offered)
    return {"torch_product": int(offered_here[0]), "torch_overwrite": int(offered_here[1]),
            "route_mismatches": mismatches}


# ---- the fused loss's per-chunk steps: compiled on CUDA with Triton, eager elsewhere -------------

def _compiled_events(dev: torch.device, seed: int) -> tuple[int, int]:
    """(profiler events of compiled code, errors) of the fused loss's second forward and
    backward on `dev` (the first compiles, where anything does)."""
    from torch.profiler import ProfilerActivity, profile

    from pvlab.runtime import kernels

    hidden = randn((3, 16, 64), seed=seed, device=dev).requires_grad_()
    weight = randn((200, 64), seed=seed + 1, scale=0.1, device=dev).requires_grad_()
    targets = torch.randint(0, 200, (3, 16), generator=torch.Generator().manual_seed(seed)).to(dev)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    errors, names = 0, []
    for _ in range(2):
        try:
            with profile(activities=activities) as trace:
                kernels.chunked_linear_cross_entropy(hidden, weight, targets, chunk_tokens=16).backward()
                if dev.type == "cuda":
                    torch.cuda.synchronize()
            names = [event.name for event in trace.events()]
        except Exception:  # noqa: BLE001 - a loss that raises is a wrong outcome, counted
            errors, names = errors + 1, []
    compiled = sum(name.startswith(("triton_", "cpp_fused")) or "CompiledFxGraph" in name
                   or "CompiledFunction" in name for name in names)
    return compiled, errors


def loss_chunk_steps_compiled_where_documented(*, device: str, seed: int = 0) -> dict:
    """One forward and backward of the fused head + loss (kernels.chunked_linear_cross_entropy,
    three chunks) under torch.profiler: on CUDA with Triton importable, the per-chunk elementwise
    work runs as compiled code (kernels named triton_* or inductor's compiled graph appear); on
    the CPU — judged on every machine, a GPU's included, where Triton imports and a wrong device
    test would compile — nothing compiled runs (compilation costs a minute a process and the CPU
    path is documented eager).

    Observations: expected_compiled (1/0: `device` is CUDA and Triton importable),
    compiled_events (profiler events of compiled code on `device`), cpu_compiled_events (on the
    CPU), errors (the loss raised)."""
    dev = torch_device(device)
    expected = dev.type == "cuda" and importlib.util.find_spec("triton") is not None
    compiled, errors = _compiled_events(dev, seed)
    if dev.type == "cpu":
        cpu_compiled = compiled
    else:
        cpu_compiled, cpu_errors = _compiled_events(torch.device("cpu"), seed)
        errors += cpu_errors
    return {"expected_compiled": int(expected), "compiled_events": compiled, "cpu_compiled_events": cpu_compiled,
            "errors": errors}


# ---- the SDPA backends the runtime says exist ----------------------------------------------------

def _torch_runs_attention(name: str, dev: torch.device, kind: str, query: int = 3, keys: int = 3, *,
                          heads: int = 4, kv_heads: int = 4, head_dim: int = 64, batch: int = 2,
                          backward: bool = False) -> bool:
    """Whether torch's `name` kernel alone runs one bf16 attention of `kind` ("causal": T == S,
    is_causal; "plain": no mask; "masked": an explicit boolean mask, the T queries the last of
    the S keys) here, called directly."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[name]
    q = randn((batch, heads, query, head_dim), seed=21, dtype=torch.bfloat16, device=dev).requires_grad_(backward)
    k = randn((batch, kv_heads, keys, head_dim), seed=22, dtype=torch.bfloat16, device=dev).requires_grad_(backward)
    options = {"enable_gqa": heads != kv_heads}
    if kind == "causal":
        options["is_causal"] = True
    elif kind == "masked":
        options["attn_mask"] = torch.ones(query, keys, dtype=torch.bool, device=dev).tril(keys - query)
    try:
        with sdpa_kernel([backend]), torch.enable_grad():
            out = F.scaled_dot_product_attention(q, k, k, **options)
            if backward:
                out.float().sum().backward()
    except _TORCH_REFUSES:
        return False
    return True


def sdpa_backend_probe_matches_torch(*, device: str) -> dict:
    """kernels.sdpa_backend_available(name, device) — the runtime's answer to "does this backend
    run here", which decides what set_attention_backend accepts and what the attention-backends
    checks test — is True exactly for the backends torch itself runs, forward and backward, for
    a causal bf16 attention of this check's own shape (2 x 4 heads x 3 tokens x 64); judged on
    `device` and, on a GPU, on the CPU beside it.

    Observations: backends (4 per device judged), torch_runs (how many torch runs on `device`),
    probe_mismatches."""
    from pvlab.runtime import kernels

    dev = torch_device(device)
    judged = list(dict.fromkeys([dev, torch.device("cpu")]))
    runs = mismatches = 0
    for where in judged:
        for name in ("math", "flash", "efficient", "cudnn"):
            offered = _torch_runs_attention(name, where, "causal", backward=True)
            runs += int(offered and where == dev)
            try:
                answer = bool(kernels.sdpa_backend_available(name, where))
            except Exception:  # noqa: BLE001 - a probe that crashes offers nothing
                answer = None
            mismatches += int(answer is not offered)
    return {"backends": 4 * len(judged), "torch_runs": runs, "probe_mismatches": mismatches}


# ---- the fast path under each pinned backend, at the attention edges ----------------------------

def _attentions(pieces: list[torch.Tensor]) -> list[tuple[str, int, int]]:
    """(kind, T, S) of each attention a case's forwards ask SDPA for (kernels.attention_fast's
    case split: no mask for one token, is_causal when T == S, an explicit mask otherwise)."""
    out, seen = [], 0
    for piece in pieces:
        length = piece.shape[1]
        seen += length
        out.append(("plain" if length == 1 else "causal" if length == seen else "masked", length, seen))
    return out


def pinned_backends_run_the_edges(*, device: str, seed: int = 0) -> dict:
    """For a grouped-query model (4 query heads, 2 KV heads, head_dim 64) on the fast path with
    each SDPA backend pinned in turn (set_attention_backend): at every edge of the attention's
    case split — no cache at T = 1, 2, 3, 5, a cache with steps (3, 1), (3, 2), (4, 1, 3) — the
    logits equal the float64 reference path's; or the forward is refused with a DeviceError, and
    only where torch's kernel itself cannot run that attention (called directly with K/V at the
    full head count, the same T and S: the runtime must share grouped K/V heads itself for a
    kernel that takes none). A backend torch cannot run here at all is left out and counted.

    Observations: backends_run (backends torch runs here), cases, wrong (non-finite logits, a
    shape, another error, or a refusal torch does not justify), refused (justified refusals),
    worst_relative_error (max |fast - reference| / max |reference| over the cases that ran),
    wrong_cases (which backend, the steps, what went wrong; "none")."""
    from pvlab.runtime import checkpoint
    from pvlab.runtime.errors import DeviceError

    from .fast_path_cpu import _config

    dev = torch_device(device)
    config = _config(kv_heads=2).replace(hidden_size=256, intermediate_size=384, initializer_range=0.05)  # head_dim 64
    reference = checkpoint.init_model(config=config, weights="random", seed=seed, device="cpu", path="reference",
                                      parity_gate=False).eval().double()
    ids = torch.randint(0, config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(seed))
    cases = [[ids[:, :n]] for n in NO_CACHE_LENGTHS]
    for steps in CACHED_STEPS:
        bounds = [sum(steps[:i]) for i in range(len(steps) + 1)]
        cases.append([ids[:, a:b] for a, b in zip(bounds, bounds[1:])])
    backends_run = count = wrong = refused = 0
    worst = 0.0
    wrong_cases: list[str] = []
    for name in ("math", "flash", "efficient", "cudnn"):
        if not _torch_runs_attention(name, dev, "causal"):
            continue
        backends_run += 1
        model = checkpoint.init_model(config=config, weights="random", seed=seed, device=dev, path="fast",
                                      parity_gate=False).eval()
        try:
            model.set_attention_backend(name)
        except Exception as error:  # noqa: BLE001 - a backend torch runs, refused: every case is wrong
            wrong += len(cases)
            count += len(cases)
            wrong_cases.append(f"{name}: refused ({type(error).__name__})")
            continue
        for pieces in cases:
            count += 1
            where = f"{name} {[p.shape[1] for p in pieces]}"
            with torch.no_grad():
                want = _run(reference, pieces, None)
                try:
                    got = _run(model, [p.to(dev) for p in pieces], None)
                except DeviceError:
                    attentions = _attentions(pieces)
                    torch_fails = any(not _torch_runs_attention(name, dev, *attention) for attention in attentions)
                    refused += int(torch_fails)
                    if not torch_fails:
                        wrong += 1
                        wrong_cases.append(f"{where}: DeviceError where torch runs {attentions}")
                    continue
                except Exception as error:  # noqa: BLE001 - a crash is a wrong outcome
                    wrong += 1
                    wrong_cases.append(f"{where}: {type(error).__name__}")
                    continue
            if got.shape != want.shape:
                wrong += 1
                wrong_cases.append(f"{where}: shape {tuple(got.shape)}")
                continue
            error = float((got.double().cpu() - want).abs().max() / want.abs().max())
            if math.isfinite(error):
                worst = max(worst, error)
            else:
                wrong += 1
                wrong_cases.append(f"{where}: non-finite")
    return {"backends_run": backends_run, "cases": count, "wrong": wrong, "refused": refused,
            "worst_relative_error": worst, "wrong_cases": "; ".join(wrong_cases) or "none"}


# ---- device names ------------------------------------------------------------------------------

def cuda_device_names_resolve(*, device: str) -> dict:
    """resolve_device on a machine with N CUDA devices: "cuda" and "cuda:0" .. "cuda:N-1" are
    those devices; "cuda:N" (one past the last) is refused with DeviceError, not handed to torch
    to fail later inside a kernel launch.

    Observations: requests, wrong_resolutions, devices (N, from torch.cuda.device_count)."""
    from pvlab.runtime import devices
    from pvlab.runtime.errors import DeviceError

    torch_device(device)
    present = torch.cuda.device_count()
    table = [("cuda", torch.device("cuda"))] + [(f"cuda:{i}", torch.device("cuda", i)) for i in range(present)]
    table += [(f"cuda:{present}", DeviceError), (f"CUDA:{present + 3}", DeviceError)]
    wrong = 0
    for request, expected in table:
        try:
            got = devices.resolve_device(request)
        except DeviceError:
            got = DeviceError
        except Exception:  # noqa: BLE001 - a crash is a wrong resolution
            got = None
        wrong += int(got != expected)
    return {"requests": len(table), "wrong_resolutions": wrong, "devices": present}
