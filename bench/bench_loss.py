"""The fast path's fused output head + cross-entropy alone, against the plain formulation.

    python bench/bench_loss.py                                  # Qwen2 head: 8 x 1024 tokens, C 896, V 151,936
    python bench/bench_loss.py --chunks 441,883,1766 --compile on,off
    python bench/bench_loss.py --tokens 512 --hidden 64 --vocab 4096 --device cpu   # a smoke run

Reference (same process, same tensors): what transformers does, `F.linear` under bf16 autocast
to full (N, V) logits, `.float()`, `F.cross_entropy`, autograd backward. Each variant of
`kernels.chunked_linear_cross_entropy` (chunk tokens x per-chunk steps compiled or eager,
kernels.COMPILE_LOSS_CHUNKS) is timed forward + backward ("train") and under no_grad ("eval"),
median of >= 5 windows (throughput.measure), with its peak memory above the inputs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from pvlab.falsifiers import throughput  # noqa: E402
from pvlab.runtime import kernels  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8 * 1024)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--chunks", default="441,883,1766", help="comma-separated chunk sizes (tokens)")
    parser.add_argument("--compile", default="on,off", help="per-chunk steps compiled (on) and/or eager (off)")
    parser.add_argument("--min-window-s", type=float, default=0.5)
    parser.add_argument("--max-spread", type=float, default=0.5)
    args = parser.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else None
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(args.tokens, args.hidden, generator=generator).to(device).requires_grad_(True)
    weight = (torch.randn(args.vocab, args.hidden, generator=generator) * args.hidden ** -0.5).to(device)
    weight.requires_grad_(True)
    targets = torch.randint(0, args.vocab, (args.tokens,), generator=generator).to(device)

    def reference(grad: bool):
        def step():
            with torch.set_grad_enabled(grad), torch.autocast(device.type, dtype=torch.bfloat16):
                loss = F.cross_entropy(F.linear(hidden, weight).float(), targets)
            if grad:
                loss.backward()
                hidden.grad = weight.grad = None
        return step

    def fused(grad: bool, chunk: int):
        def step():
            with torch.set_grad_enabled(grad):
                loss = kernels.chunked_linear_cross_entropy(hidden, weight, targets, chunk_tokens=chunk)
            if grad:
                loss.backward()
                hidden.grad = weight.grad = None
        return step

    def timed(step, label: str) -> tuple[float, float]:
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        result = throughput.measure(step, units_per_step=args.tokens, synchronize=sync, warmup=3,
                                    min_window_s=args.min_window_s, max_spread=args.max_spread, what=label)
        peak = (torch.cuda.max_memory_allocated() - base) / 2**30 if cuda else float("nan")
        return result.median, peak

    rows = []
    compiled_by_default = kernels.COMPILE_LOSS_CHUNKS
    for mode, grad in (("train", True), ("eval", False)):
        reference_rate, reference_peak = timed(reference(grad), f"reference {mode}")
        rows.append((mode, "reference: full bf16 logits + F.cross_entropy", reference_rate, reference_peak, 1.0))
        for compiled in [c.strip() for c in args.compile.split(",") if c.strip()]:
            kernels.COMPILE_LOSS_CHUNKS = compiled == "on"
            for chunk in [int(c) for c in args.chunks.split(",") if c.strip()]:
                rate, peak = timed(fused(grad, chunk), f"fused {mode}")
                rows.append((mode, f"fused, chunks of {chunk}, steps compiled {compiled}", rate, peak,
                             rate / reference_rate))
    kernels.COMPILE_LOSS_CHUNKS = compiled_by_default
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    print(f"# linear + cross-entropy, N {args.tokens}, C {args.hidden}, V {args.vocab}, {name}, torch {torch.__version__}")
    print("| mode | variant | tok/s | peak GiB over inputs | / reference |\n|---|---|---|---|---|")
    for mode, label, rate, peak, ratio in rows:
        print(f"| {mode} | {label} | {rate:,.0f} | {peak:.2f} | {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
