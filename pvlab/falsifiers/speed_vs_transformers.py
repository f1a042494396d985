"""The runtime's training and eval throughput against transformers at its strongest, in one process.

The oracle is a second implementation measured beside the runtime: transformers (SDPA
attention) opening the very directory the runtime wrote, so both start from identical fp32
weights, stepping through the same batches with the same recipe — bf16 autocast over fp32 master
weights, AdamW (fused on CUDA) with decay on matrices only, clipping at global norm 1.0 — and
both handing each step's loss to the host as a float (Trainer.train_batch / eval_batch return
it; the transformers steps call .item()), so both pay one synchronisation per step.

transformers is measured the ways a user who wants speed would run it (PEERS):
  * "eager":   the model as from_pretrained gives it;
  * "compile": the same plus the one line `model = torch.compile(model)`;
  * "liger":   Liger kernels applied to the model (liger_kernel's Triton RMSNorm, RoPE, SwiGLU
               and fused linear cross-entropy; the loss goes through the model's `labels=` so the
               fused loss runs), where liger_kernel imports and the device is CUDA; otherwise its
               row says why it is not available — never silently left out.
The runtime is compared with the strongest peer for each figure: the highest train tokens/s,
the highest eval tokens/s — each named in the observations; its training peak memory with the
peak of that strongest training peer (the configuration a user who wants speed runs instead),
and, recorded beside it, with the lowest peak of any peer.

Each rate is throughput.measure's median of >= `repeats` timed windows after a warm-up; peak
memory is torch.cuda.max_memory_allocated() of each configuration alone (the others freed
first, and whatever they left allocated subtracted and reported). bench/bench_vs_hf.py prints the same measurement as a table.
"""

from __future__ import annotations

import gc
import importlib
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from . import throughput
from .performance import _gpu_named

PEERS = ("eager", "compile", "liger")
PEER_LABELS = {"eager": "transformers, eager", "compile": "transformers + torch.compile",
               "liger": "transformers + Liger kernels"}


def make_batches(vocab: int, batch: int, seq: int, count: int = 4) -> list:
    """`count` LMBatches of random token ids (seed 0): (batch, seq) inputs and their next tokens."""
    from pvlab.runtime.data import LMBatch

    generator = torch.Generator().manual_seed(0)
    return [LMBatch.from_sequences(torch.randint(0, vocab, (batch, seq + 1), generator=generator))
            for _ in range(count)]


# ---- the runtime's configurations ---------------------------------------------------------------

@dataclass(frozen=True)
class RuntimeVariant:
    """One configuration of the runtime's fast path, written as a spec: a compile scope, then
    options joined by '+': "eager", "model", "model+fused", "model+fused+graph",
    "model+fused+mode=reduce-overhead", "layers+attn=cudnn". ("none" is "eager".)

    scope: Trainer(compile=...) — eager, layers (each decoder layer) or model (the decoder body);
    fused: CausalLM.set_fused_projections(True) — Q/K/V and gate/up as one product each;
    graph: step_graph.GraphedTrainer — the training step (and the eval step) replayed as one CUDA graph;
    master: master_weights.MasterWeightTrainer — the decoder's matrices in bf16 with fp32 master weights;
    chunk: CausalLM.loss_chunk_tokens — tokens per chunk of the fused loss (default: ~512 MiB of
           fp32 logits a chunk, kernels.default_loss_chunk_tokens);
    mode:  Trainer(compile_mode=...) — torch.compile's mode for the compiled scope;
    attn:  Trainer(attention_backend=...) — the SDPA kernel (flash, efficient, cudnn, math)."""

    scope: str = "eager"
    fused: bool = False
    mode: str | None = None
    attention: str | None = None
    graph: bool = False
    chunk: int | None = None
    master: bool = False

    @classmethod
    def parse(cls, spec: str) -> "RuntimeVariant":
        from pvlab.runtime.trainer import COMPILE_MODES

        tokens = [t.strip() for t in spec.strip().split("+")]
        scope = {"none": "eager"}.get(tokens[0], tokens[0])
        if scope not in ("eager", "layers", "model"):
            raise ValueError(f"runtime variant {spec!r}: starts with eager, layers or model, not {tokens[0]!r}")
        fused, mode, attention, graph, chunk, master = False, None, None, False, None, False
        for token in tokens[1:]:
            key, _, value = token.partition("=")
            if token == "fused":
                fused = True
            elif token == "graph":
                graph = True
            elif token == "master":
                master = True
            elif key == "mode" and value in COMPILE_MODES and value:
                mode = value
            elif key == "attn" and value:
                attention = value
            elif key == "chunk" and value.isdigit() and int(value) > 0:
                chunk = int(value)
            else:
                raise ValueError(f"runtime variant {spec!r}: unknown option {token!r} (fused, graph, master, chunk=<tokens>, "
                                 f"mode=<{'|'.join(m for m in COMPILE_MODES if m)}>, attn=<backend>)")
        if mode is not None and scope == "eager":
            raise ValueError(f"runtime variant {spec!r}: a compile mode needs a compiled scope (layers or model)")
        return cls(scope, fused, mode, attention, graph, chunk, master)

    def spec(self) -> str:
        parts = [self.scope] + (["fused"] if self.fused else []) + (["graph"] if self.graph else [])
        parts += [f"mode={self.mode}"] if self.mode else []
        parts += [f"attn={self.attention}"] if self.attention else []
        parts += [f"chunk={self.chunk}"] if self.chunk else []
        parts += ["master"] if self.master else []
        return "+".join(parts)

    def label(self) -> str:
        words = {"eager": "runtime, eager", "layers": "runtime + per-layer compile",
                 "model": "runtime + whole-model compile"}[self.scope]
        if self.fused:
            words += ", fused projections"
        if self.graph:
            words += ", step as one CUDA graph"
        if self.mode:
            words += f", mode {self.mode}"
        if self.attention:
            words += f", {self.attention} attention"
        if self.chunk:
            words += f", loss chunks of {self.chunk} tokens"
        if self.master:
            words += ", bf16 weights with fp32 masters"
        return words


def runtime_steps(directory: Path, device: torch.device, batches: list, variant: RuntimeVariant | str = "model"):
    """(train_step, eval_step, owner) for the runtime's fast path (Trainer) in one configuration
    (a RuntimeVariant or its spec; the old compile scopes "none", "layers", "model" still work)."""
    from pvlab import runtime

    if isinstance(variant, str):
        variant = RuntimeVariant.parse(variant)
    model = runtime.load(directory, device=device, path="fast")
    model.set_fused_projections(variant.fused)
    if variant.chunk:
        model.loss_chunk_tokens = variant.chunk
    kind = runtime.Trainer
    if variant.graph and variant.master:
        from pvlab.runtime.master_weights import GraphedMasterTrainer as kind
    elif variant.graph:
        from pvlab.runtime.step_graph import GraphedTrainer as kind
    elif variant.master:
        from pvlab.runtime.master_weights import MasterWeightTrainer as kind
    trainer = kind(model, lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95), grad_clip=1.0,
                   compile=False if variant.scope == "eager" else variant.scope,
                   compile_mode=variant.mode, attention_backend=variant.attention)
    gpu = [b.to(device) for b in batches]
    state = {"i": 0}

    def train_step() -> float:
        state["i"] += 1
        return trainer.train_batch(gpu[(state["i"] - 1) % len(gpu)])

    def eval_step() -> float:
        state["i"] += 1
        return trainer.eval_batch(gpu[(state["i"] - 1) % len(gpu)])

    return train_step, eval_step, (model, trainer, gpu)


# ---- transformers, the ways people run it ------------------------------------------------------

def liger_unavailable(device: torch.device) -> str | None:
    """Why the Liger peer cannot run here (None: it can)."""
    if device.type != "cuda":
        return f"Liger's kernels are Triton kernels for CUDA; this run is on {device.type}"
    try:
        importlib.import_module("liger_kernel.transformers")
    except Exception as error:  # noqa: BLE001 - an ImportError, or a broken install: either way, not available
        return f"liger_kernel does not import ({type(error).__name__}: {error})"
    return None


def _apply_liger(model) -> None:
    """Liger's kernels on this transformers model instance (by its model_type)."""
    liger = importlib.import_module("liger_kernel.transformers")
    model_type = model.config.model_type
    apply = getattr(liger, f"apply_liger_kernel_to_{model_type}", None)
    if apply is None:
        raise RuntimeError(f"liger_kernel {getattr(liger, '__version__', '')} has no kernels for {model_type}")
    apply(rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=True, model=model)


def _hf_labels(targets: torch.Tensor) -> torch.Tensor:
    """Labels a transformers model shifts itself: position t+1 holds the target of position t.
    The last position's target has no slot, so this scores T-1 of T positions (a little less
    work for the peer, never more)."""
    from pvlab.runtime.kernels import IGNORE_INDEX

    labels = torch.full_like(targets, IGNORE_INDEX)
    labels[:, 1:] = targets[:, :-1]
    return labels


def transformers_steps(directory: Path, device: torch.device, batches: list, peer: str = "eager"):
    """(train_step, eval_step, owner) for transformers on `batches` with the recipe above, as
    `peer` (PEERS); keep `owner` alive while stepping and delete it to free the model."""
    from transformers import AutoModelForCausalLM

    from pvlab.runtime.kernels import IGNORE_INDEX

    if peer not in PEERS:
        raise ValueError(f"peer must be one of {PEERS}, got {peer!r}")
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                 attn_implementation="sdpa").to(device)
    model.train()
    if peer == "liger":
        _apply_liger(model)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=3e-4, betas=(0.9, 0.95), fused=device.type == "cuda")
    forward = torch.compile(model) if peer == "compile" else model   # the one line a user would write
    gpu = [b.to(device) for b in batches]
    labels = [_hf_labels(b.targets) for b in gpu]
    state = {"i": 0}

    def next_index() -> int:
        state["i"] += 1
        return (state["i"] - 1) % len(gpu)

    def loss_of_logits(i: int) -> torch.Tensor:
        logits = forward(input_ids=gpu[i].inputs).logits
        return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), gpu[i].targets.flatten(),
                                                 ignore_index=IGNORE_INDEX)

    def train_step() -> float:
        i = next_index()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            if peer == "liger":  # the fused linear cross-entropy runs inside the model, from labels
                loss = forward(input_ids=gpu[i].inputs, labels=labels[i]).loss
            else:
                loss = loss_of_logits(i)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    def eval_step() -> float:
        i = next_index()
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_of_logits(i)
        return loss.item()

    return train_step, eval_step, (model, forward, optimizer, gpu)


# ---- measuring ---------------------------------------------------------------------------------

def measure_side(steps, device: torch.device, tokens_per_step: int, *, what: str, warmup: int = 3,
                 repeats: int = 5, min_window_s: float = 2.0, max_spread: float = 0.25,
                 resident_before: float = 0.0) -> dict:
    """Train and eval tokens/s (median, spread) and the training peak memory (GiB) of one side.

    peak_gib is the side's own: torch.cuda.max_memory_allocated() while training, less
    `resident_before` (GiB allocated before the side was built: anything an earlier
    configuration left behind is not this side's); the raw figure is kept as peak_allocated_gib."""
    train_step, eval_step, _owner = steps
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    timing = dict(warmup=warmup, repeats=repeats, synchronize=torch.cuda.synchronize if cuda else None,
                  min_window_s=min_window_s, max_spread=max_spread)
    train = throughput.measure(train_step, units_per_step=tokens_per_step, what=f"{what} training tokens/s", **timing)
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
    evaluation = throughput.measure(eval_step, units_per_step=tokens_per_step, what=f"{what} eval tokens/s", **timing)
    return {"train_tok_s": train.median, "train_spread": train.spread, "eval_tok_s": evaluation.median,
            "eval_spread": evaluation.spread, "peak_gib": peak - resident_before, "peak_allocated_gib": peak,
            "resident_before_gib": resident_before, "train_windows": list(train.repeats),
            "eval_windows": list(evaluation.repeats)}


def allocated_gib(device: torch.device) -> float:
    """GiB the caching allocator holds for live tensors now (after a collection); 0 off CUDA."""
    if device.type != "cuda":
        return 0.0
    gc.collect()
    torch.cuda.synchronize(device)
    return torch.cuda.memory_allocated(device) / 2**30


def release(device: torch.device) -> dict:
    """Free what a configuration built before the next one is measured: its Python objects
    (reference cycles included), torch.compile's in-memory caches (compiled code and guards can
    keep a model's tensors reachable) and the allocator's cached blocks. Returns the GiB still
    allocated after the collection and after the reset (0 off CUDA): what a configuration left
    behind is reported, not only subtracted."""
    left_after_collection = allocated_gib(device)
    torch._dynamo.reset()
    left_after_reset = allocated_gib(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"left_after_collection_gib": left_after_collection, "left_after_reset_gib": left_after_reset}


def _measured_alone(build, device: torch.device, what: str, tokens_per_step: int, **timing) -> dict:
    """Build one configuration (`build()` -> its steps), measure it, free it; its figures with what
    was allocated before it and what it left behind."""
    resident = allocated_gib(device)
    steps = build()
    try:
        figures = measure_side(steps, device, tokens_per_step, what=what, resident_before=resident, **timing)
    finally:
        del steps
        left = release(device)
    return {**figures, **left}


def measure_peer(directory: Path, device: torch.device, batches: list, peer: str, **timing) -> dict:
    """One peer's figures, or {"unavailable": why} for a peer that cannot run here.

    A peer's windows are kept however far they spread (`max_spread` is not applied here): whether
    an unsteady peer spoils the comparison depends on the other peers, and `strongest` decides it."""
    if peer == "liger":
        why = liger_unavailable(device)
        if why is not None:
            return {"unavailable": why}
    timing = {**timing, "max_spread": math.inf}
    try:
        return _measured_alone(lambda: transformers_steps(directory, device, batches, peer), device,
                               PEER_LABELS[peer], batches[0].num_target_tokens, **timing)
    except Exception as error:  # noqa: BLE001
        if peer != "liger":
            raise
        # A third-party patch set that breaks on this transformers is reported, not hidden.
        release(device)
        return {"unavailable": f"Liger kernels failed here ({type(error).__name__}: {str(error)[:300]})"}


def measure_runtime(directory: Path, device: torch.device, batches: list, variant: RuntimeVariant, **timing) -> dict:
    return _measured_alone(lambda: runtime_steps(directory, device, batches, variant), device,
                           variant.label(), batches[0].num_target_tokens, **timing)


def strongest(peers: dict[str, dict], max_spread: float = math.inf) -> dict[str, str]:
    """Which measured peer is strongest for each figure: train and eval tokens/s (highest, among
    the peers measured steadily: see fastest_steady), training peak memory (lowest; only where it
    was measured, i.e. on CUDA)."""
    measured = {name: figures for name, figures in peers.items() if "unavailable" not in figures}
    if not measured:
        raise ValueError("no transformers configuration could be measured")
    best = {figure: fastest_steady(measured, figure, max_spread)[0] for figure in ("train", "eval")}
    with_memory = {n: f for n, f in measured.items() if not math.isnan(f["peak_gib"])}
    best["memory"] = min(with_memory, key=lambda n: with_memory[n]["peak_gib"]) if with_memory else best["train"]
    return best


def fastest_steady(measured: dict[str, dict], figure: str, max_spread: float) -> tuple[str, list[str]]:
    """The peer with the highest median `figure` ("train" or "eval") tokens/s among those whose
    windows spread no more than `max_spread`, and the unsteady peers it outpaced.

    An unsteady peer's median is no figure to compare with, but it can still be ruled out: when
    even its fastest window is slower than the slowest window of the fastest steady peer, it is
    not the strongest however the noise fell (noise on a busy GPU slows windows; it does not
    speed one past what the configuration can do). Any other unsteady peer leaves the question
    open, and the comparison is not judged: UnstableMeasurement (an ERROR, never a verdict). On
    an H200, transformers eager's and Liger's eval windows spread 25-30 % in runs where
    torch.compile's, the strongest, spread under 10 %: the check refused to judge a comparison
    those peers could not win."""
    def spread(name: str) -> float:
        return measured[name][f"{figure}_spread"]

    unsteady = [] if max_spread == math.inf else [name for name in measured if spread(name) > max_spread]
    steady = [name for name in measured if name not in unsteady]
    best = max(steady, key=lambda n: measured[n][f"{figure}_tok_s"]) if steady else None
    for name in unsteady:
        windows = measured[name].get(f"{figure}_windows") or [math.inf]
        floor = min(measured[best].get(f"{figure}_windows") or [measured[best][f"{figure}_tok_s"]]) if best else None
        if best is None or max(windows) >= floor:
            shown = ", ".join(f"{w:.4g}" for w in windows)
            raise throughput.UnstableMeasurement(
                f"{PEER_LABELS.get(name, name)} {figure} tokens/s: the windows range over {spread(name):.0%} of "
                f"their median ({shown} per s), more than the {max_spread:.0%} the claim allows, and "
                + ("no peer was measured steadily" if best is None else
                   f"its fastest window is not below the slowest of {PEER_LABELS.get(best, best)} "
                   f"({floor:.4g} per s), so it may be the strongest")
                + " — re-run on a quiet machine")
    return best, unsteady


def mfu(train_tok_s: float, *, parameters: int, config, seq: int, device_name: str) -> float:
    """Model FLOPs utilisation of a training rate against the GPU's dense bf16 peak (nan where the
    peak is not known)."""
    peak = throughput.dense_bf16_peak(device_name)
    if peak is None:
        return float("nan")
    flops = throughput.training_flops_per_token(parameters=parameters, layers=config.num_hidden_layers,
                                                hidden=config.hidden_size, seq_len=seq)
    return train_tok_s * flops / peak


def compare(*, device: torch.device, device_name: str, config: str, batch: int, seq: int, runtime: str,
            peers: str, **timing) -> dict:
    """The runtime (`runtime`: a RuntimeVariant spec) against every peer of `peers` (comma-separated
    PEERS), each measured alone in this process; the observations of FALSIFY-PERF-HF-001."""
    from pvlab import runtime as rt

    variant = RuntimeVariant.parse(runtime)
    names = [p.strip() for p in peers.split(",") if p.strip()]
    unknown = [p for p in names if p not in PEERS]
    if unknown or not names:
        raise ValueError(f"peers must be a comma-separated subset of {PEERS}, got {peers!r}")
    model_config = rt.preset(config)
    batches = make_batches(model_config.vocab_size, batch, seq)
    with tempfile.TemporaryDirectory() as tmp:
        model = rt.init_model(config=model_config, weights="random", seed=0, device="cpu")
        parameters = model.num_parameters()
        rt.save_checkpoint(model, tmp)
        del model
        throughput.warm_up_gpu(device)
        measured = {peer: measure_peer(Path(tmp), device, batches, peer, **timing) for peer in names}
        ours = measure_runtime(Path(tmp), device, batches, variant, **timing)
    max_spread = timing.get("max_spread", math.inf)
    best = strongest(measured, max_spread)
    outpaced = [f"{peer} {figure}" for figure in ("train", "eval")
                for peer in fastest_steady({n: f for n, f in measured.items() if "unavailable" not in f},
                                           figure, max_spread)[1]]
    observations = {
        "train_ratio": ours["train_tok_s"] / measured[best["train"]]["train_tok_s"],
        "eval_ratio": ours["eval_tok_s"] / measured[best["eval"]]["eval_tok_s"],
        # The memory target is against the peer the speed claim is against (the configuration a
        # user picks for speed); the leanest peer's ratio is recorded beside it.
        "memory_ratio": ours["peak_gib"] / measured[best["train"]]["peak_gib"],
        "memory_ratio_to_leanest": ours["peak_gib"] / measured[best["memory"]]["peak_gib"],
        "mfu": mfu(ours["train_tok_s"], parameters=parameters, config=model_config, seq=seq, device_name=device_name),
        "strongest_train_peer": best["train"], "strongest_eval_peer": best["eval"],
        "leanest_memory_peer": best["memory"], "runtime_variant": variant.spec(),
        # Peers whose windows spread past max_spread, left out of a figure they could not win.
        "outpaced_unsteady_peers": ", ".join(outpaced),
    }
    observations.update({f"runtime_{key}": value for key, value in ours.items()})
    for peer, figures in measured.items():
        observations.update({f"transformers_{peer}_{key}": value for key, value in figures.items()})
    return observations


def training_and_eval_vs_transformers(*, device: str, gpu: str, config: str = "qwen2-0.5b", batch: int = 8,
                                      seq: int = 1024, runtime: str = "model", peers: str = "eager,compile,liger",
                                      repeats: int = 5, min_window_s: float = 2.0, max_spread: float = 0.25) -> dict:
    """The runtime's fast path (`runtime`: a RuntimeVariant spec) against transformers at its
    strongest (`peers`), on a named GPU.

    Observations: train_ratio, eval_ratio (runtime tokens/s over the strongest peer's),
    memory_ratio (runtime training peak over the strongest training peer's: the configuration
    the speed claim is against), memory_ratio_to_leanest (over the lowest peak of any peer), mfu (the runtime's training
    model-FLOPs utilisation), strongest_train_peer / strongest_eval_peer / leanest_memory_peer
    (which peer each ratio is against), runtime_variant, and every side's tokens/s, spreads and
    peaks (transformers_<peer>_unavailable: why a peer could not run)."""
    name = _gpu_named(device, gpu)
    from pvlab import runtime as rt

    return compare(device=rt.resolve_device(device), device_name=name, config=config, batch=batch, seq=seq,
                   runtime=runtime, peers=peers, repeats=repeats, min_window_s=min_window_s, max_spread=max_spread)
