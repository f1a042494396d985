#!/usr/bin/env bash
# Run the cells the dashboard owes at production scale, on one GPU machine, within a deadline,
# resumable across calls to the same (warm) machine, into OUT:
#
#   scripts/gpu-owed.sh OUT [SECONDS]
#
# What it runs is what `pv status` says is owed (scripts/owed_cells.py), unless CUDA_IDS, CPU_IDS,
# RANDOM_IDS, TINY_IDS or STRENGTH_IDS name the falsifiers; SCALE_BUGS adds FALSIFIER:BUG[:matrix] pairs
# planted under the subject's cuda cells.
#
# Until SECONDS (default 560) from the start:
# - the GPU: the small subjects' cuda cells of TINY_IDS, then their planted bugs of STRENGTH_IDS on cuda (`pv strength`, -j STRENGTH_JOBS, default 2), while
#   the production-scale subject is built (or found in the cache); once both are done, each of CUDA_IDS on the
#   subject's cuda cells (every runtime the falsifier names), the scale bugs, RANDOM_IDS on the
#   random twin's cuda cells;
# - then the CPU: CPU_PROCS workers (default 3) share CPU_IDS (then RANDOM_IDS) on the subject's
#   cpu cells once the cuda cells are done, each with its share of the cores.
# Each cell is one `pv run`, named (so a deadline never cuts the same first cells every time), and
# leaves a marker in $PV_CACHE_DIR/owed-done when it ends: the next call on a warm machine goes on
# where this one stopped. Records go straight into OUT/*-ledger.jsonl (a cut call keeps what
# finished); an id written ID@RUNTIME runs that runtime's cells only; RANDOM_DEVICES (default
# "cuda cpu") and CPU_THREADS (default: the cores less four, shared by CPU_PROCS) narrow the rest.
# Merge them where the repo lives: `pv ledger merge OUT/*-ledger.jsonl && pv status`.
# Logs are packed into OUT/logs.tar.gz (the device tool returns few files).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu-owed.sh OUT [SECONDS]}
deadline=$(( $(date +%s) + ${2:-560} ))
cores=$(nproc)  # before gpu-env.sh or OMP_NUM_THREADS narrow what nproc reports
export PV_CACHE_DIR=${PV_CACHE_DIR:-$PWD/.pv-cache}
subject=${SUBJECT:-qwen2-0.5b-stdlib}
done_dir="$PV_CACHE_DIR/owed-done"
logs="$out/logs"
mkdir -p "$logs" "$done_dir"
# shellcheck source=scripts/gpu-env.sh
. scripts/gpu-env.sh

left() { echo $(( deadline - $(date +%s) )); }
# A step the deadline cut: timeout's 124, or 137 when it had to kill (--kill-after). A cut step
# leaves no marker, so the next call runs it again (an H200 session lost its planted-bug pairs
# when a killed `pv strength`, exit 137, was marked done).
cut() { (( $1 == 124 || $1 == 137 )); }
pack() { tar -czf "$out/logs.tar.gz" -C "$out" logs 2>/dev/null; }
cell() {  # DEVICE SUBJECT ID[@RUNTIME] LEDGER: one named cell, skipped when a marker says it ran
  local device=$1 s=$2 id=${3%@*} ledger=$4 marker="$done_dir/$3@$2@$1" only=()
  # ID@RUNTIME runs that runtime's cells only: a cut then loses one runtime's work, not all of them
  [[ $3 == *@* ]] && only=(--runtime "${3#*@}")
  [ -e "$marker" ] && return 0
  (( $(left) < 30 )) && { echo "not started: $id $s $device ($(left) s left)" >> "$logs/steps.txt"; return 1; }
  local t0; t0=$(date +%s)
  timeout --signal=INT --kill-after=10 "$(( $(left) - 5 ))" \
    "$py" -m pv.cli run "$id" "${only[@]}" --device "$device" --subject "$s" --ledger "$ledger" >> "$logs/$device-$s.log" 2>&1
  local rc=$?
  echo "$id $s $device: exit $rc after $(( $(date +%s) - t0 )) s" >> "$logs/steps.txt"
  cut "$rc" || touch "$marker"
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$py" -c 'import torch, sys, os; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0], "cpus", os.cpu_count())'
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

if [ -z "${CUDA_IDS+x}${CPU_IDS+x}${RANDOM_IDS+x}${TINY_IDS+x}${STRENGTH_IDS+x}" ]; then  # none named: what the dashboard owes
  eval "$("$py" -m pv.cli status --format json | "$py" scripts/owed_cells.py "$subject")" || exit 1
fi
echo "owed: cuda ${CUDA_IDS:-} | cpu ${CPU_IDS:-} | random ${RANDOM_IDS:-} | tiny ${TINY_IDS:-} | strength ${STRENGTH_IDS:-}" | tee "$logs/owed.txt"

strength=
if [ -n "${TINY_IDS:-}${STRENGTH_IDS:-}" ] && [ ! -e "$done_dir/strength" ]; then
  # shellcheck disable=SC2086
  ( if [ -n "${TINY_IDS:-}" ] && [ ! -e "$done_dir/tiny" ]; then  # the small subjects' cuda cells of falsifiers whose check changed
      timeout --signal=INT --kill-after=10 "$(( $(left) - 5 ))" "$py" -m pv.cli run $TINY_IDS --device cuda \
        --skip-subject "$subject" --skip-subject "$subject-random" --ledger "$out/tiny-ledger.jsonl" > "$logs/tiny.log" 2>&1
      rc=$?; echo "tiny cells: exit $rc" >> "$logs/steps.txt"
      cut "$rc" || touch "$done_dir/tiny"
    fi
    [ -z "${STRENGTH_IDS:-}" ] && exit 0
    timeout --signal=INT --kill-after=10 "$(( $(left) - 5 ))" "$py" -m pv.cli strength $STRENGTH_IDS --device cuda -j "${STRENGTH_JOBS:-2}" \
      --skip-subject "$subject" --skip-subject "$subject-random" --ledger "$out/strength-ledger.jsonl" \
      > "$logs/strength.log" 2>&1; rc=$?; echo "strength: exit $rc" >> "$logs/steps.txt"
    cut "$rc" || touch "$done_dir/strength" ) &
  strength=$!
fi

if [ ! -e "$done_dir/build-$subject" ]; then
  t0=$(date +%s)
  timeout --signal=INT "$(( $(left) - 5 ))" "$py" -m pvlab.runtime.subjects build "$subject" > "$logs/build.log" 2>&1 \
    && touch "$done_dir/build-$subject"
  echo "build: exit $? after $(( $(date +%s) - t0 )) s" >> "$logs/steps.txt"
fi
[ -e "$done_dir/build-$subject" ] || { echo "the subject did not build"; wait; pack; cat "$logs/steps.txt"; exit 1; }
# The small subjects' pass and the subject's cells both want the GPU: beside `pv strength -j 2`
# an H200's 0.5B CPU-GPU-001 cell, 56 s alone, was cut at 365 s. So the cells wait for the pass
# (which had the build's time to itself); a pass that outlives the call is cut and resumes next
# call, the cells after it.
if [ -n "$strength" ]; then
  wait "$strength" 2>/dev/null
  strength=
fi

for id in ${CUDA_IDS:-}; do cell cuda "$subject" "$id" "$out/cuda-ledger.jsonl"; done
if [ -n "${SCALE_BUGS:-}" ] && [ ! -e "$done_dir/scale-bugs" ] && (( $(left) > 60 )); then
  for pair in $SCALE_BUGS; do  # FALSIFIER:BUG[:matrix]
    IFS=: read -r fid bug matrix <<< "$pair"
    timeout --signal=INT "$(( $(left) - 5 ))" "$py" -m pv.cli strength "$fid" --mutant "$bug" ${matrix:+--matrix} --device cuda \
      --skip-subject tiny-trained --skip-subject tiny-random --ledger "$out/cuda-ledger.jsonl" >> "$logs/scale-bugs.log" 2>&1
    echo "scale bug $bug under $fid: exit $?" >> "$logs/steps.txt"
  done
  touch "$done_dir/scale-bugs"
fi
# RANDOM_DEVICES (default "cuda cpu") picks where the random twin's cells run.
[[ " ${RANDOM_DEVICES:-cuda cpu} " == *" cuda "* ]] &&
  for id in ${RANDOM_IDS:-}; do cell cuda "$subject-random" "$id" "$out/cuda-ledger.jsonl"; done

# The cpu cells only once the cuda cells are done: a cuda cell of the 0.5B subject also runs the
# reference backend on the CPU, and beside three cpu workers an H200 session's CPU-GPU-001 cell
# was cut twice (354 s, 461 s; 65 s alone on an H100).
procs=${CPU_PROCS:-3}
threads=${CPU_THREADS:-$(( (cores - 4) / procs ))}; (( threads < 1 )) && threads=1
cpu_ids=(${CPU_IDS:-}); random_ids=()
[[ " ${RANDOM_DEVICES:-cuda cpu} " == *" cpu "* ]] && random_ids=(${RANDOM_IDS:-})
workers=()
for (( w = 0; w < procs && ${#cpu_ids[@]} + ${#random_ids[@]} > 0; w++ )); do
  ( export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads CUDA_VISIBLE_DEVICES=
    for (( i = w; i < ${#cpu_ids[@]}; i += procs )); do cell cpu "$subject" "${cpu_ids[i]}" "$out/cpu$w-ledger.jsonl"; done
    for (( i = w; i < ${#random_ids[@]}; i += procs )); do cell cpu "$subject-random" "${random_ids[i]}" "$out/cpu$w-ledger.jsonl"; done
  ) &
  workers+=($!)
done

wait "${workers[@]}" $strength 2>/dev/null
pack
cat "$logs/steps.txt"
grep -hE "^(PASS|FAIL|ERROR|SKIP)|killed|survived" "$logs"/*.log | sort | uniq -c | sort -rn | head -20
echo "left: $(left) s"
