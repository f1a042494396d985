"""The runtime against transformers at its strongest, in one process, same batches, same recipe.

    python bench/bench_vs_hf.py                                       # qwen2-0.5b shape, 8 x 1024, cuda
    python bench/bench_vs_hf.py --runtime eager,model,model+fused     # runtime configurations, one row each
    python bench/bench_vs_hf.py --config tiny --batch 4 --seq 128 --device cpu --peers eager   # a smoke run

Recipe for every configuration: random weights from one seed (the runtime writes the HF
directory that transformers opens, so all start from identical fp32 parameters), bf16 autocast
over fp32 master weights, AdamW (fused on CUDA) with decay on matrices only, clipping at global
norm 1.0, SDPA attention; each step's loss handed to the host as a float (one synchronisation per
step on every side). transformers runs as --peers says: eager, + torch.compile (the one-line
`torch.compile(model)`), + Liger kernels (where liger_kernel imports and the device is CUDA; its
row says why when it cannot run). The runtime runs each --runtime configuration
(pvlab.falsifiers.speed_vs_transformers.RuntimeVariant: a compile scope, then +fused,
+mode=<torch.compile mode>, +attn=<SDPA backend>). A configuration that fails prints its error
in its row; the others still run. The steps and the measurement are
pvlab.falsifiers.speed_vs_transformers' (FALSIFY-PERF-HF-001 runs the same comparison as a
contract). Each figure is the median of >= 5 timed windows after a warm-up
(pvlab.falsifiers.throughput.measure); a runtime configuration whose spread is over --max-spread
fails instead of printing a figure; a transformers peer's figure is printed with its spread, and
the ratios leave it out only where even its fastest window is slower than the slowest window of
the strongest steady peer (speed_vs_transformers.fastest_steady), else no ratio is printed. Peak memory is torch.cuda.max_memory_allocated() of each
configuration alone (the others freed first). MFU is against the GPU's dense bf16 peak, printed
only for GPUs whose peak is known. Ratios are against the strongest peer for each figure.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from pvlab import runtime  # noqa: E402
from pvlab.falsifiers import speed_vs_transformers as svt, throughput  # noqa: E402

DEFAULT_RUNTIME = "eager,model+fused,model+fused+graph,model+fused+graph+chunk=4096"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="qwen2-0.5b", choices=sorted(runtime.PRESETS))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--min-window-s", type=float, default=2.0, help="each timed window lasts at least this long")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-spread", type=float, default=0.25)
    parser.add_argument("--peers", default=",".join(svt.PEERS), help=f"transformers configurations: {', '.join(svt.PEERS)}")
    parser.add_argument("--runtime", default=DEFAULT_RUNTIME,
                        help="comma-separated runtime configurations (RuntimeVariant specs), one row each")
    parser.add_argument("--compile", default=None, help="old spelling of --runtime with scopes only (none, layers, model)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    specs = [s.strip() for s in (args.compile or args.runtime).split(",") if s.strip()]
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    try:
        variants = [svt.RuntimeVariant.parse(spec) for spec in specs]
    except ValueError as error:
        parser.error(str(error))
    if not variants or not peers or any(p not in svt.PEERS for p in peers):
        parser.error(f"--peers takes a subset of {', '.join(svt.PEERS)} and --runtime at least one configuration")

    device = runtime.resolve_device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    config = runtime.preset(args.config)
    batches = svt.make_batches(config.vocab_size, args.batch, args.seq)
    timing = dict(warmup=args.warmup, repeats=args.repeats, min_window_s=args.min_window_s, max_spread=args.max_spread)
    rows: list[tuple[str, str, dict]] = []   # (kind, key, figures or {"unavailable"/"failed": why})
    with tempfile.TemporaryDirectory() as tmp:
        model = runtime.init_model(config=config, weights="random", seed=0, device="cpu")
        params = model.num_parameters()
        runtime.save_checkpoint(model, tmp)
        del model
        print(f"# {args.config} ({params:,} parameters), batch {args.batch} x {args.seq}, {name}, "
              f"torch {torch.__version__}")
        print("| configuration | train tok/s | MFU | peak GiB | eval tok/s | set-up + measure s |")
        print("|---|---|---|---|---|---|", flush=True)
        throughput.warm_up_gpu(device)   # a GPU fresh from idle gave the first configuration a 30-40 % spread
        # Rows are printed, and the JSON rewritten, as each configuration finishes: a run cut
        # short by a time limit keeps what it measured.
        for kind, key in [("peer", p) for p in peers] + [("runtime", v.spec()) for v in variants]:
            if kind == "peer":
                side = timed(lambda: svt.measure_peer(Path(tmp), device, batches, key, **timing))
            else:
                side = timed(lambda: svt.measure_runtime(Path(tmp), device, batches, svt.RuntimeVariant.parse(key),
                                                         **timing))
            rows.append((kind, key, side))
            print_row(kind, key, side, params=params, config=config, seq=args.seq, device_name=name)
            if args.json:
                try:
                    partial = ratios_of(rows, args.max_spread)
                except throughput.UnstableMeasurement:
                    partial = {}   # said once all rows are in
                write_json(args, rows, name, params, partial)

    try:
        ratios = ratios_of(rows, args.max_spread)
    except throughput.UnstableMeasurement as error:
        print(f"\nno ratios: {error}")
        if args.json:
            write_json(args, rows, name, params, {})
        return 1
    measured_peers = {key: side for kind, key, side in rows if kind == "peer" and "train_tok_s" in side}
    if measured_peers:
        best = svt.strongest(measured_peers, args.max_spread)
        print(f"\nstrongest transformers configuration: train {svt.PEER_LABELS[best['train']]}, "
              f"eval {svt.PEER_LABELS[best['eval']]}; peak memory is compared with the strongest training "
              f"configuration's, the leanest being {svt.PEER_LABELS[best['memory']]}")
        for key, ratio in ratios.items():
            print(f"{svt.RuntimeVariant.parse(key).label()} / strongest transformers: train {ratio['train']:.2f}x, "
                  f"eval {ratio['eval']:.2f}x, peak memory {ratio['memory']:.2f}x "
                  f"({ratio['memory_to_leanest']:.2f}x the leanest)")
    else:
        print("\nno transformers configuration could be measured: no ratios")
    if args.json:
        write_json(args, rows, name, params, ratios)
    return 0 if ratios else 1


def print_row(kind: str, key: str, side: dict, *, params: int, config, seq: int, device_name: str) -> None:
    label = svt.PEER_LABELS[key] if kind == "peer" else svt.RuntimeVariant.parse(key).label()
    why = side.get("unavailable") or side.get("failed")
    if why:
        state = "not available" if "unavailable" in side else "FAILED"
        print(f"| {label} | {state}: {why} | | | | {side['seconds']:.0f} |", flush=True)
        return
    side["mfu"] = svt.mfu(side["train_tok_s"], parameters=params, config=config, seq=seq, device_name=device_name)
    mfu = "n/a" if math.isnan(side["mfu"]) else f"{side['mfu']:.1%}"
    # The peak is the configuration's own; memory an earlier one left allocated is shown beside it.
    resident = side.get("resident_before_gib", 0.0)
    peak = f"{side['peak_gib']:.1f}" + (f" (+{resident:.1f} left by earlier rows)" if resident >= 0.05 else "")
    print(f"| {label} | {side['train_tok_s']:,.0f} (±{side['train_spread']:.0%}) | {mfu} | {peak} | "
          f"{side['eval_tok_s']:,.0f} (±{side['eval_spread']:.0%}) | {side['seconds']:.0f} |", flush=True)


def ratios_of(rows: list, max_spread: float) -> dict:
    """Each measured runtime configuration over the strongest peer, per figure (raises
    UnstableMeasurement where an unsteady peer may be the strongest)."""
    peers = {key: side for kind, key, side in rows if kind == "peer" and "train_tok_s" in side}
    if not peers:
        return {}
    best = svt.strongest(peers, max_spread)
    return {key: {"train": side["train_tok_s"] / peers[best["train"]]["train_tok_s"],
                  "eval": side["eval_tok_s"] / peers[best["eval"]]["eval_tok_s"],
                  "memory": side["peak_gib"] / peers[best["train"]]["peak_gib"],
                  "memory_to_leanest": side["peak_gib"] / peers[best["memory"]]["peak_gib"]}
            for kind, key, side in rows if kind == "runtime" and "train_tok_s" in side}


def write_json(args, rows: list, device_name: str, params: int, ratios: dict) -> None:
    peers = {k: s for kind, k, s in rows if kind == "peer" and "train_tok_s" in s}
    args.json.write_text(json.dumps({
        "config": args.config, "device": device_name, "torch": torch.__version__, "params": params,
        "batch": args.batch, "seq": args.seq, "peers": {k: s for kind, k, s in rows if kind == "peer"},
        "runtime": {k: s for kind, k, s in rows if kind == "runtime"},
        "strongest": svt.strongest(peers) if peers else None, "ratios": ratios,  # medians, spreads aside
        "dense_bf16_peak": svt.throughput.dense_bf16_peak(device_name)}, indent=1, default=str))


def timed(measure) -> dict:
    """A configuration's figures (and the seconds it took, compilation included), or why it failed."""
    started = time.perf_counter()
    try:
        side = measure()
    except Exception as error:  # noqa: BLE001 - one configuration failing must not hide the others
        side = {"failed": f"{type(error).__name__}: {str(error)[:300]}"}
    side["seconds"] = time.perf_counter() - started
    return side


if __name__ == "__main__":
    sys.exit(main())
