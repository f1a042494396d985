"""The decoding controls a user sets do what they say: an end-of-sequence id stops decoding, and
a sampling seed fixes the sampled text (and a different seed changes it).

runtime.generate.generate and generate_batch on the trained tiny checkpoint. The oracles are the
runtime's own unconstrained runs read as plain token lists: a greedy run without an eos id
says which token comes at step k, so asking to stop at that id must stop exactly there.
"""

from __future__ import annotations

import importlib

from . import fixtures
from ._util import torch_device


def _decoders():
    module = importlib.import_module("pvlab.runtime.generate")   # at call time: planted bugs reach them
    return module.generate, module.generate_batch


def _prompt(model) -> list[int]:
    return model.tokenizer.encode("def compute_total(items, limit):\n    total = 0\n").ids


def generation_stops_at_eos(*, device: str, path: str | None = None, new_tokens: int = 16, stop_step: int = 5) -> dict:
    """Greedy decoding without an eos id gives tokens g; with eos_token_id = g[k] (k the first
    step at which that id appears, at or after `stop_step`'s token) generate must return
    exactly g[:k+1] with stopped_on_eos, and generate_batch the same for every row.

    Observations: stop_index (k), single_new_tokens, single_stopped, single_prefix_mismatches,
    batch_rows_stopped_right (rows whose tokens are g[:k+1] with stopped_on_eos), rows."""
    from pvlab.runtime import devices

    dev = torch_device(device)
    model = fixtures.model("tiny-trained", device, path or devices.default_path(dev))
    generate, generate_batch = _decoders()
    prompt = _prompt(model)
    free = generate(model, prompt, max_new_tokens=new_tokens).new_ids
    eos = free[stop_step]
    k = free.index(eos)
    stopped = generate(model, prompt, max_new_tokens=new_tokens, eos_token_id=eos)
    rows = generate_batch(model, [prompt, prompt], max_new_tokens=new_tokens, eos_token_id=eos)
    right = sum(1 for r in rows if r.new_ids == free[:k + 1] and r.stopped_on_eos)
    return {"stop_index": k, "single_new_tokens": len(stopped.new_ids), "single_stopped": int(stopped.stopped_on_eos),
            "single_prefix_mismatches": sum(a != b for a, b in zip(stopped.new_ids, free[:k + 1])),
            "batch_rows_stopped_right": right, "rows": len(rows)}


def sampling_follows_seed(*, device: str, path: str | None = None, new_tokens: int = 12, temperature: float = 1.5,
                          seeds: list | None = None) -> dict:
    """Sampled decoding (temperature > 0) twice with each seed, and once more with every other
    seed in between: the same seed must give the same tokens, and different seeds (several)
    must not all give one text. Single (generate) and batched (generate_batch).

    Observations: repeat_mismatches (seeds whose two runs differ, single or batched),
    distinct_texts (different token lists over the seeds, single runs), seeds."""
    from pvlab.runtime import devices

    dev = torch_device(device)
    model = fixtures.model("tiny-trained", device, path or devices.default_path(dev))
    generate, generate_batch = _decoders()
    prompt = _prompt(model)
    seeds = [int(s) for s in (seeds or [0, 1, 2])]

    def single(seed):
        return tuple(generate(model, prompt, max_new_tokens=new_tokens, temperature=temperature, seed=seed).new_ids)

    def batched(seed):
        return tuple(tuple(r.new_ids) for r in generate_batch(model, [prompt, prompt[:5]], max_new_tokens=new_tokens,
                                                             temperature=temperature, seed=seed))

    first = {s: (single(s), batched(s)) for s in seeds}
    again = {s: (single(s), batched(s)) for s in reversed(seeds)}
    return {"repeat_mismatches": sum(first[s] != again[s] for s in seeds),
            "distinct_texts": len({first[s][0] for s in seeds}), "seeds": len(seeds)}
