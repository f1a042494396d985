#!/usr/bin/env bash
# Production scale on a GPU machine (issue #13), into OUT (default: ./scale-out):
#   scripts/gpu-scale.sh OUT cuda   build the subject qwen2-0.5b-stdlib (the Qwen2-0.5B shape
#                                   trained on this interpreter's standard library, CUDA, bf16 fast
#                                   path; each phase's duration printed and kept in OUT/build.json),
#                                   run every falsifier cell of it and of its random twin on cuda,
#                                   and plant the two bugs the issue expects to be killed at scale
#   scripts/gpu-scale.sh OUT cpu    the same cells on the machine's CPU (the CPU side of the
#                                   CPU<->CUDA comparisons at 0.5B); needs the build of the cuda
#                                   phase in PV_CACHE_DIR (run both on one machine, one after the other)
#   scripts/gpu-scale.sh OUT        both phases in one command (over 10 minutes on an H100)
# Records go to OUT/scale-ledger.jsonl, each naming its subject; merge them where the repo lives:
#   pv ledger merge OUT/scale-ledger.jsonl && pv status
# The planted bugs: fast_path_drops_qkv_bias under FALSIFY-CUDA-FORWARD-PARITY-001 (its loss
# bound, relative to the build's recorded held-out loss) and eval_reads_stale_train_buffer under
# EVAL-METHODOLOGY-002; their records carry the mutant, so they never count as the falsifier's
# own evidence. Runs from a plain copy of the repo like gpu-evidence.sh (set PV_GIT_COMMIT).
# Exit status: 0 when the build succeeded, every cell passed and both planted bugs were killed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-scale-out}
phase=${2:-all}
case "$phase" in cuda|cpu|all) ;; *) echo "usage: scripts/gpu-scale.sh [OUT] [cuda|cpu|all]" >&2; exit 2 ;; esac
mkdir -p "$out"
export PV_CACHE_DIR=${PV_CACHE_DIR:-$PWD/.pv-cache}
subject=${SUBJECT:-qwen2-0.5b-stdlib}
ledger="$out/scale-ledger.jsonl"
# shellcheck source=scripts/gpu-env.sh
. scripts/gpu-env.sh

status=0
phase_start=$(date +%s)
timings=()
phase_done() { local now; now=$(date +%s); timings+=("$1: $(( now - phase_start )) s"); phase_start=$now; }

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$py" -c 'import torch, sys, sysconfig, os; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0], "cpus", os.cpu_count(), "stdlib", sysconfig.get_paths()["stdlib"])'
} > "$out/machine-$phase.txt" 2>&1
cat "$out/machine-$phase.txt"

if [ "$phase" != cpu ]; then
  echo "== build $subject"
  "$py" -m pvlab.runtime.subjects build "$subject" 2>&1 | tee "$out/build.log"
  (( PIPESTATUS[0] )) && { echo "build failed"; exit 1; }
  "$py" - "$subject" "$out/build.json" <<'PY'
import json, shutil, sys
from pvlab.runtime import subjects
directory = subjects.checkpoint_dir(sys.argv[1], build=False)
shutil.copyfile(directory / "build.json", sys.argv[2])
PY
  phase_done "build $subject"
fi

run_cells() {  # device
  local device=$1 s
  for s in "$subject" "$subject-random"; do
    echo "== every falsifier cell of $s on $device"
    pv run --all --device "$device" --subject "$s" --ledger "$ledger" 2>&1 | tee "$out/run-$device-$s.log"
    (( PIPESTATUS[0] )) && status=1
  done
  phase_done "falsifier cells on $device"
}

if [ "$phase" != cpu ]; then
  run_cells cuda
  echo "== planted bugs at scale"
  for pair in "FALSIFY-CUDA-FORWARD-PARITY-001 fast_path_drops_qkv_bias matrix" \
              "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-002 eval_reads_stale_train_buffer"; do
    set -- $pair
    pv strength "$1" --mutant "$2" ${3:+--matrix} --device cuda --skip-subject tiny-trained --skip-subject tiny-random \
      --ledger "$ledger" > "$out/mutant-$2.log" 2>&1
    if grep -qE "KILLED|FAIL \(killed\)" "$out/mutant-$2.log"; then echo "killed: $2 by $1"
    else echo "NOT killed: $2 by $1 ($(grep -oE 'SURVIVED|PASS \(survived\)|ERROR|SKIP' "$out/mutant-$2.log" | head -1))"; fi
    grep -E "^\[" "$out/mutant-$2.log"
  done | tee "$out/kills.txt"
  grep -q "NOT killed" "$out/kills.txt" && status=1
  phase_done "planted bugs on cuda"
fi
[ "$phase" != cuda ] && run_cells cpu

printf '%s\n' "${timings[@]}" | tee "$out/timing-$phase.txt"
{ cat "$out/machine-$phase.txt"; [ -f "$out/build.log" ] && grep -E '^(subject|phases|parameters|wall)' "$out/build.log"
  [ -f "$out/kills.txt" ] && cat "$out/kills.txt"; cat "$out/timing-$phase.txt"
} > "$out/summary-$phase.txt"
exit $status
