#!/usr/bin/env bash
# Re-run the evidence that a change to the falsifiers' definitions or bindings left STALE, on one
# GPU machine in one command, within a deadline, into OUT (default: ./rerun-out):
#
#   scripts/gpu-rerun.sh OUT [SECONDS]
#
# 1. On the machine's spare CPU cores, niced, for the whole call: pv's front-door fuzz
#    (bench/fuzz_contracts.py, FUZZ_CASES cases, default 100,000; counts every 100 cases per job
#    in OUT/fuzz-progress/, the summary in OUT/fuzz.json). The GPU steps below use one or two cores.
# 2. The tiny subjects' cuda cells of the falsifiers named in RERUN (ids), then the
#    production-scale subject (scripts/gpu-scale.sh's build), every cuda cell of it on every
#    runtime its falsifiers name (pvlab, transformers, liger), the scale bugs, the random twin's cells.
# Each step starts only if the deadline (SECONDS, default 540, from the start) leaves it room; a
# step cut short or not started is printed as such. Records go to OUT/rerun-ledger.jsonl; merge
# them where the repo lives: `pv ledger merge OUT/rerun-ledger.jsonl && pv status`.
# Runs from a plain copy of the repo like gpu-evidence.sh (set PV_GIT_COMMIT and PV_GIT_DIRTY).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-rerun-out}
deadline=$(( $(date +%s) + ${2:-540} ))
mkdir -p "$out/fuzz-progress"
export PV_CACHE_DIR=${PV_CACHE_DIR:-$PWD/.pv-cache}
subject=${SUBJECT:-qwen2-0.5b-stdlib}
ledger="$out/rerun-ledger.jsonl"
# shellcheck source=scripts/gpu-env.sh
. scripts/gpu-env.sh

left() { echo $(( deadline - $(date +%s) )); }
step() {  # NAME NEEDED_SECONDS COMMAND...: run COMMAND under the deadline, log to OUT/NAME.log
  local name=$1 need=$2; shift 2
  if (( $(left) < need )); then echo "== $name: not started ($(left) s left, needs ~$need s)" | tee -a "$out/steps.txt"; return; fi
  local t0; t0=$(date +%s)
  echo "== $name"
  timeout --signal=INT --kill-after=10 "$(left)" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $(( $(date +%s) - t0 )) s$( (( rc == 124 )) && echo ' (cut by the deadline)')" | tee -a "$out/steps.txt"
  grep -E "^\[|PASS|FAIL|ERROR|SKIP|killed|survived" "$out/$name.log" | tail -40
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$py" -c 'import torch, sys, os; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0], "cpus", os.cpu_count())'
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

corpus=../shared/corpus; [ -d "$corpus" ] || corpus=shared/corpus
jobs=${FUZZ_JOBS:-$(( $(nproc) > 4 ? $(nproc) - 2 : 1 ))}
fuzz=
if (( ${FUZZ_CASES:-100000} > 0 )); then  # FUZZ_CASES=0: no fuzz (the cores are wanted elsewhere)
nice -n 19 timeout --signal=INT "$(( $(left) - 5 ))" "$py" bench/fuzz_contracts.py --cases "${FUZZ_CASES:-100000}" \
  --jobs "$jobs" --cli 200 --seed "${FUZZ_SEED:-2411}" --corpus "$corpus" --progress "$out/fuzz-progress" \
  --json "$out/fuzz.json" > "$out/fuzz.log" 2>&1 &
fuzz=$!
fi

if [ -n "${RERUN:-}" ]; then
  # shellcheck disable=SC2086
  step tiny-cells 30 timeout --signal=INT "${TINY_MAX:-240}" "$py" -m pv.cli run $RERUN --device cuda --skip-subject "$subject" \
    --skip-subject "$subject-random" --ledger "$ledger"
fi
step build 200 "$py" -m pvlab.runtime.subjects build "$subject"
step cells-"$subject" 120 "$py" -m pv.cli run --all --device cuda --subject "$subject" --ledger "$ledger"
# FALSIFIER:BUG[:matrix] tokens (the bug planted under the falsifier's cells of the subject only; `matrix`:
# a pair the contract does not declare, because the tiny subject's cell cannot kill it); SCALE_BUGS adds more
for pair in FALSIFY-CUDA-FORWARD-PARITY-001:fast_path_drops_qkv_bias:matrix \
            FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-002:eval_reads_stale_train_buffer ${SCALE_BUGS:-}; do
  IFS=: read -r fid bug matrix <<< "$pair"
  step "bug-$bug" 30 "$py" -m pv.cli strength "$fid" --mutant "$bug" ${matrix:+--matrix} --device cuda --skip-subject tiny-trained \
    --skip-subject tiny-random --ledger "$ledger"
done
step cells-"$subject"-random 40 "$py" -m pv.cli run --all --device cuda --subject "$subject-random" --ledger "$ledger"

if [ -z "$fuzz" ]; then cat "$out/steps.txt"; exit 0; fi
wait "$fuzz"; echo "== fuzz: exit $? ($(left) s left)" | tee -a "$out/steps.txt"
"$py" - "$out/fuzz-progress" <<'PY' | tee "$out/fuzz-progress.txt"
import json, sys
from collections import Counter
from pathlib import Path
total = Counter()
for f in Path(sys.argv[1]).glob("job*.json"):
    total.update(json.loads(f.read_text())["stats"])
print(json.dumps(dict(sorted(total.items())), indent=1))
PY
cat "$out/steps.txt"
