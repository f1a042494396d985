"""The runtime against transformers, in one process, on the same batches and the same recipe.

    python bench/bench_vs_hf.py                                  # qwen2-0.5b shape, 8 x 1024, cuda
    python bench/bench_vs_hf.py --compile none,layers,model      # the runtime eager and compiled two ways
    python bench/bench_vs_hf.py --config tiny --batch 4 --seq 128 --device cpu    # a smoke run

Recipe for both sides: random weights from one seed (the runtime writes the HF directory that
transformers opens, so both start from identical fp32 parameters), bf16 autocast over fp32
master weights, AdamW (fused on CUDA) with decay on matrices only, clipping at global norm 1.0.
transformers runs with SDPA attention. Both sides hand each step's loss to the host as a float
(Trainer.train_batch / eval_batch return it; the transformers steps call .item()), so both pay
one synchronisation per step and produce the same result. Each figure is the median of >= 5 timed windows after a
warm-up (pvlab.falsifiers.throughput.measure); a spread over --max-spread aborts the run instead
of printing a figure. Peak memory is torch.cuda.max_memory_allocated() for each side alone (the
other side's model is freed first). MFU is against the GPU's dense bf16 peak, printed only for
GPUs whose peak is known.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pvlab import runtime  # noqa: E402
from pvlab.falsifiers import throughput  # noqa: E402
from pvlab.runtime.data import LMBatch  # noqa: E402


def make_batches(vocab: int, batch: int, seq: int, count: int = 4) -> list[LMBatch]:
    generator = torch.Generator().manual_seed(0)
    return [LMBatch.from_sequences(torch.randint(0, vocab, (batch, seq + 1), generator=generator))
            for _ in range(count)]


def transformers_steps(directory: Path, device: torch.device, batches: list[LMBatch]):
    """(train_step, eval_step, owner) for transformers on `batches` with the recipe above; keep
    `owner` alive while stepping and delete it to free the model."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                 attn_implementation="sdpa").to(device)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=3e-4, betas=(0.9, 0.95), fused=device.type == "cuda")
    gpu = [b.to(device) for b in batches]
    state = {"i": 0}

    def train_step() -> float:
        b = gpu[state["i"] % len(gpu)]
        state["i"] += 1
        with torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(input_ids=b.inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), b.targets.flatten(),
                                                 ignore_index=runtime.kernels.IGNORE_INDEX)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()   # the step's loss on the host, as Trainer.train_batch returns it

    def eval_step() -> float:
        b = gpu[state["i"] % len(gpu)]
        state["i"] += 1
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
            logits = model(input_ids=b.inputs).logits
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), b.targets.flatten(),
                                                     ignore_index=runtime.kernels.IGNORE_INDEX)
        return loss.item()   # as Trainer.eval_batch returns it

    return train_step, eval_step, (model, optimizer, gpu)


def runtime_steps(directory: Path, device: torch.device, batches: list[LMBatch], compile_scope: str):
    """(train_step, eval_step, owner) for the runtime's fast path (Trainer), compiled per scope."""
    model = runtime.load(directory, device=device, path="fast")
    trainer = runtime.Trainer(model, lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95), grad_clip=1.0,
                              compile=False if compile_scope == "none" else compile_scope)
    gpu = [b.to(device) for b in batches]
    state = {"i": 0}

    def train_step() -> None:
        trainer.train_batch(gpu[state["i"] % len(gpu)])
        state["i"] += 1

    def eval_step() -> None:
        trainer.eval_batch(gpu[state["i"] % len(gpu)])
        state["i"] += 1

    return train_step, eval_step, (model, trainer, gpu)


def hf_side(directory: Path, device: torch.device, batches: list[LMBatch], args) -> dict:
    train_step, eval_step, owner = transformers_steps(directory, device, batches)
    result = run_side(train_step, eval_step, device, batches, args, "transformers")
    del owner, train_step, eval_step
    return result


def runtime_side(directory: Path, device: torch.device, batches: list[LMBatch], args, compile_scope: str) -> dict:
    train_step, eval_step, owner = runtime_steps(directory, device, batches, compile_scope)
    result = run_side(train_step, eval_step, device, batches, args, f"runtime (compile {compile_scope})")
    del owner, train_step, eval_step
    return result


def run_side(train_step, eval_step, device: torch.device, batches: list[LMBatch], args, label: str) -> dict:
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else None
    tokens = batches[0].num_target_tokens
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    timing = dict(warmup=args.warmup, repeats=args.repeats, synchronize=sync, min_window_s=args.min_window_s,
                  max_spread=args.max_spread)
    train = throughput.measure(train_step, units_per_step=tokens, what=f"{label} training tokens/s", **timing)
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
    evaluation = throughput.measure(eval_step, units_per_step=tokens, what=f"{label} eval tokens/s", **timing)
    return {"train_tok_s": train.median, "train_spread": train.spread, "eval_tok_s": evaluation.median,
            "eval_spread": evaluation.spread, "peak_gib": peak}


RUNTIME_LABELS = {"none": "runtime fast path", "layers": "runtime fast path + per-layer compile",
                  "model": "runtime fast path + whole-model compile"}


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="qwen2-0.5b", choices=sorted(runtime.PRESETS))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--min-window-s", type=float, default=2.0, help="each timed window lasts at least this long")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-spread", type=float, default=0.25)
    parser.add_argument("--compile", default="none",
                        help="comma-separated runtime variants: none (eager), layers (Trainer(compile=True)), "
                             "model (Trainer(compile='model'): the whole decoder as one graph); one row each")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    scopes = [scope.strip() for scope in args.compile.split(",") if scope.strip()]
    if not scopes or any(scope not in ("none", "layers", "model") for scope in scopes):
        parser.error(f"--compile takes none, layers and/or model, comma-separated; got {args.compile!r}")

    device = runtime.resolve_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    config = runtime.preset(args.config)
    batches = make_batches(config.vocab_size, args.batch, args.seq)
    with tempfile.TemporaryDirectory() as tmp:
        model = runtime.init_model(config=config, weights="random", seed=0, device="cpu")
        params = model.num_parameters()
        runtime.save_checkpoint(model, tmp)
        del model
        hf = hf_side(Path(tmp), device, batches, args)
        release(device)
        runtimes = {}
        for scope in scopes:
            runtimes[scope] = runtime_side(Path(tmp), device, batches, args, scope)
            release(device)

    peak = throughput.dense_bf16_peak(name) if device.type == "cuda" else None
    flops = throughput.training_flops_per_token(parameters=params, layers=config.num_hidden_layers,
                                                hidden=config.hidden_size, seq_len=args.seq)
    print(f"# {args.config} ({params:,} parameters), batch {args.batch} x {args.seq}, {name}, torch {torch.__version__}")
    print("| | train tok/s | MFU | peak GiB | eval tok/s |")
    print("|---|---|---|---|---|")
    rows = [("transformers (SDPA)", hf)] + [(RUNTIME_LABELS[scope], rt) for scope, rt in runtimes.items()]
    for label, side in rows:
        mfu = f"{side['train_tok_s'] * flops / peak:.1%}" if peak else "n/a"
        print(f"| {label} | {side['train_tok_s']:,.0f} (±{side['train_spread']:.0%}) | {mfu} | "
              f"{side['peak_gib']:.1f} | {side['eval_tok_s']:,.0f} (±{side['eval_spread']:.0%}) |")
    ratios = {}
    for scope, rt in runtimes.items():
        ratios[scope] = {"train": rt["train_tok_s"] / hf["train_tok_s"], "eval": rt["eval_tok_s"] / hf["eval_tok_s"],
                         "memory": rt["peak_gib"] / hf["peak_gib"] if device.type == "cuda" else float("nan")}
        print(f"{RUNTIME_LABELS[scope]} / transformers: train {ratios[scope]['train']:.2f}x, "
              f"eval {ratios[scope]['eval']:.2f}x, peak memory {ratios[scope]['memory']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"config": args.config, "device": name, "params": params,
                                         "batch": args.batch, "seq": args.seq, "transformers": hf,
                                         "runtime": runtimes, "ratios": ratios, "dense_bf16_peak": peak}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
