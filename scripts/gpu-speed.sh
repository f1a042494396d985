#!/usr/bin/env bash
# Measure issue #14's speed work on one GPU in one command, into OUT (default: ./gpu-speed-out):
#   which GEMM route the fused loss takes on this GPU (kernels._mixed_precision_matmul_available),
#   bench/bench_vs_hf.py against transformers (runtime eager, per-layer and whole-model compiled),
#   and the CUDA falsifiers and planted bugs of the contracts the speed work touched
#   (runtime-performance, cross-entropy-kernel, compiled-training, gpu-training-backend,
#   transformers-oracle, textbook-training-loop). Records go to OUT/gpu-ledger.jsonl; merge them
#   with `pv ledger merge OUT/gpu-ledger.jsonl && pv status`.
# Exit status: 0 when every falsifier run passed and every declared mutant was killed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-speed-out}
mkdir -p "$out"
# shellcheck source=scripts/gpu-env.sh
. scripts/gpu-env.sh

status=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$py" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
  "$py" -c 'from pvlab.runtime import kernels; print("fused loss: mixed-precision GEMM (out_dtype) available:", kernels._mixed_precision_matmul_available("cuda"))'
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

echo "== bench/bench_vs_hf.py --compile none,layers,model"
"$py" bench/bench_vs_hf.py --compile none,layers,model --json "$out/bench.json" 2>&1 | tee "$out/bench.md"
(( ${PIPESTATUS[0]} )) && status=1
for contract in runtime-performance cross-entropy-kernel compiled-training gpu-training-backend \
                transformers-oracle textbook-training-loop; do
  echo "== pv run --contract $contract --device cuda"
  pv run --contract "$contract" --device cuda --ledger "$out/gpu-ledger.jsonl" 2>&1 | tee "$out/run-$contract.log"
  (( ${PIPESTATUS[0]} )) && status=1
done
for contract in runtime-performance compiled-training cross-entropy-kernel; do
  echo "== pv strength --contract $contract --device cuda"
  pv strength --contract "$contract" --device cuda --ledger "$out/gpu-ledger.jsonl" 2>&1 | tee "$out/strength-$contract.log"
  (( ${PIPESTATUS[0]} )) && status=1
done
exit $status
