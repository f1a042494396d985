"""The runtime against transformers, in one process, on the same batches and the same recipe.

    python bench/bench_vs_hf.py                                  # qwen2-0.5b shape, 8 x 1024, cuda
    python bench/bench_vs_hf.py --compile none,layers,model      # the runtime eager and compiled two ways
    python bench/bench_vs_hf.py --config tiny --batch 4 --seq 128 --device cpu    # a smoke run

Recipe for both sides: random weights from one seed (the runtime writes the HF directory that
transformers opens, so both start from identical fp32 parameters), bf16 autocast over fp32
master weights, AdamW (fused on CUDA) with decay on matrices only, clipping at global norm 1.0.
transformers runs with SDPA attention. Both sides hand each step's loss to the host as a float
(Trainer.train_batch / eval_batch return it; the transformers steps call .item()), so both pay
one synchronisation per step and produce the same result. The steps and the measurement are
pvlab.falsifiers.speed_vs_transformers' (FALSIFY-PERF-HF-001 runs the same comparison as a
contract). Each figure is the median of >= 5 timed windows after a warm-up
(pvlab.falsifiers.throughput.measure); a spread over --max-spread aborts the run instead of
printing a figure. Peak memory is torch.cuda.max_memory_allocated() for each side alone (the
other side's model is freed first). MFU is against the GPU's dense bf16 peak, printed only for
GPUs whose peak is known.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pvlab import runtime  # noqa: E402
from pvlab.falsifiers import throughput  # noqa: E402
from pvlab.falsifiers.speed_vs_transformers import (  # noqa: E402
    make_batches, measure_side, release, runtime_steps, transformers_steps)
from pvlab.runtime.data import LMBatch  # noqa: E402


def hf_side(directory: Path, device: torch.device, batches: list[LMBatch], args) -> dict:
    steps = transformers_steps(directory, device, batches)
    return measure_side(steps, device, batches[0].num_target_tokens, what="transformers", **timing(args))


def runtime_side(directory: Path, device: torch.device, batches: list[LMBatch], args, compile_scope: str) -> dict:
    steps = runtime_steps(directory, device, batches, compile_scope)
    return measure_side(steps, device, batches[0].num_target_tokens, what=f"runtime (compile {compile_scope})",
                        **timing(args))


def timing(args) -> dict:
    return dict(warmup=args.warmup, repeats=args.repeats, min_window_s=args.min_window_s, max_spread=args.max_spread)


RUNTIME_LABELS = {"none": "runtime fast path", "layers": "runtime fast path + per-layer compile",
                  "model": "runtime fast path + whole-model compile"}


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
