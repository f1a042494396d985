"""The batched generation API honours every decoding option the single-prompt API honours.

runtime.generate.generate_batch and generate_texts accept the options of generate and
generate_text (max_new_tokens, temperature, top_k, seed, eos_token_id / stop_at_eos). Two blind
planted bugs each dropped one of them in the batched path only (top_k; stop_at_eos=False), and no
check held the batched API to the single one option by option. These checks do, for every option.

FALSIFY-BATCHED-OPTIONS-001 (exact agreement). Where the runtime says a batched row gets what
its prompt gets alone, compare token for token: greedy decoding (docs/runtime.md, Generation:
"Greedy decoding gives every row the tokens it gets alone"), and sampling with top_k = 1, whose
law puts all mass on the argmax (contract sampling-law, -002: "k = 1 must be the argmax every
time"), so it is greedy decoding whatever the temperature and seed. A seeded sampled batch is NOT
comparable row by row with a seeded single decode: every row of a batch draws from one generator
(kernels.pick_next_token on the (B, V) logits), so row r's draws are not the draws of its prompt
alone, and the runtime promises no such thing (measured: with B = 3 no row equals its seeded
single decode; a batch of one does). Sampling with k > 1 is judged by its law, -002.

The grid: both APIs (generate_batch against generate, with eos_token_id = the eos or None;
generate_texts against generate_text, with stop_at_eos True or False) x (temperature, top_k) x
max_new_tokens x stop at eos or not x seed. The oracle is each prompt decoded alone by the
single-prompt API with the same options: a different code path (no padding, no mask, no per-row
bookkeeping, its own eos handling in generate_text). It shares the model forward (batched-
generation compares that).

The eos id is chosen from the model's own greedy tokens (as contract batched-eos does), so that
one prompt reaches it early, one later and one never; generate_text/generate_texts read eos from
model.config.eos_token_id, so the texts are decoded by a copy of the model whose config carries
that id. The tokenizer is a word-level `tokenizers.Tokenizer` over "t0".."t511" built here: one
word per token id, so two texts are equal exactly when their token ids are.

FALSIFY-BATCHED-OPTIONS-002 (the sampling law of a batched row). With temperature T and top_k = k
every token a batched row samples lies among the k largest logits of its step, and the first
token a row draws follows softmax(logits / T) renormalised over those k, in float64 (the
helpers of pvlab.falsifiers.sampling_law, reused: _top_k_softmax64, _hoeffding_tv, _tv). The
logits of the oracle are each prompt's first-step logits computed alone (generate,
output_logits=True); the draws are many rows of the same prompts in generate_batch and in
generate_texts calls. The total-variation bound is sampling-law's Hoeffding union bound over the
subsets of the k kept tokens, plus its float32 rounding term, plus a term for the batched
forward's logits differing from the single ones by at most d (measured here): softmax(l' / T)
with |l' - l| <= d has every probability within a factor exp(+-2d / T) of softmax(l / T), so
TV <= (exp(2d / T) - 1) / 2. The support of later steps is read from the batched rows' own kept
logits (output_logits=True), so that no near-tie between forwards can move a token in or out.
There is no top_p option in the runtime (generate and generate_batch accept none).
"""

from __future__ import annotations

import importlib
import math

from . import fixtures
from ._util import rtol_atol, torch_device
from .batched_eos import LATE_PROMPT, NEVER_PROMPTS
from .sampling_law import _hoeffding_tv, _top_k_softmax64, _tv

# Decoded alone at seed 0: LATE_PROMPT meets the chosen eos at step LATE_STEP + 1, the early
# prompt (LATE_PROMPT followed by its own run) after EARLY_STEP + 1, the never prompt not at all.
LATE_STEP, EARLY_STEP = 5, 1


def _module():
    return importlib.import_module("pvlab.runtime.generate")   # at call time: planted bugs reach it


def word_tokenizer(vocab_size: int):
    """A word-level tokenizers.Tokenizer: token id i is the word "t<i>", words split on
    whitespace; decode joins them with spaces, so decode is injective on id lists."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    tokenizer = Tokenizer(WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    return tokenizer


def _text(ids) -> str:
    return " ".join(f"t{int(i)}" for i in ids)


def _eos_prompts(model, horizon: int):
    """(eos id, [late, never, early] prompts): the eos is the first token of the late prompt's
    eos-free greedy run at step >= LATE_STEP that occurs there for the first time."""
    generate = _module().generate
    free = generate(model, LATE_PROMPT, max_new_tokens=horizon, use_graph=False).new_ids
    k = next((i for i in range(LATE_STEP, horizon) if free.index(free[i]) == i), None)
    if k is None:
        raise AssertionError(f"the late prompt's greedy run repeats from step {LATE_STEP} on: {free}")
    eos = free[k]
    never = next((p for p in NEVER_PROMPTS
                  if eos not in generate(model, p, max_new_tokens=horizon, use_graph=False).new_ids), None)
    if never is None:
        raise AssertionError(f"every fixed prompt's greedy run reaches token {eos}")
    return eos, [list(LATE_PROMPT), list(never), list(LATE_PROMPT) + free[:k - EARLY_STEP]]


def _describe(api, temperature, top_k, new_tokens, stop, seed) -> str:
    stop_name = "stop_at_eos" if api == "texts" else "eos"
    return (f"{api} temperature={temperature:g} top_k={top_k} max_new_tokens={new_tokens} "
            f"{stop_name}={stop} seed={seed}")


def batched_rows_agree_for_every_option(*, device: str, seed: int = 0, initializer_range: float = 0.3,
                                        temperatures: list | None = None, top_ks: list | None = None,
                                        new_tokens: list | None = None,
                                        seeds: list | None = None) -> dict:
    """For every combination of API (ids: generate_batch vs generate; texts: generate_texts vs
    generate_text), (temperature, top_k) in zip(`temperatures`, `top_ks`) (greedy, or sampled with top_k = 1:
    deterministic), max_new_tokens in `new_tokens`, stop at eos (True/False) and seed in `seeds`,
    three prompts (reaching the eos early, late and never) decoded in one batched call must each
    equal the prompt decoded alone with the same options: token ids and stopped_on_eos (ids), or
    the text (texts).

    Observations: combinations; rows (batched rows compared); mismatching_rows; mismatch (the
    first mismatching row named with its options, "" if none); sampled_combinations (those with
    temperature > 0); rows_stopping_early (rows the oracle stops on eos before max_new_tokens),
    rows_running_past_eos (rows the oracle, not stopping, carries past an eos token: where
    stop_at_eos=False changes the result); eos_id."""
    torch_device(device)
    if device != "cpu":
        raise ValueError("FALSIFY-BATCHED-OPTIONS-001 runs on the CPU (greedy CUDA decoding takes the graph decoder)")
    module = _module()
    temperatures = temperatures if temperatures is not None else [0, 0, 0.8, 1.5]
    top_ks = top_ks if top_ks is not None else [None, 3, 1, 1]
    if len(temperatures) != len(top_ks):
        raise ValueError("temperatures and top_ks are paired: one (temperature, top_k) decoding each")
    decodings = [(float(t), None if k is None else int(k)) for t, k in zip(temperatures, top_ks)]
    if any(t > 0 and k != 1 for t, k in decodings):
        raise ValueError("only greedy decoding and sampling with top_k = 1 are exactly comparable row by row")
    new_tokens = [int(n) for n in (new_tokens or [5, 12])]
    seeds = [int(s) for s in (seeds or [0, 3])]
    model = fixtures.random_model("tiny", seed=seed, initializer_range=initializer_range, device="cpu")
    eos, prompts = _eos_prompts(model, max(new_tokens))
    text_model = fixtures.fresh_copy(model)
    text_model.config = text_model.config.replace(eos_token_id=eos)   # generate_text(s) stop at the config's eos
    tokenizer = word_tokenizer(model.config.vocab_size)
    texts = [_text(p) for p in prompts]

    combinations = rows = mismatching = sampled = early = past_eos = 0
    mismatch = ""
    for api in ("ids", "texts"):
        for temperature, top_k in decodings:
            for n in new_tokens:
                for stop in (True, False):
                    for s in seeds:
                        combinations += 1
                        sampled += temperature > 0
                        options = dict(max_new_tokens=n, temperature=temperature, top_k=top_k, seed=s)
                        if api == "ids":
                            e = eos if stop else None
                            alone = [module.generate(model, p, eos_token_id=e, use_graph=False, **options)
                                     for p in prompts]
                            want = [(g.new_ids, g.stopped_on_eos) for g in alone]
                            got = [(g.new_ids, g.stopped_on_eos)
                                   for g in module.generate_batch(model, prompts, eos_token_id=e, **options)]
                            early += sum(1 for ids, stopped in want if stopped and len(ids) < n)
                            past_eos += sum(1 for ids, stopped in want if not stopped and eos in ids[:-1])
                        else:
                            want = [module.generate_text(text_model, tokenizer, t, stop_at_eos=stop, **options)
                                    for t in texts]
                            got = module.generate_texts(text_model, tokenizer, texts, stop_at_eos=stop, **options)
                        rows += len(want)
                        if len(got) != len(want):
                            mismatching += len(want)
                            mismatch = mismatch or (f"{_describe(api, temperature, top_k, n, stop, s)}: "
                                                    f"{len(got)} results for {len(want)} prompts")
                            continue
                        for row, (w, g) in enumerate(zip(want, got)):
                            if w != g:
                                mismatching += 1
                                mismatch = mismatch or (f"{_describe(api, temperature, top_k, n, stop, s)} row {row}: "
                                                        f"batched {g!r}, alone {w!r}")
    return {"combinations": combinations, "rows": rows, "mismatching_rows": mismatching, "mismatch": mismatch,
            "sampled_combinations": sampled, "rows_stopping_early": early, "rows_running_past_eos": past_eos,
            "eos_id": eos}


LAW_PROMPTS = (list(LATE_PROMPT), [100, 200, 300, 400, 7, 8, 9, 10, 11, 12, 13])


def batched_sampling_follows_law(*, device: str, seed: int = 0, initializer_range: float = 0.3,
                                 top_ks: list | None = None, temperatures: list | None = None,
                                 samples: int = 3000, chunk_rows: int = 4000, support_rows: int = 32,
                                 support_steps: int = 8, failure_probability: float = 1e-6,
                                 tolerance: dict | None = None) -> dict:
    """For each API (generate_batch; generate_texts with stop_at_eos False and the word
    tokenizer), temperature T and top_k = k: `samples` rows of each of two prompts (4 and 11
    tokens, interleaved, so every call pads) decode one token; no draw may fall outside the k
    largest of the prompt's first-step logits computed alone, and each prompt's frequencies must
    lie within tv_bound of softmax(logits / T) renormalised over those k, in float64. Then one
    generate_batch call of `support_rows` rows (both prompts) decodes `support_steps` tokens with
    output_logits=True per (T, k): every token must lie among the k largest logits of its row's
    step.

    Observations: outside_top_k (first-token draws outside the oracle's top k, ids outside the
    vocabulary included), support_outside (later-step draws outside their step's top k),
    support_draws, max_tv, tv_bound (statistical + rounding + logit terms), statistical_bound,
    rounding_bound, logit_bound, logit_diff (max |batched - alone| first-step logit), min_gap
    (smallest gap between the k-th and (k+1)-th logits of the oracle rows), tests, samples,
    tv_<api>_<prompt>_k<k>_T<T> per test, rtol, atol."""
    import torch

    torch_device(device)
    if device != "cpu":
        raise ValueError("FALSIFY-BATCHED-OPTIONS-002 runs on the CPU")
    module = _module()
    top_ks = [int(k) for k in (top_ks or [3, 16])]
    temperatures = [float(t) for t in (temperatures or [0.7, 1.5])]
    apis = ("ids", "texts")
    model = fixtures.random_model("tiny", seed=seed, initializer_range=initializer_range, device="cpu")
    vocab = model.config.vocab_size
    if not all(1 <= k < vocab for k in top_ks):
        raise ValueError(f"top_ks {top_ks} must lie in [1, {vocab})")
    tokenizer = word_tokenizer(vocab)
    prompts = [list(p) for p in LAW_PROMPTS]
    n_prompts = len(prompts)

    # The oracle's logits: each prompt's first step decoded alone, widened to float64.
    alone = [module.generate(model, p, max_new_tokens=1, output_logits=True, use_graph=False).logits[0]
             for p in prompts]
    oracle_rows = [tuple(float(x) for x in row.double()) for row in alone]
    batched = module.generate_batch(model, prompts, max_new_tokens=1, output_logits=True)
    logit_diff = max(float((g.logits[0].double() - a.double()).abs().max()) for g, a in zip(batched, alone))
    min_gap = min(sorted(row, reverse=True)[k - 1] - sorted(row, reverse=True)[k]
                  for row in oracle_rows for k in top_ks)

    tests = len(apis) * n_prompts * len(top_ks) * len(temperatures)
    subsets = len(apis) * n_prompts * len(temperatures) * sum(2 ** k - 2 for k in top_ks)
    rtol, atol = rtol_atol(tolerance, "float32")
    statistical = _hoeffding_tv(subsets, 1, samples, failure_probability) if subsets else 0.0
    rounding = (max(top_ks) * atol + rtol) / 2
    logit_bound = (math.exp(2 * logit_diff / min(temperatures)) - 1) / 2
    obs: dict = {}
    worst = 0.0
    outside = support_outside = support_draws = 0
    for a_index, api in enumerate(apis):
        for t_index, temperature in enumerate(temperatures):
            for k_index, k in enumerate(top_ks):
                drawn: list[int] = []
                total_rows = samples * n_prompts
                for c_index, start in enumerate(range(0, total_rows, chunk_rows)):
                    rows = [prompts[i % n_prompts] for i in range(start, min(start + chunk_rows, total_rows))]
                    call_seed = seed * 100000 + a_index * 10000 + t_index * 1000 + k_index * 100 + c_index
                    options = dict(max_new_tokens=1, temperature=temperature, top_k=k, seed=call_seed)
                    if api == "ids":
                        drawn += [g.new_ids[0] if g.new_ids else -1
                                  for g in module.generate_batch(model, rows, **options)]
                    else:
                        out = module.generate_texts(model, tokenizer, [_text(r) for r in rows], stop_at_eos=False,
                                                    **options)
                        drawn += [int(t.split()[-1][1:]) if len(t.split()) == len(r) + 1 else -1
                                  for t, r in zip(out, rows)]
                picked = torch.tensor(drawn, dtype=torch.int64)
                for r, row in enumerate(oracle_rows):
                    expected, kept = _top_k_softmax64(row, temperature, k)
                    own = picked[r::n_prompts]
                    outside += int((~torch.isin(own, torch.tensor(sorted(kept), dtype=torch.int64))).sum())
                    counts = torch.bincount(own.clamp(0, vocab - 1), minlength=vocab).tolist()
                    tv = _tv(counts, samples, expected)
                    obs[f"tv_{api}_{r}_k{k}_T{temperature:g}"] = tv
                    worst = max(worst, tv)
                if api == "ids":   # the support of later steps, from the rows' own kept logits
                    rows = [prompts[i % n_prompts] for i in range(support_rows)]
                    out = module.generate_batch(model, rows, max_new_tokens=support_steps, temperature=temperature,
                                                top_k=k, seed=seed * 100 + t_index * 10 + k_index,
                                                output_logits=True)
                    for g in out:
                        for step, token in enumerate(g.new_ids):
                            ordered = torch.sort(g.logits[step].double(), descending=True).values
                            support_draws += 1
                            support_outside += not (0 <= token < vocab and g.logits[step, token] >= ordered[k - 1])
                        support_draws += support_steps - len(g.new_ids)    # a row cut short counts as outside
                        support_outside += support_steps - len(g.new_ids)
    obs.update({"outside_top_k": outside, "support_outside": support_outside, "support_draws": support_draws,
                "max_tv": worst, "tv_bound": statistical + rounding + logit_bound,
                "statistical_bound": statistical, "rounding_bound": rounding, "logit_bound": logit_bound,
                "logit_diff": logit_diff, "min_gap": min_gap, "tests": tests, "samples": samples,
                "rtol": rtol, "atol": atol})
    return obs
