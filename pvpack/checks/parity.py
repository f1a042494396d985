"""Parity of a runtime with itself across backends: the reference backend (cpu, reference path,
fp32) against the backend under test (the falsifier's device, on the runtime's fast path when it
has one, else its reference path there). Logits per position, and greedy decoding judged
token by token against the reference (where the two first part: `first_divergence`).

Assumes: a causal LM whose greedy choice at each step is the argmax of its logits; one set of
weights behind both backends. On cpu with a runtime of one path, both backends are the same
code: the comparison then shows only nondeterminism (observation same_backend = 1).
"""

from __future__ import annotations

import torch

from ..protocol import FAST, GENERATE, IGNORE_INDEX, LOAD, LOGITS, REFERENCE
from ._base import load, subject_of, uses

_FALLBACK = {"bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5)}


def rtol_atol(tolerance, dtype: str) -> tuple[float, float]:
    if tolerance and dtype in tolerance:
        return float(tolerance[dtype]["rtol"]), float(tolerance[dtype]["atol"])
    return _FALLBACK[dtype]


def backends(runtime, device: str) -> tuple[str, str, int]:
    """(candidate path, its compute dtype for tolerances, same_backend)."""
    path = FAST if runtime.supports_path(FAST) else REFERENCE
    dtype = "bfloat16" if path == FAST else "float32"
    return path, dtype, int(device == "cpu" and path == REFERENCE)


@uses(LOAD, LOGITS)
def logits_parity(*, runtime, device: str, subject: str, batches: int = 1, tolerance: dict | None = None) -> dict:
    """Logits of held-out batches from the reference backend (a) and the backend under test (b).

    Observations: min_cosine / mean_cosine (per position, over the vocabulary), max_abs_diff,
    max_abs_ref, max_rel_diff, argmax_agreement (fraction of positions with the same top token),
    kl_max / kl_mean (KL(a || b) per position, nats), rtol / atol (of the candidate's dtype),
    positions, same_backend."""
    who = subject_of(subject)
    path, dtype, same = backends(runtime, device)
    rtol, atol = rtol_atol(tolerance, dtype)
    reference = load(runtime, who, "cpu", REFERENCE)
    candidate = load(runtime, who, device, path)
    cosines, kls = [], []
    max_abs_diff = max_abs_ref = 0.0
    agree = positions = 0
    for batch in who.heldout(batches):
        for row in range(batch.inputs.shape[0]):
            inputs, keep = batch.inputs[row:row + 1], batch.targets[row:row + 1] != IGNORE_INDEX
            a = reference.logits(inputs).double()[keep]                                      # (N, V)
            b = candidate.logits(inputs).double()[keep]                                      # (N, V)
            cosine = torch.nn.functional.cosine_similarity(a, b, dim=-1)
            # Identical rows agree whatever their norm. Two all-zero rows (a token whose embedding
            # transformers zeroes, a pad id opening a row, moved by no bias: Phi-3) have no cosine,
            # and the nan would count as -1, a false FAIL of two backends that agree exactly.
            cosines.append(torch.where((a == b).all(dim=-1), torch.ones_like(cosine), cosine))
            log_pa, log_pb = torch.log_softmax(a, dim=-1), torch.log_softmax(b, dim=-1)
            kls.append((log_pa.exp() * (log_pa - log_pb)).sum(dim=-1))
            max_abs_diff = max(max_abs_diff, float((a - b).abs().max()))
            max_abs_ref = max(max_abs_ref, float(a.abs().max()))
            agree += int((a.argmax(-1) == b.argmax(-1)).sum())
            positions += a.shape[0]
    reference.close()
    candidate.close()
    cosine, kl = torch.nan_to_num(torch.cat(cosines), nan=-1.0), torch.cat(kls)
    return {"min_cosine": float(cosine.min()), "mean_cosine": float(cosine.mean()), "max_abs_diff": max_abs_diff,
            "max_abs_ref": max_abs_ref, "max_rel_diff": max_abs_diff / max_abs_ref if max_abs_ref else float("inf"),
            "argmax_agreement": agree / positions, "kl_max": float(kl.max()), "kl_mean": float(kl.mean()),
            "rtol": rtol, "atol": atol, "positions": positions, "same_backend": same}


@uses(LOAD, LOGITS, GENERATE)
def greedy_decode_parity(*, runtime, device: str, subject: str, prompts: int = 6, prompt_tokens: int = 8,
                         new_tokens: int = 32, tolerance: dict | None = None) -> dict:
    """Greedy decoding through the runtime's own decode loop on both backends, from the openings of
    held-out documents, each decode judged against the reference backend's logits.

    A token is *consistent* when the reference, fed the decode's own prefix, ranks it within
    2 * (atol + rtol * |top logit|) of its top token (a near-tie within the candidate dtype's
    tolerance). A decode that stops early at an end-of-sequence token the reference would also
    pick is consistent to the end (it counts as new_tokens). Both decodes are judged, the
    reference backend's too: a CPU decode that samples where greedy was asked, beside a GPU path
    that takes its own argmax, is the same broken claim ("the backends give the same greedy
    output") seen from the other side, and two decodes that differ from the first token are not
    a pass because one of them is right.

    Observations: consistent_prefix (shortest run of consistent leading tokens over the prompts
    and both backends), first_divergence (= consistent_prefix), candidate_consistent_prefix and
    reference_consistent_prefix (each backend's own), agreeing_prefix (shortest run identical to
    the reference's own greedy decode), agreeing_tokens, near_tie_flips, largest_tie_gap,
    short_decodes (candidate decodes that stopped before new_tokens), new_tokens, prompts,
    same_backend."""
    who = subject_of(subject)
    path, dtype, same = backends(runtime, device)
    rtol, atol = rtol_atol(tolerance, dtype)
    reference = load(runtime, who, "cpu", REFERENCE)
    candidate = load(runtime, who, device, path)
    strict_min = new_tokens
    agreeing_total = short = 0
    judged = {"candidate": new_tokens, "reference": new_tokens, "flips": 0, "largest_tie_gap": 0.0}

    def consistent_run(ids: list[int], tokens: list[int], side: str) -> None:
        logits = reference.logits(torch.tensor([ids + tokens], dtype=torch.int64)).double()[0]   # (P + N, V)
        consistent = 0
        for j, token in enumerate(tokens):
            row = logits[len(ids) - 1 + j]
            top = float(row.max())
            gap = top - float(row[token])
            if gap > 2 * (atol + rtol * abs(top)):
                break
            if gap > 0:
                judged["flips"] += 1
                judged["largest_tie_gap"] = max(judged["largest_tie_gap"], gap)
            consistent += 1
        if consistent == len(tokens):  # every token, the end-of-sequence one included, is one the reference picks
            consistent = new_tokens
        judged[side] = min(judged[side], consistent)

    for ids in who.prompts(prompts, prompt_tokens):
        a = reference.generate(ids, new_tokens)
        b = candidate.generate(ids, new_tokens)
        short += int(len(b) < new_tokens)
        strict = 0
        for x, y in zip(a, b):
            if x != y:
                break
            strict += 1
        if a == b:  # both ended at the same end-of-sequence token, or both ran the full length
            strict = new_tokens
        strict_min = min(strict_min, strict)
        agreeing_total += sum(1 for x, y in zip(a, b) if x == y)
        consistent_run(ids, b, "candidate")
        consistent_run(ids, a, "reference")
    reference.close()
    candidate.close()
    consistent_min = min(judged["candidate"], judged["reference"])
    return {"consistent_prefix": consistent_min, "first_divergence": consistent_min,
            "candidate_consistent_prefix": judged["candidate"], "reference_consistent_prefix": judged["reference"],
            "agreeing_prefix": strict_min, "agreeing_tokens": agreeing_total, "near_tie_flips": judged["flips"],
            "largest_tie_gap": judged["largest_tie_gap"],
            "short_decodes": short, "new_tokens": new_tokens, "prompts": prompts, "same_backend": same}
