#!/usr/bin/env bash
# Production scale on a GPU machine, in one command, into OUT (default: ./scale-out):
#   1. build the subject qwen2-0.5b-stdlib (SUBJECT=... for another): the Qwen2-0.5B shape trained
#      on this interpreter's standard library, CUDA, bf16 fast path; each phase's duration printed
#      (corpus, tokenizer, encode, training, eval, save) and kept in OUT/build.json
#   2. the seed falsifiers against it (PV_SUBJECT: their `checkpoint: tiny-trained` / `tiny-random`
#      stand for the subject and its random twin): the CUDA rows, then the CPU-only rows
#   3. the planted bugs the issue expects to be killed at scale: fast_path_drops_qkv_bias by
#      FALSIFY-CUDA-FORWARD-PARITY-001's loss bound, eval_reads_stale_train_buffer by
#      EVAL-METHODOLOGY-002 (EVAL-001 scores a random model without a training step: the stale
#      buffer it would read does not exist there)
#
# Nothing is written to a ledger (--no-ledger): until `pv run --subject` records the subject,
# a record would claim tiny-trained for a run on the 0.5B model. The logs and OUT/summary.txt are
# the evidence to copy into docs/gpu.md. Runs from a plain copy of the repo like gpu-evidence.sh.
# Exit status: 0 when the build succeeded, every falsifier passed and both planted bugs were killed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-scale-out}
mkdir -p "$out"
export PV_CACHE_DIR=${PV_CACHE_DIR:-$PWD/.pv-cache}
subject=${SUBJECT:-qwen2-0.5b-stdlib}
# shellcheck source=scripts/gpu-env.sh
. scripts/gpu-env.sh

status=0
phase_start=$(date +%s)
timings=()
phase_done() { local now; now=$(date +%s); timings+=("$1: $(( now - phase_start )) s"); phase_start=$now; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$py" -c 'import torch, sys, sysconfig; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0], "stdlib", sysconfig.get_paths()["stdlib"])'
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

echo "== build $subject"
"$py" -m pvlab.runtime.subjects build "$subject" 2>&1 | tee "$out/build.log"
(( PIPESTATUS[0] )) && { echo "build failed"; exit 1; }
"$py" - "$subject" "$out/build.json" <<'EOF'
import json, shutil, sys
from pvlab.runtime import subjects
directory = subjects.checkpoint_dir(sys.argv[1], build=False)
shutil.copyfile(directory / "build.json", sys.argv[2])
EOF
phase_done "build $subject"

export PV_SUBJECT=$subject
cuda_rows=(FALSIFY-CUDA-FORWARD-PARITY-001 FALSIFY-CUDA-FORWARD-PARITY-002 FALSIFY-CUDA-FORWARD-PARITY-003
           FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-001 FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-002
           FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-005
           FALSIFY-CPU-GPU-001 FALSIFY-CPU-GPU-002 FALSIFY-CPU-GPU-003 FALSIFY-CPU-GPU-004
           FALSIFY-INV-TRAIN-007 FALSIFY-INV-TRAIN-008)
cpu_rows=(FALSIFY-CPU-FORWARD-SANITY-001 FALSIFY-CPU-FORWARD-SANITY-002 FALSIFY-CPU-FORWARD-SANITY-003
          FALSIFY-CPU-FORWARD-SANITY-004 FALSIFY-CPU-FORWARD-SANITY-005
          FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-003 FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-004)

echo "== seed falsifiers on cuda against $subject"
pv run "${cuda_rows[@]}" --device cuda --no-ledger 2>&1 | tee "$out/run-cuda.log"; (( PIPESTATUS[0] )) && status=1
phase_done "falsifiers on cuda"
echo "== seed falsifiers on cpu against $subject"
pv run "${cpu_rows[@]}" --device cpu --no-ledger 2>&1 | tee "$out/run-cpu.log"; (( PIPESTATUS[0] )) && status=1
phase_done "falsifiers on cpu"

echo "== planted bugs at scale"
for pair in "FALSIFY-CUDA-FORWARD-PARITY-001 fast_path_drops_qkv_bias" \
            "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-002 eval_reads_stale_train_buffer"; do
  set -- $pair
  pv run "$1" --device cuda --no-ledger --mutant "$2" > "$out/mutant-$2.log" 2>&1
  if grep -q "FAIL (killed)" "$out/mutant-$2.log"; then echo "killed: $2 by $1"
  else echo "NOT killed: $2 by $1 ($(grep -oE 'PASS \(survived\)|ERROR|SKIP' "$out/mutant-$2.log" | head -1))"; fi
  grep -E "^\[" "$out/mutant-$2.log"
done | tee "$out/kills.txt"
grep -q "NOT killed" "$out/kills.txt" && status=1
phase_done "planted bugs on cuda"

printf '%s\n' "${timings[@]}" | tee "$out/timing.txt"
{ cat "$out/machine.txt"; grep -E '^(subject|phases|parameters|wall)' "$out/build.log"; cat "$out/kills.txt" "$out/timing.txt"
} > "$out/summary.txt"
exit $status
