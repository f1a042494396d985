#!/usr/bin/env bash
# Issue #29's speed measurements on one GPU, in two phases of under nine minutes each:
#
#   scripts/gpu-speed.sh --out OUT --phase bench       # 1. every configuration, one table; a kernel profile
#   scripts/gpu-speed.sh --out OUT --phase contracts   # 2. the contracts, with their planted bugs
#   scripts/gpu-speed.sh --out OUT                     # both, one after the other
#
# bench:     bench/bench_vs_hf.py with every configuration in one process — transformers eager,
#            + torch.compile, + Liger kernels (a "not available" row where liger_kernel does not
#            import); the runtime eager, whole-model compiled + fused projections, + its training
#            and eval steps replayed as CUDA graphs (step_graph.GraphedTrainer), + loss chunks of
#            4,096 tokens — into OUT/bench.json and OUT/bench.md; then
#            bench/profile_step.py for the runtime configuration with the best training ratio
#            (OUT/profile.md). Run it first: it fills torch.compile's on-disk caches, which the
#            contracts phase then reuses on the same machine.
# contracts: pv run --contract runtime-vs-transformers (FALSIFY-PERF-HF-001) and pv strength with
#            its planted bug (loss_chunk_steps_eager); FALSIFY-PERF-DECODE-001 (runtime.generate's
#            default decoder against the CPU) and its planted bug (generate_decodes_eagerly), plus
#            the graph decoder's own claims (DECODE-003, DECODE-004). Records go to
#            OUT/perf-ledger.jsonl: merge them with `pv ledger merge OUT/perf-ledger.jsonl`.
#
# Options: --device (cuda), --config (qwen2-0.5b), --batch (8), --seq (1024), --runtime (the
# runtime configurations, bench_vs_hf.py --runtime), --peers (eager,compile,liger), --window-s
# (1.0: each timed window), --max-spread (0.25), --dry-run (print the commands, run nothing).
# A smoke run on a machine without a GPU: --device cpu --config tiny --batch 2 --seq 16
# --window-s 0.05 --max-spread 100 (the profile, which needs CUDA, is left out and says so).
# Every step runs under a time limit so a phase ends within its budget; what a step measured
# before its limit stays in OUT. Exit status: 0 when every step succeeded (every falsifier run
# passed and every planted bug was killed), 1 otherwise, 2 for a usage error.
set -uo pipefail
cd "$(dirname "$0")/.."

out=gpu-speed-out phase=all device=cuda config=qwen2-0.5b batch=8 seq=1024 window=1.0 spread=0.25 dry=0
runtime_variants="eager,model+fused,model+fused+graph,model+fused+graph+chunk=4096"
peers="eager,compile,liger"
while (( $# )); do
  case $1 in
    --out) out=$2; shift ;;
    --phase) phase=$2; shift ;;
    --device) device=$2; shift ;;
    --config) config=$2; shift ;;
    --batch) batch=$2; shift ;;
    --seq) seq=$2; shift ;;
    --runtime) runtime_variants=$2; shift ;;
    --peers) peers=$2; shift ;;
    --window-s) window=$2; shift ;;
    --max-spread) spread=$2; shift ;;
    --dry-run) dry=1 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "gpu-speed.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case $phase in bench|contracts|all) ;; *) echo "gpu-speed.sh: --phase is bench, contracts or all" >&2; exit 2 ;; esac
mkdir -p "$out"
# shellcheck source=scripts/gpu-env.sh
. scripts/gpu-env.sh

status=0
# step LIMIT_S LOG command...: run one step under a time limit, tee its output to OUT/LOG
step() {
  local limit=$1 log=$2; shift 2
  echo "== $* (limit ${limit}s)"
  if (( dry )); then return 0; fi
  timeout --signal=INT --kill-after=20 "$limit" "$@" 2>&1 | tee "$out/$log"
  local rc=${PIPESTATUS[0]}
  if (( rc == 124 || rc == 130 )); then echo "== time limit reached: $log holds what was measured before it"; fi
  (( rc )) && status=1
  return 0
}

if (( ! dry )); then
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
    "$py" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
    "$py" -c 'import transformers; print("transformers", transformers.__version__)'
    "$py" -c 'from importlib.metadata import version
try:
    import liger_kernel.transformers  # noqa: F401
    print("liger_kernel", version("liger-kernel"), "imports")
except Exception as error:
    print("liger_kernel not available:", type(error).__name__, error)'
    "$py" -c 'from pvlab.runtime import kernels; print("fused loss: mixed-precision GEMM (out_dtype) available:", kernels._mixed_precision_matmul_available("cuda"))'
  } > "$out/machine.txt" 2>&1
  cat "$out/machine.txt"
fi

if [[ $phase == bench || $phase == all ]]; then
  step 450 bench.md "$py" bench/bench_vs_hf.py --device "$device" --config "$config" --batch "$batch" --seq "$seq" \
    --peers "$peers" --runtime "$runtime_variants" --min-window-s "$window" --max-spread "$spread" --json "$out/bench.json"
  best=model
  if [[ -f $out/bench.json ]]; then
    best=$("$py" -c 'import json, sys
ratios = json.load(open(sys.argv[1])).get("ratios") or {}
print(max(ratios, key=lambda k: ratios[k]["train"]) if ratios else "model")' "$out/bench.json")
  fi
  if [[ $device == cuda* ]]; then
    step 110 profile.md "$py" bench/profile_step.py --runtime "$best" --mode train,eval --config "$config" \
      --batch "$batch" --seq "$seq" --warmup 5 --steps 3 --timed 10
  else
    echo "== bench/profile_step.py --runtime $best: left out (kernel profiles need CUDA; this run is on $device)"
  fi
fi

if [[ $phase == contracts || $phase == all ]]; then
  ledger=$out/perf-ledger.jsonl
  step 200 run-runtime-vs-transformers.log "$py" -m pv.cli run --contract runtime-vs-transformers --device "$device" --ledger "$ledger"
  step 170 strength-runtime-vs-transformers.log "$py" -m pv.cli strength --contract runtime-vs-transformers --device "$device" \
    --mutant loss_chunk_steps_eager --ledger "$ledger"
  step 150 run-decode.log "$py" -m pv.cli run FALSIFY-PERF-DECODE-001 FALSIFY-PERF-DECODE-003 FALSIFY-PERF-DECODE-004 \
    --device "$device" --ledger "$ledger"
  step 50 strength-decode.log "$py" -m pv.cli strength --contract runtime-performance --device "$device" \
    --mutant generate_decodes_eagerly --ledger "$ledger"
fi
exit $status
