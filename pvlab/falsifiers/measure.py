"""Measure a check over many seeds, to choose a tolerance from data (not to pass a test).

    python -m pvlab.falsifiers.measure pvlab.falsifiers.kernel_rope:rope_matches_reference \
        --seeds 50 --device cpu -p dtype=bfloat16 -p past=1000 \
        --ratio max_abs_diff/max_abs_ref

prints, for every numeric observation, the minimum and maximum over the seeds, and for each
--ratio A/B the worst (largest) A/B. A tolerance's `source:` in a contract cites the command
and its worst case, and the headroom chosen on top of it.
"""

from __future__ import annotations

import argparse
import json
import math


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text in ("true", "false"):
        return text == "true"
    return text


def measure(check, *, seeds: int, device: str, params: dict, ratios: list[str], seed_param: str = "seed") -> dict:
    lows: dict[str, float] = {}
    highs: dict[str, float] = {}
    worst: dict[str, float] = {r: -math.inf for r in ratios}
    for seed in range(seeds):
        obs = check(device=device, **{**params, seed_param: seed})
        for key, value in obs.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                lows[key] = min(lows.get(key, math.inf), value)
                highs[key] = max(highs.get(key, -math.inf), value)
        for r in ratios:
            a, b = r.split("/")
            worst[r] = max(worst[r], obs[a] / obs[b] if obs[b] else math.inf)
    return {"seeds": seeds, "device": device, "params": params,
            "observations": {k: {"min": lows[k], "max": highs[k]} for k in sorted(lows)}, "worst_ratio": worst}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pvlab.falsifiers.measure", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("check", help="module:function")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("-p", "--param", action="append", default=[], help="name=value")
    parser.add_argument("--ratio", action="append", default=[], help="A/B of two observations")
    args = parser.parse_args(argv)
    import importlib

    module, _, name = args.check.partition(":")
    check = getattr(importlib.import_module(module), name)
    params = dict((k, _value(v)) for k, v in (p.split("=", 1) for p in args.param))
    print(json.dumps(measure(check, seeds=args.seeds, device=args.device, params=params, ratios=args.ratio),
                     indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
