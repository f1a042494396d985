"""The runtime's training and eval throughput against transformers, in one process.

The oracle is a second implementation measured beside the runtime: transformers (SDPA
attention) opening the very directory the runtime wrote, so both start from identical fp32
weights, stepping through the same batches with the same recipe — bf16 autocast over fp32 master
weights, AdamW (fused on CUDA) with decay on matrices only, clipping at global norm 1.0 — and
both handing each step's loss to the host as a float (Trainer.train_batch / eval_batch return
it; the transformers steps call .item()), so both pay one synchronisation per step and produce
the same result. Each rate is throughput.measure's median of >= 5 timed windows after a warm-up;
peak memory is torch.cuda.max_memory_allocated() of each side alone (the other side is freed
first). bench/bench_vs_hf.py prints the same measurement as a table.
"""

from __future__ import annotations

import gc
import tempfile
from pathlib import Path

import torch

from . import throughput
from .performance import _gpu_named


def make_batches(vocab: int, batch: int, seq: int, count: int = 4) -> list:
    """`count` LMBatches of random token ids (seed 0): (batch, seq) inputs and their next tokens."""
    from pvlab.runtime.data import LMBatch

    generator = torch.Generator().manual_seed(0)
    return [LMBatch.from_sequences(torch.randint(0, vocab, (batch, seq + 1), generator=generator))
            for _ in range(count)]


def transformers_steps(directory: Path, device: torch.device, batches: list):
    """(train_step, eval_step, owner) for transformers on `batches` with the recipe above; keep
    `owner` alive while stepping and delete it to free the model."""
    from transformers import AutoModelForCausalLM

    from pvlab.runtime.kernels import IGNORE_INDEX

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                 attn_implementation="sdpa").to(device)
    model.train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=3e-4, betas=(0.9, 0.95), fused=device.type == "cuda")
    gpu = [b.to(device) for b in batches]
    state = {"i": 0}

    def next_batch():
        state["i"] += 1
        return gpu[(state["i"] - 1) % len(gpu)]

    def train_step() -> float:
        b = next_batch()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(input_ids=b.inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), b.targets.flatten(),
                                                 ignore_index=IGNORE_INDEX)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    def eval_step() -> float:
        b = next_batch()
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(input_ids=b.inputs).logits
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), b.targets.flatten(),
                                                     ignore_index=IGNORE_INDEX)
        return loss.item()

    return train_step, eval_step, (model, optimizer, gpu)


def runtime_steps(directory: Path, device: torch.device, batches: list, compile_scope: str):
    """(train_step, eval_step, owner) for the runtime's fast path (Trainer), compiled per scope
    ("none", "layers" or "model")."""
    from pvlab import runtime

    model = runtime.load(directory, device=device, path="fast")
    trainer = runtime.Trainer(model, lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95), grad_clip=1.0,
                              compile=False if compile_scope == "none" else compile_scope)
    gpu = [b.to(device) for b in batches]
    state = {"i": 0}

    def train_step() -> float:
        state["i"] += 1
        return trainer.train_batch(gpu[(state["i"] - 1) % len(gpu)])

    def eval_step() -> float:
        state["i"] += 1
        return trainer.eval_batch(gpu[(state["i"] - 1) % len(gpu)])

    return train_step, eval_step, (model, trainer, gpu)


def measure_side(steps, device: torch.device, tokens_per_step: int, *, what: str, warmup: int = 3,
                 repeats: int = 5, min_window_s: float = 2.0, max_spread: float = 0.25) -> dict:
    """Train and eval tokens/s (median, spread) and the training peak memory (GiB) of one side."""
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
            "eval_spread": evaluation.spread, "peak_gib": peak}


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def training_and_eval_vs_transformers(*, device: str, gpu: str, config: str = "qwen2-0.5b", batch: int = 8,
                                      seq: int = 1024, compile: str = "model", repeats: int = 5,
                                      min_window_s: float = 2.0, max_spread: float = 0.25) -> dict:
    """Runtime fast path (Trainer, `compile` scope) against transformers on a named GPU.

    Observations: train_ratio, eval_ratio (runtime tokens/s over transformers'), memory_ratio
    (runtime training peak over transformers'), each side's tokens/s, spreads and peaks."""
    from pvlab import runtime

    _gpu_named(device, gpu)
    target = runtime.resolve_device(device)
    model_config = runtime.preset(config)
    batches = make_batches(model_config.vocab_size, batch, seq)
    tokens = batches[0].num_target_tokens
    timing = dict(repeats=repeats, min_window_s=min_window_s, max_spread=max_spread)
    with tempfile.TemporaryDirectory() as tmp:
        model = runtime.init_model(config=model_config, weights="random", seed=0, device="cpu")
        runtime.save_checkpoint(model, tmp)
        del model
        steps = transformers_steps(Path(tmp), target, batches)
        reference = measure_side(steps, target, tokens, what="transformers", **timing)
        del steps
        release(target)
        steps = runtime_steps(Path(tmp), target, batches, compile)
        ours = measure_side(steps, target, tokens, what=f"runtime (compile {compile})", **timing)
        del steps
        release(target)
    observations = {"train_ratio": ours["train_tok_s"] / reference["train_tok_s"],
                    "eval_ratio": ours["eval_tok_s"] / reference["eval_tok_s"],
                    "memory_ratio": ours["peak_gib"] / reference["peak_gib"]}
    for side, figures in (("runtime", ours), ("transformers", reference)):
        observations.update({f"{side}_{key}": value for key, value in figures.items()})
    return observations
