"""Performance claims, measured honestly (pvlab.falsifiers.throughput.measure: warm-up, steady-state
windows, median of >= 5 repeats, spread recorded; a spread too large for the claim is ERROR).

A speed claim holds for one kind of GPU: a check that names `gpu` raises DeviceUnavailable (SKIP,
never a discharge) on any other, and every record names the GPU it ran on (device_name), so a
figure measured on an H100 never stands as evidence for an A100.

The models are the runtime's presets with random weights (seed 0): speed does not depend on what
the weights say, and no checkpoint has to be trained first.
"""

from __future__ import annotations

import torch

from . import throughput
from ._util import device_unavailable, torch_device


def _gpu_named(device: str, gpu: str | None) -> str:
    """The CUDA device's name; DeviceUnavailable when there is none or it is not the `gpu` the claim is about."""
    if not device.startswith("cuda"):
        raise device_unavailable(f"a GPU speed claim: nothing to measure on {device}")
    dev = torch_device(device)
    name = torch.cuda.get_device_name(dev)
    if gpu is not None and gpu not in name:
        raise device_unavailable(f"this claim is about a {gpu}; this machine's GPU is a {name}, so a figure "
                                 "measured here would not be evidence for it")
    return name


def _model(config: str, device: str, path: str):
    from pvlab import runtime

    return runtime.init_model(config=config, weights="random", seed=0, device=device, path=path)


def _decode_rate(model, *, prompt_tokens: int, new_tokens: int, repeats: int, max_spread: float,
                 sync, what: str, use_graph: bool | None = None) -> throughput.Throughput:
    from pvlab import runtime

    prompt = torch.randint(0, model.config.vocab_size, (prompt_tokens,), generator=torch.Generator().manual_seed(0))

    def decode() -> None:
        produced = runtime.generate(model, prompt.tolist(), max_new_tokens=new_tokens, use_graph=use_graph).new_ids
        if len(produced) != new_tokens:  # an early stop would make the rate meaningless
            raise RuntimeError(f"{what}: generate() gave {len(produced)} tokens, asked for {new_tokens}")

    return throughput.measure(decode, units_per_step=new_tokens, warmup=1, repeats=repeats,
                              synchronize=sync, max_spread=max_spread, what=what)


def _counting(module_name: str, attribute: str, counts=None):
    """A context manager: while its block runs, `module_name.attribute` is wrapped and the list
    it yields gets one entry per call for which `counts(*args, **kwargs)` holds (every call by
    default); the original is put back when the block ends, even if it raises. The runtime looks
    these functions up at call time, so the wrapper sees every call the measurement makes."""
    import contextlib
    import importlib

    module = importlib.import_module(module_name)
    counts = counts or (lambda *args, **kwargs: True)

    @contextlib.contextmanager
    def counting():
        original, calls = getattr(module, attribute), []

        def counted(*args, **kwargs):
            if counts(*args, **kwargs):
                calls.append(1)
            return original(*args, **kwargs)

        setattr(module, attribute, counted)
        try:
            yield calls
        finally:
            setattr(module, attribute, original)

    return counting()


def graph_decoder_calls():
    """Counts the CUDA-graph decoder's calls (runtime.generate reaches it as
    `graph_decode.greedy_generate`, looked up when it decodes)."""
    return _counting("pvlab.runtime.graph_decode", "greedy_generate")


def cuda_generate_calls():
    """Counts runtime.generate calls on a model that lives on a CUDA device (_decode_rate calls it
    as `runtime.generate`, the package's attribute; the CPU side's calls are not counted)."""
    return _counting("pvlab.runtime", "generate", lambda model, *args, **kwargs: model.device.type == "cuda")


def decode_speed_vs_cpu(*, device: str, config: str = "qwen2-0.5b", prompt_tokens: int = 32,
                        new_tokens: int = 32, repeats: int = 5, max_spread: float = 0.3,
                        gpu: str | None = None, use_graph: bool | None = None) -> dict:
    """Greedy decoding with the KV cache through runtime.generate, the same model (random weights,
    seed 0) on the CPU (its default fp32 reference path) and on the GPU (its default bf16 fast
    path; use_graph as runtime.generate takes it: None its default, the CUDA-graph decoder;
    False the eager loop, launch-bound).

    The decoder that ran is observed, not inferred from use_graph: the GPU measurement runs with
    two counters in place (wrappers around functions the runtime looks up at call time, restored
    afterwards). Inferring it let the planted bug generate_decodes_eagerly (runtime.generate's
    default switched off) record "graph" while the eager loop ran.

    Observations: cuda_tokens_per_s, cpu_tokens_per_s (medians), speedup (their ratio),
    cuda_spread, cpu_spread, new_tokens; cuda_decodes (runtime.generate calls on the GPU, warm-up
    included), graph_decodes (calls of the CUDA-graph decoder among them) and cuda_decoder
    ("graph" when every GPU decode went through it, "eager" when none did, else "mixed"). The bug
    hunt's GPU decode was 7.4x slower than the CPU."""
    _gpu_named(device, gpu)
    cpu_model = _model(config, "cpu", "reference")
    cpu = _decode_rate(cpu_model, prompt_tokens=prompt_tokens, new_tokens=new_tokens, repeats=repeats,
                       max_spread=max_spread, sync=None, what="cpu greedy decode")
    del cpu_model
    gpu_model = _model(config, device, "fast")
    with cuda_generate_calls() as decodes, graph_decoder_calls() as graphed:
        cuda = _decode_rate(gpu_model, prompt_tokens=prompt_tokens, new_tokens=new_tokens, repeats=repeats,
                            max_spread=max_spread, sync=torch.cuda.synchronize, what="cuda greedy decode",
                            use_graph=use_graph)
    return {"cuda_tokens_per_s": cuda.median, "cpu_tokens_per_s": cpu.median, "speedup": cuda.median / cpu.median,
            "cuda_spread": cuda.spread, "cpu_spread": cpu.spread, "new_tokens": new_tokens,
            "cuda_decodes": len(decodes), "graph_decodes": len(graphed),
            "cuda_decoder": ("graph" if decodes and len(graphed) == len(decodes) else "eager" if not graphed
                             else "mixed")}


def decode_feeds_one_token_per_step(*, device: str, config: str = "tiny", prompt_tokens: int = 16,
                                    new_tokens: int = 8) -> dict:
    """What greedy decoding with the KV cache asks of the decoder, counted (not timed): a forward
    pre-hook on the decoder body records how many positions each call feeds. With the cache,
    the first call feeds the prompt and every later call one new token; without it, every call
    recomputes the whole prefix and the cost of a token grows with the text. (A speed ratio
    against the CPU would not show this: recomputing a short prefix costs a launch-bound GPU
    almost nothing and the CPU a lot.)

    Observations: decoder_calls, prompt_positions (the first call), positions_per_new_token_max
    (the most any later call fed), positions_total, new_tokens."""
    from pvlab import runtime
    from pvlab.runtime import devices

    model = _model(config, device, devices.default_path(torch_device(device)))
    fed: list[int] = []
    hook = model.model.register_forward_pre_hook(lambda module, args: fed.append(int(args[0].shape[-1])))
    try:
        prompt = torch.randint(0, model.config.vocab_size, (prompt_tokens,), generator=torch.Generator().manual_seed(0))
        # The eager decoder: it is the one that feeds the decoder per token (the CUDA-graph
        # decoder replays a recorded step, which no hook sees).
        produced = runtime.generate(model, prompt.tolist(), max_new_tokens=new_tokens, use_graph=False).new_ids
    finally:
        hook.remove()
    if len(produced) != new_tokens or not fed:
        raise RuntimeError(f"generate() gave {len(produced)} tokens in {len(fed)} decoder calls, asked for {new_tokens}")
    return {"decoder_calls": len(fed), "prompt_positions": fed[0],
            "positions_per_new_token_max": max(fed[1:], default=0), "positions_total": sum(fed),
            "new_tokens": new_tokens}


def _training_rate(device: str, config: str, path: str, *, batch: int, seq: int, repeats: int,
                   max_spread: float, what: str) -> tuple[throughput.Throughput, object]:
    from pvlab import runtime

    model = _model(config, device, path)
    throughput.warm_up_gpu(model.device)   # a GPU fresh from idle gave this check a 22 % spread
    trainer = runtime.Trainer(model, lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95), grad_clip=1.0)
    generator = torch.Generator().manual_seed(0)
    batches = [runtime.LMBatch.from_sequences(torch.randint(0, model.config.vocab_size, (batch, seq + 1),
                                                            generator=generator)).to(model.device)
               for _ in range(2)]
    state = {"i": 0}

    def step() -> None:
        trainer.train_batch(batches[state["i"] % 2])
        state["i"] += 1

    sync = torch.cuda.synchronize if model.device.type == "cuda" else None
    rate = throughput.measure(step, units_per_step=batch * seq, warmup=5, repeats=repeats, min_window_s=2.0,
                              synchronize=sync, max_spread=max_spread, what=what)
    return rate, model


def training_mfu(*, device: str, gpu: str, config: str = "qwen2-0.5b", batch: int = 8, seq: int = 1024,
                 repeats: int = 5, max_spread: float = 0.15) -> dict:
    """Training throughput of the fast path on a named GPU, as model FLOPs utilisation against
    the GPU's dense bf16 peak (throughput.DENSE_BF16_PEAK; 6N + 12·L·d·T FLOPs per token).

    Observations: mfu, tokens_per_s, spread, peak_tflops."""
    name = _gpu_named(device, gpu)
    peak = throughput.dense_bf16_peak(name)
    if peak is None:
        raise ValueError(f"no dense bf16 peak is recorded for {name!r}: add it to throughput.DENSE_BF16_PEAK "
                         "from the vendor's data sheet before claiming an MFU on it")
    rate, model = _training_rate(device, config, "fast", batch=batch, seq=seq, repeats=repeats,
                                 max_spread=max_spread, what="fast-path training tokens/s")
    flops = throughput.training_flops_per_token(parameters=model.num_parameters(),
                                                layers=model.config.num_hidden_layers,
                                                hidden=model.config.hidden_size, seq_len=seq)
    return {"mfu": rate.median * flops / peak, "tokens_per_s": rate.median, "spread": rate.spread,
            "peak_tflops": peak / 1e12}


def fast_vs_reference_training(*, device: str, config: str = "qwen2-0.5b", batch: int = 4, seq: int = 512,
                               repeats: int = 5, max_spread: float = 0.15, gpu: str | None = None) -> dict:
    """Training tokens/s of the fast path (bf16 autocast, SDPA, chunked CE) and of the fp32
    reference path, same model, same batches, same device.

    Observations: fast_tokens_per_s, reference_tokens_per_s, ratio (fast / reference), fast_spread,
    reference_spread."""
    _gpu_named(device, gpu)
    fast, model = _training_rate(device, config, "fast", batch=batch, seq=seq, repeats=repeats,
                                 max_spread=max_spread, what="fast-path training tokens/s")
    del model
    torch.cuda.empty_cache()
    reference, model = _training_rate(device, config, "reference", batch=batch, seq=seq, repeats=repeats,
                                      max_spread=max_spread, what="reference-path training tokens/s")
    return {"fast_tokens_per_s": fast.median, "reference_tokens_per_s": reference.median,
            "ratio": fast.median / reference.median, "fast_spread": fast.spread,
            "reference_spread": reference.spread}
