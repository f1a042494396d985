"""The fast path is the runtime's CUDA default, but nothing in it is CUDA-only: fused Q/K/V and
gate/up products, torch's SDPA with native grouped-query attention, bf16 autocast. Run on the CPU,
it must compute what the reference path computes — and the checks here make it do so at the edges
`pv mutate` found no falsifier visiting (docs/mutants.md, issue #26): a sequence as long as the
number of KV heads, a single token with and without a cache, several tokens after a cache, packed
rows, projections fused or not, a fused product whose biases are partly absent.

Oracles, each independent of the fast path under test: the reference path evaluated in float64
(its own agreement with transformers is the transformers-oracle contract's), torch.nn.functional
.linear of each product on its own in float64, and torch's dispatcher observed through a
TorchFunctionMode (which kernel each path really called). A crash counts against the runtime
(the observation says how many cases raised), never as an error of the check.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ._util import generator, randn, torch_device

# The edges of attention_fast's case split: T == S (no cache) with T = 1 and T = the number of
# KV heads (2), one token after a cache, several tokens after a cache (an explicit mask).
NO_CACHE_LENGTHS = (1, 2, 3, 5)
CACHED_STEPS = ((3, 1), (3, 2), (4, 1, 3))   # prefill, then the new tokens of each step


def _config(*, kv_heads: int):
    from pvlab.runtime.config import ModelConfig

    return ModelConfig(model_type="qwen2", vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=64,
                       rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, qkv_bias=True,
                       bos_token_id=0, eos_token_id=0, initializer_range=0.2)


def _model(kv_heads: int, seed: int):
    from pvlab.runtime import checkpoint

    model = checkpoint.init_model(config=_config(kv_heads=kv_heads), weights="random", seed=seed, device="cpu",
                                  path="reference", parity_gate=False)
    return model.eval()


def _cases(vocab: int, seed: int) -> list[tuple[str, list[torch.Tensor], torch.Tensor | None]]:
    """(name, the input ids of each forward sharing one cache or None, document_ids or None)."""
    ids = torch.randint(0, vocab, (2, 12), generator=generator(seed))
    cases = [(f"no cache, T={n}", [ids[:, :n]], None) for n in NO_CACHE_LENGTHS]
    for steps in CACHED_STEPS:
        pieces, start = [], 0
        for n in steps:
            pieces.append(ids[:, start:start + n])
            start += n
        cases.append((f"cache, steps {steps}", pieces, None))
    documents = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 2, 2], [0, 0, 0, 0, 0, 1, 1, 1, 1]])
    cases.append(("packed rows", [ids[:, :9]], documents))
    return cases


def _run(model, pieces: list[torch.Tensor], document_ids: torch.Tensor | None) -> torch.Tensor:
    from pvlab.runtime.model import KVCache

    if document_ids is not None:
        return model(pieces[0], document_ids=document_ids)
    cache = KVCache(model.config.num_hidden_layers) if len(pieces) > 1 else None
    return torch.cat([model(piece, cache) for piece in pieces], dim=1)


def _fused_products_error(seed: int) -> float:
    """kernels.fused_linear_fast over three products whose biases are [b, None, b] (a stack with
    a hole: the absent bias must act as zeros of that product's width) against each product alone
    in float64; returns the worst relative error, inf when it raises or a shape differs."""
    from pvlab.runtime import kernels

    x = randn((3, 5, 8), seed=seed)
    weights = [randn((8, 8), seed=seed + 1), randn((4, 8), seed=seed + 2), randn((6, 8), seed=seed + 3)]
    biases = [randn((8,), seed=seed + 4), None, randn((6,), seed=seed + 5)]
    try:
        fused = kernels.fused_linear_fast(x, weights, biases)
    except Exception:  # noqa: BLE001 - a crash is a wrong product
        return float("inf")
    worst = 0.0
    for got, weight, bias in zip(fused, weights, biases):
        want = F.linear(x.double(), weight.double(), None if bias is None else bias.double())
        if got.shape != want.shape:
            return float("inf")
        worst = max(worst, float((got.double() - want).abs().max() / want.abs().max()))
    return worst


def fast_path_agrees_on_cpu(*, device: str, seed: int = 0) -> dict:
    """For a grouped-query model (4 query heads, 2 KV heads) and a multi-head one (4 and 4), with
    Q/K/V and gate/up fused and unfused: the fast path's logits on the CPU (bf16 autocast, SDPA)
    equal the reference path's in float64 in every case of `_cases`; and one fused product with
    a missing bias equals its products computed alone.

    Observations: cases, errors (cases that raised), worst_relative_error (max |fast - ref| /
    max |ref| over the cases that ran), fused_product_error."""
    torch_device(device)  # the CPU, where the fast path is never the default
    cases = errors = 0
    worst = 0.0
    for kv_heads in (2, 4):
        model = _model(kv_heads, seed)
        reference = _model(kv_heads, seed).double()
        for fused in (False, True):
            model.set_path("fast").set_fused_projections(fused)
            for _name, pieces, document_ids in _cases(model.config.vocab_size, seed):
                cases += 1
                with torch.no_grad():
                    want = _run(reference, pieces, document_ids)
                    try:
                        got = _run(model, pieces, document_ids)
                    except Exception:  # noqa: BLE001 - a crash is a disagreement, counted apart
                        errors += 1
                        continue
                if got.shape != want.shape:
                    errors += 1
                    continue
                worst = max(worst, float((got.double() - want).abs().max() / want.abs().max()))
    return {"cases": cases, "errors": errors, "worst_relative_error": worst,
            "fused_product_error": _fused_products_error(seed + 10)}


class _KernelCalls(TorchFunctionMode):
    """Counts the calls of torch functions by name while active."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def paths_take_their_kernels(*, device: str, seed: int = 0) -> dict:
    """The path a model reports is the path it runs: one forward of a 2-layer model calls
    scaled_dot_product_attention once per layer on the fast path and never on the reference path
    (the reference path's attention is written out; the same numbers from the other kernel would
    pass every value check while the fast path went untested).

    Observations: layers, fast_sdpa_calls, reference_sdpa_calls."""
    torch_device(device)
    model = _model(2, seed)
    ids = torch.randint(0, model.config.vocab_size, (1, 6), generator=generator(seed))
    calls = {}
    for path in ("reference", "fast"):
        model.set_path(path)
        with torch.no_grad(), _KernelCalls() as spy:
            model(ids)
        calls[path] = spy.counts.get("scaled_dot_product_attention", 0)
    return {"layers": model.config.num_hidden_layers, "fast_sdpa_calls": calls["fast"],
            "reference_sdpa_calls": calls["reference"]}


def cpu_refuses_gpu_only_requests(*, device: str, seed: int = 0) -> dict:
    """Requests only a GPU can serve are refused on the CPU with the runtime's typed error, never
    run some other way: the captured-graph decoder (generate(use_graph=True): ArgumentError);
    set_attention_backend of 'efficient' or 'cudnn' (DeviceError naming it; 'math' and 'flash',
    the CPU's own, are accepted); and an attention backend pinned where it was available and then
    carried to the CPU (a model whose attention was pinned to 'efficient' or 'cudnn', moved:
    DeviceError naming the backend, as Attention._attend_fast promises, not torch's bare
    RuntimeError).

    Observations: requests, wrong_outcomes."""
    import importlib

    from pvlab.runtime.errors import ArgumentError, DeviceError
    from pvlab.runtime.kernels import ATTENTION_BACKENDS
    from pvlab.runtime.model import Attention

    torch_device(device)
    generation = importlib.import_module("pvlab.runtime.generate")  # the package re-exports the function
    model = _model(2, seed)
    outcomes = []
    try:
        generation.generate(model, [1, 2, 3], max_new_tokens=2, use_graph=True)
        outcomes.append(False)
    except ArgumentError:
        outcomes.append(True)
    except Exception:  # noqa: BLE001 - another error is a wrong outcome too
        outcomes.append(False)
    model.set_path("fast")
    for backend in ATTENTION_BACKENDS:  # pinned here: the CPU has math and flash only
        try:
            model.set_attention_backend(backend)
            outcomes.append(backend in {"math", "flash"})
        except DeviceError as error:
            outcomes.append(backend not in {"math", "flash"} and backend in str(error))
        except Exception:  # noqa: BLE001
            outcomes.append(False)
    model.set_attention_backend(None)
    for backend in ("efficient", "cudnn"):
        for module in model.modules():  # what set_attention_backend leaves behind on a GPU
            if isinstance(module, Attention):
                module.attention_backend = backend
        try:
            with torch.no_grad():
                model(torch.tensor([[1, 2, 3, 4]]))
            outcomes.append(False)
        except DeviceError as error:
            outcomes.append(backend in str(error))
        except Exception:  # noqa: BLE001
            outcomes.append(False)
    return {"requests": len(outcomes), "wrong_outcomes": outcomes.count(False)}


def parity_gate_probe_as_documented(*, device: str, seed: int = 0) -> dict:
    """The parity gate's probe and report: compare_logits over (B, T, V) logits counts B*T probe
    positions; a gated placement of a model whose context (16) is shorter than PROBE_LENGTH (32)
    probes exactly its context (probe_ids clips to max_positions) with tokens inside its vocab,
    and passes (the fast path on the CPU agrees with the reference).

    Observations: compared_positions (of a (2, 5, 11) pair: 10 expected), gated_probe_tokens
    (16 expected), gate_errors."""
    from pvlab.runtime import checkpoint, parity

    torch_device(device)
    a, b = randn((2, 5, 11), seed=seed), randn((2, 5, 11), seed=seed + 1)
    try:
        compared_positions = parity.compare_logits(a, b, device="cpu", path="fast").probe_tokens
    except Exception:  # noqa: BLE001 - a report that cannot be made counts no position
        compared_positions = -1
    config = _config(kv_heads=2).replace(max_position_embeddings=16)
    gate_errors, probed = 0, -1
    try:
        model = checkpoint.init_model(config=config, weights="random", seed=seed, device="cpu", path="fast",
                                      parity_gate=True)
        probed = model.parity_report.probe_tokens
    except Exception:  # noqa: BLE001 - a gate that cannot probe a short model refuses every one
        gate_errors = 1
    return {"compared_positions": compared_positions, "gated_probe_tokens": probed, "gate_errors": gate_errors}


def fused_loss_gradients_for_what_trains(*, device: str, seed: int = 0) -> dict:
    """The fast path's fused output head + cross-entropy (kernels.chunked_linear_cross_entropy)
    gives the gradients of exactly what requires them, for a loss scaled by 3 before backward:
    head and hidden both, the head alone (the hidden states frozen, as when only the output head
    is fine-tuned), the hidden states alone; and bf16 hidden states get a bf16 gradient. Each
    gradient equals float64 autograd of mean cross-entropy over the logits written out here.

    Observations: cases, errors, worst_relative_error (over the gradients that should exist),
    missing_or_extra (a gradient absent where it should be, or present where it should not),
    wrong_dtypes."""
    from pvlab.runtime import kernels

    torch_device(device)
    hidden0, weight0 = randn((2, 6, 16), seed=seed), randn((40, 16), seed=seed + 1, scale=0.3)
    targets = torch.randint(0, 40, (2, 6), generator=generator(seed + 2))
    targets[0, :2] = kernels.IGNORE_INDEX
    want_hidden, want_weight = hidden0.double().requires_grad_(), weight0.double().requires_grad_()
    logits = want_hidden @ want_weight.t()
    (3 * F.cross_entropy(logits.reshape(-1, 40), targets.reshape(-1), ignore_index=kernels.IGNORE_INDEX)).backward()
    errors = missing_or_extra = wrong_dtypes = 0
    worst = 0.0
    cases = [(True, True, torch.float32), (False, True, torch.float32), (True, False, torch.float32),
             (True, True, torch.bfloat16)]
    for hidden_grad, weight_grad, dtype in cases:
        hidden = hidden0.to(dtype).clone().requires_grad_(hidden_grad)
        weight = weight0.clone().requires_grad_(weight_grad)
        try:
            (3 * kernels.chunked_linear_cross_entropy(hidden, weight, targets, chunk_tokens=5,
                                                      compute_dtype=torch.float32)).backward()
        except Exception:  # noqa: BLE001 - a backward that raises trains nothing
            errors += 1
            continue
        for tensor, wanted, want in ((hidden, hidden_grad, want_hidden.grad), (weight, weight_grad, want_weight.grad)):
            if (tensor.grad is not None) != wanted:
                missing_or_extra += 1
            elif wanted:
                wrong_dtypes += int(tensor.grad.dtype != tensor.dtype)
                worst = max(worst, float((tensor.grad.double() - want).abs().max() / want.abs().max()))
    return {"cases": len(cases), "errors": errors, "worst_relative_error": worst,
            "missing_or_extra": missing_or_extra, "wrong_dtypes": wrong_dtypes}
