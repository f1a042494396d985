"""Figures for the runtime: preset sizes, the tiny checkpoint's build time and held-out loss, and
training throughput of each execution path on each available device.

    python bench/bench_runtime.py                 # everything (builds tiny into a fresh temp cache)
    python bench/bench_runtime.py --skip-build    # throughput and sizes only

Pin the CPU figures to two cores with `taskset -c 0,1` and OMP_NUM_THREADS=2 to reproduce the
"two cores" numbers in docs/runtime.md.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pvlab import runtime  # noqa: E402
from pvlab.runtime.data import LMBatch  # noqa: E402


def preset_sizes() -> None:
    for name, config in runtime.PRESETS.items():
        with torch.device("meta"):
            counted = runtime.CausalLM(config).num_parameters()
        print(f"preset {name:<11} {counted:>13,} parameters  {len(config.tensor_shapes()):>4} tensors")


def build_tiny() -> None:
    with tempfile.TemporaryDirectory() as cache:
        started = time.monotonic()
        directory = runtime.zoo.tiny_trained(cache_dir=cache)
        seconds = time.monotonic() - started
        record = runtime.zoo.build_record(directory)
        bound = 0.5 * math.log(record["vocab_size"])
        print(f"tiny_trained build {seconds:.1f}s wall ({torch.get_num_threads()} torch threads), "
              f"val_loss {record['val_loss']:.4f} vs 0.5*ln V = {bound:.4f} "
              f"({'OK' if record['val_loss'] <= bound else 'ABOVE BOUND'})")


def throughput(device: str, path: str, steps: int = 20, batch_size: int = 16, seq_len: int = 128) -> None:
    model = runtime.init_model(config="tiny", weights="random", seed=0, device=device, path=path)
    trainer = runtime.Trainer(model)
    generator = torch.Generator().manual_seed(0)
    batches = [LMBatch.from_sequences(torch.randint(0, 512, (batch_size, seq_len + 1), generator=generator))
               for _ in range(4)]
    for batch in batches[:2]:
        trainer.train_batch(batch)  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.monotonic()
    for step in range(steps):
        trainer.train_batch(batches[step % len(batches)])
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.monotonic() - started
    print(f"tiny train {device:<4} {path:<9} {steps / seconds:7.2f} steps/s  "
          f"{steps * batch_size * seq_len / seconds:9.0f} tokens/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-build", action="store_true")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, affinity {len(os.sched_getaffinity(0))} cores,"
          f" cuda {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}")
    preset_sizes()
    if not args.skip_build:
        build_tiny()
    for device in ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",):
        for path in ("reference", "fast"):
            throughput(device, path)


if __name__ == "__main__":
    main()
