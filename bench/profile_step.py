"""Where one training (or eval) step's GPU time goes: a kernel profile, by category and by kernel.

    python bench/profile_step.py                               # runtime fast path, whole-model compile, train
    python bench/profile_step.py --side transformers           # the same step in transformers
    python bench/profile_step.py --mode eval --compile none    # the eager fast path's eval step
    python bench/profile_step.py --runtime model+fused          # a runtime configuration (bench_vs_hf.py --runtime)
    python bench/profile_step.py --side transformers --peer compile   # transformers + torch.compile

The batches, weights and recipe are bench/bench_vs_hf.py's (pvlab.falsifiers.speed_vs_transformers) (same seed, same HF directory). After
`--warmup` steps, `--steps` steps run under torch.profiler (CUDA activity only) and every kernel's
self time is summed; the table gives milliseconds per step. A step time measured without the
profiler (`--timed` steps around a synchronisation) is printed for orientation: the figures to
quote come from bench/bench_vs_hf.py, which takes a median of timed windows.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pvlab import runtime  # noqa: E402
from pvlab.falsifiers.speed_vs_transformers import (  # noqa: E402
    PEER_LABELS, PEERS, RuntimeVariant, make_batches, runtime_steps, transformers_steps)

# First match wins: kernel names are lower-cased before matching.
CATEGORIES = [
    ("attention", r"flash|fmha|attention|sdpa"),
    ("gemm", r"gemm|cutlass|nvjet|xmma|cublas|matmul|_mm_|splitk"),
    ("optimizer", r"adam|multi_tensor|foreach"),
    ("compiled (triton)", r"^triton"),
    ("copy / cast / fill", r"copy|memcpy|memset|fill|cast"),
    ("reduction", r"reduce|norm|softmax|logsumexp"),
    ("elementwise", r"elementwise|vectorized|unrolled"),
]


def category(kernel: str) -> str:
    name = kernel.lower()
    for label, pattern in CATEGORIES:
        if re.search(pattern, name):
            return label
    return "other"


def kernel_times(step, steps: int) -> tuple[dict[str, float], dict[str, int]]:
    """Self device time (ms, summed over `steps`) and launch count of every kernel name."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    times: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for event in prof.key_averages():
        self_us = getattr(event, "self_device_time_total", None)
        if self_us is None:
            self_us = event.self_cuda_time_total
        if self_us <= 0:
            continue
        times[event.key] += self_us / 1000.0
        counts[event.key] += event.count
    return times, counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=("runtime", "transformers"), default="runtime")
    parser.add_argument("--compile", choices=("none", "layers", "model"), default="model",
                        help="the runtime's compile scope (bench_vs_hf.py --compile)")
    parser.add_argument("--runtime", default=None,
                        help="a runtime configuration (RuntimeVariant spec, e.g. model+fused); wins over --compile")
    parser.add_argument("--peer", choices=PEERS, default="eager", help="the transformers configuration (--side transformers)")
    parser.add_argument("--mode", default="train", help="train, eval, or both (train,eval): one profile each")
    parser.add_argument("--config", default="qwen2-0.5b", choices=sorted(runtime.PRESETS))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="profiled steps")
    parser.add_argument("--timed", type=int, default=10, help="steps timed without the profiler")
    parser.add_argument("--top", type=int, default=30, help="kernels listed")
    args = parser.parse_args()
    modes = [mode.strip() for mode in args.mode.split(",") if mode.strip()]
    if not modes or any(mode not in ("train", "eval") for mode in modes):
        parser.error(f"--mode takes train and/or eval, comma-separated; got {args.mode!r}")
    try:
        variant = RuntimeVariant.parse(args.runtime or args.compile)
    except ValueError as error:
        parser.error(str(error))
    if not torch.cuda.is_available():
        parser.error("profiling kernels needs a CUDA device")

    device = torch.device("cuda")
    config = runtime.preset(args.config)
    batches = make_batches(config.vocab_size, args.batch, args.seq)
    with tempfile.TemporaryDirectory() as tmp:
        model = runtime.init_model(config=config, weights="random", seed=0, device="cpu")
        runtime.save_checkpoint(model, tmp)
        del model
        if args.side == "runtime":
            train_step, eval_step, owner = runtime_steps(Path(tmp), device, batches, variant)
            label = variant.label()
        else:
            train_step, eval_step, owner = transformers_steps(Path(tmp), device, batches, args.peer)
            label = PEER_LABELS[args.peer]
    for mode in modes:
        step = train_step if mode == "train" else eval_step
        torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        warmup_s = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(args.timed):
            step()
        torch.cuda.synchronize()
        step_ms = (time.perf_counter() - started) * 1000 / args.timed
        tokens = batches[0].num_target_tokens

        times, counts = kernel_times(step, args.steps)
        total = sum(times.values()) / args.steps
        print(f"# {label}, {mode}, {args.config} batch {args.batch} x {args.seq}, {torch.cuda.get_device_name(device)}, "
              f"torch {torch.__version__}")
        print(f"warm-up {args.warmup} steps: {warmup_s:.1f} s; step {step_ms:.1f} ms wall ({tokens * 1000 / step_ms:,.0f} tok/s, "
              f"{args.timed} steps, unprofiled); kernels {total:.1f} ms/step; peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
        by_category: dict[str, float] = defaultdict(float)
        launches: dict[str, float] = defaultdict(float)
        for name, ms in times.items():
            by_category[category(name)] += ms / args.steps
            launches[category(name)] += counts[name] / args.steps
        print("\n| category | ms/step | share | launches/step |\n|---|---|---|---|")
        for name, ms in sorted(by_category.items(), key=lambda item: -item[1]):
            print(f"| {name} | {ms:.2f} | {ms / total:.0%} | {launches[name]:.0f} |")
        print(f"\n| kernel (top {args.top}) | category | ms/step | calls/step |\n|---|---|---|---|")
        for name, ms in sorted(times.items(), key=lambda item: -item[1])[:args.top]:
            print(f"| {name[:110]} | {category(name)} | {ms / args.steps:.2f} | {counts[name] / args.steps:.0f} |")
    del owner
    return 0


if __name__ == "__main__":
    sys.exit(main())
