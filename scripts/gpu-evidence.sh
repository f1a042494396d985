#!/usr/bin/env bash
# Collect CUDA evidence on a GPU machine in one command, into OUT (default: ./gpu-out):
#   every CUDA falsifier (pv run --all --device cuda), every declared mutant on CUDA
#   (pv strength --device cuda), and a CPU-reference vs CUDA-fast bisect of the trained tiny
#   checkpoint. Records go to OUT/gpu-ledger.jsonl; merge them where the repo lives with
#   `pv ledger merge OUT/gpu-ledger.jsonl && pv status`.
#   The production-scale subject's cells are left out (they need its 4-minute build):
#   scripts/gpu-scale.sh collects them.
#
# Works from a plain copy of the repo (no .git, pv not installed): pv runs from the source tree.
# Set PV_GIT_COMMIT (and PV_GIT_DIRTY=0/1) to say which commit the copy came from. If pydantic or
# jsonschema are missing, wheels in .whl/ are installed to a private directory first.
# Exit status: 0 when every CUDA falsifier passed and every declared CUDA mutant was killed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-out}
mkdir -p "$out"
# shellcheck source=scripts/gpu-env.sh
. scripts/gpu-env.sh

# the production-scale subject and its random twin: scripts/gpu-scale.sh runs their cells
skip=(--skip-subject qwen2-0.5b-stdlib --skip-subject qwen2-0.5b-stdlib-random)
start=$(date +%s)
status=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$py" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

pv validate -q || exit 1
echo "== pv run --all --device cuda"
pv run --all --device cuda "${skip[@]}" --ledger "$out/gpu-ledger.jsonl" 2>&1 | tee "$out/run.log"; (( ${PIPESTATUS[0]} )) && status=1
t_run=$(( $(date +%s) - start ))
echo "== pv strength --device cuda"
pv strength --device cuda "${skip[@]}" --ledger "$out/gpu-ledger.jsonl" 2>&1 | tee "$out/strength.log"; (( ${PIPESTATUS[0]} )) && status=1
t_strength=$(( $(date +%s) - start - t_run ))
echo "== pv bisect tiny-trained --a cpu:reference --b cuda:fast"
pv bisect tiny-trained --a cpu:reference --b cuda:fast --format json > "$out/bisect.json"
pv bisect tiny-trained --a cpu:reference --b cuda:fast | tee "$out/bisect.md"
printf 'pv run --all --device cuda: %s s\npv strength --device cuda: %s s\ntotal: %s s\n' \
  "$t_run" "$t_strength" "$(( $(date +%s) - start ))" | tee "$out/timing.txt"
exit $status
