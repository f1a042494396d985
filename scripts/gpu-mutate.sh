#!/usr/bin/env bash
# pv mutate over pvlab/runtime on a machine with many CPU cores (the GPU machine's host CPUs:
# the mutants run on the CPU; `-j` scales with cores), within a deadline, into OUT:
#
#   scripts/gpu-mutate.sh OUT [SECONDS] [pv mutate options...]
#
# Defaults: the seeded sample of issue #26 (SAMPLE=340, SEED=2026, MODULE=pvlab.runtime), nproc-1
# mutants at a time (JOBS), one torch thread each, the falsifiers' cpu cells (DEVICE=cpu).
# DEVICE=cuda judges the mutants by the falsifiers' cuda cells instead (code only a GPU runs:
# the captured-graph decoder, the fast path's probes), JOBS (default 4) processes sharing the GPU;
# pass --only ID ... to re-judge chosen mutants of the same sample. Results accumulate in
# $PV_CACHE_DIR/mutation-runtime.jsonl, which a warm machine keeps between calls: the same command
# again resumes (the baseline and every fresh result are reused). OUT gets a copy of the results
# file and the log after every call; merge the results where the repo lives by appending OUT's
# file to evidence/mutation.jsonl (pv mutate's resume and `pv status` read the latest line per mutant).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-mutate-out}
seconds=${2:-540}
shift $(( $# > 2 ? 2 : $# ))
mkdir -p "$out"
export PV_CACHE_DIR=${PV_CACHE_DIR:-$PWD/.pv-cache}
mkdir -p "$PV_CACHE_DIR"
results="$PV_CACHE_DIR/mutation-runtime.jsonl"
# shellcheck source=scripts/gpu-env.sh
. scripts/gpu-env.sh
"$py" -c 'import libcst, coverage' || { echo "libcst and coverage are needed (pv[mutate]): add their wheels to .whl" >&2; exit 2; }
# Counted before OMP_NUM_THREADS is set: GNU nproc reports OMP_NUM_THREADS when it is set.
cores=$(nproc --all)
device=${DEVICE:-cpu}
if [ "$device" = cuda ]; then
  jobs=${JOBS:-4}
  export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2
else
  jobs=${JOBS:-$(( cores > 2 ? cores - 1 : 1 ))}
  # The mutants run on the CPU: no CUDA context in each of the JOBS pytest processes, one BLAS thread each.
  export CUDA_VISIBLE_DEVICES="" OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
fi
copy_back() { cp -f "$results" "$out/mutation-runtime.jsonl" 2>/dev/null || true; }
trap copy_back EXIT
{ "$py" -c 'import torch, sys, os; print("torch", torch.__version__, "python", sys.version.split()[0], "cpus", os.cpu_count())'
  git rev-parse HEAD 2>/dev/null || echo "commit: ${PV_GIT_COMMIT:-?}"; } > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
"$py" -m pvlab.runtime.subjects build tiny-trained > "$out/build.log" 2>&1 || { tail "$out/build.log"; exit 1; }
budget=$(( seconds - $(( SECONDS )) - 30 ))
(( budget > 30 )) || { echo "no time left for mutants"; exit 1; }
timeout --signal=INT --kill-after=15 $(( budget + 20 )) "$py" -m pv.cli mutate --all --device "$device" \
  --module "${MODULE:-pvlab.runtime}" --sample "${SAMPLE:-340}" --seed "${SEED:-2026}" -j "$jobs" \
  --time-budget "$budget" --results "$results" "$@" 2>&1 | tee "$out/mutate.log" | grep -vE "^\s+baseline \[" | tail -60
echo "exit ${PIPESTATUS[0]} after ${SECONDS} s"
