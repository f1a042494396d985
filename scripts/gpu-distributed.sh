#!/usr/bin/env bash
# Distributed evidence on a 2-GPU machine (2 x H200, NCCL) in one command, into OUT (default: ./dist-out):
#   1. pv run --contract distributed-training --device cuda   (every falsifier on 2 ranks, NCCL)
#   2. pv strength --contract distributed-training --device cuda   (every declared mutant on 2 ranks)
#   3. tokens/s of `torchrun -m pvlab.runtime pretrain` at 1 and 2 GPUs (DDP and FSDP2), same global batch
# Records go to OUT/dist-ledger.jsonl; merge them where the repo lives with
#   pv ledger merge OUT/dist-ledger.jsonl && pv status
# and copy the table in OUT/scaling.md into docs/distributed.md ("Measured scaling").
#
# Works from a plain copy of the repo like scripts/gpu-evidence.sh (pv runs from the source tree).
# Environment: PYTHON (default python3), SCALE_CONFIG (default qwen2-0.5b), SCALE_STEPS (default 30),
# SCALE_BATCH (global batch, default 16), SCALE_SEQ (default 1024).
# Exit status: 0 when every falsifier passed, every declared mutant was killed and every
# throughput run finished.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist-out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# NVLink multicast (NVLS / symmetric memory) stays off on these machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# shellcheck source=scripts/gpu-env.sh
. scripts/gpu-env.sh
config=${SCALE_CONFIG:-qwen2-0.5b}
steps=${SCALE_STEPS:-30}
batch=${SCALE_BATCH:-16}
seq=${SCALE_SEQ:-1024}

gpus=$("$py" -c 'import torch; print(torch.cuda.device_count())')
if [ "${gpus:-0}" -lt 2 ]; then
  echo "need 2 GPUs for distributed evidence, found ${gpus:-0}" >&2
  exit 2
fi
start=$(date +%s)
status=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$py" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "python", sys.version.split()[0])'
  env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)=' | sort
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

pv validate -q contracts/distributed-training-v1.yaml || exit 1
echo "== pv run --contract distributed-training --device cuda"
pv run --contract distributed-training --device cuda --ledger "$out/dist-ledger.jsonl" 2>&1 | tee "$out/run.log"
(( ${PIPESTATUS[0]} )) && status=1
t_run=$(( $(date +%s) - start ))
echo "== pv strength --contract distributed-training --device cuda"
pv strength --contract distributed-training --device cuda --ledger "$out/dist-ledger.jsonl" 2>&1 | tee "$out/strength.log"
(( ${PIPESTATUS[0]} )) && status=1
t_strength=$(( $(date +%s) - start - t_run ))

echo "== tokens/s: torchrun pretrain --config $config, global batch $batch x $seq tokens, $steps steps"
printf '| GPUs | strategy | tokens/s | scaling vs 1 GPU | final train loss |\n| --- | --- | --- | --- | --- |\n' > "$out/scaling.md"
for strategy in ddp fsdp; do
  base=""
  for n in 1 2; do
    run="$out/pretrain-$strategy-$n"
    rm -rf "$run"
    if "$py" -m torch.distributed.run --standalone --nproc-per-node "$n" -m pvlab.runtime pretrain \
         --config "$config" --device cuda --steps "$steps" --batch-size "$batch" --seq-len "$seq" \
         --eval-every "$steps" --documents 4000 --strategy "$strategy" --out "$run" --quiet \
         > "$run.log" 2>&1; then
      line=$("$py" - "$run/runtime.json" "$n" "$strategy" "$base" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
n, strategy, base = sys.argv[2], sys.argv[3], sys.argv[4]
rate = results["tokens_per_second"]
ratio = f"{rate / float(base):.2f}x" if base else "1.00x"
print(f"{rate}\t| {n} | {strategy} | {rate:,.0f} | {ratio} | {results['train_loss']:.4f} |")
PY
)
      [ -z "$base" ] && base=${line%%$'\t'*}
      echo "${line#*$'\t'}" | tee -a "$out/scaling.md"
    else
      echo "| $n | $strategy | failed (see pretrain-$strategy-$n.log) | | |" | tee -a "$out/scaling.md"
      status=1
    fi
  done
done
rm -rf "$out"/pretrain-*/sharded "$out"/pretrain-*/model.safetensors   # the figures are in runtime.json
printf 'pv run (distributed-training, cuda): %s s\npv strength (distributed-training, cuda): %s s\ntotal: %s s\n' \
  "$t_run" "$t_strength" "$(( $(date +%s) - start ))" | tee "$out/timing.txt"
exit $status
