"""The split's leak guard refuses every split that leaks, and only those.

runtime.pretrain.split_corpus ends both of its split paths (a named corpus split by file path,
a document list split by content) with runtime.data.verify_disjoint(train, held_out), which
docs/runtime.md says proves the sides disjoint: it raises DataError when a held-out document also
occurs in the training split, naming the sha256 of the first one that
runtime.data.overlapping_documents returns. The split rules make a leak rare (a named corpus
with one text at two paths is the realistic one), so a guard that never fires looks like a
guard that holds. It can only be judged by handing it leaks.

The oracle is set arithmetic on documents the check writes itself. The shared documents of each
case are known, and their sha256 digests are computed here with hashlib. Nothing of the runtime
decides what is expected.
"""

from __future__ import annotations

import hashlib
import importlib


def _documents(count: int, seed: int) -> list[str]:
    """`count` distinct small Python documents from the check's own generator."""
    return [f"def f_{seed}_{i}(x):\n    return x * {i + 3} + {seed}\n" for i in range(count)]


def _digest(document: str) -> str:
    return hashlib.sha256(document.encode("utf-8")).hexdigest()


def leak_guard_refuses_leaks(*, device: str = "cpu", max_shared: int = 4, seed: int = 0) -> dict:
    """Splits of 12 distinct documents (6 train, 6 held out) with k = 0..max_shared documents on
    both sides (at the end of train, at the start of held-out), and the same again with each
    shared document repeated on the training side.

    Observations: cases; leaky_cases (k > 0); overlap_mismatches (cases whose
    overlapping_documents is not the sorted sha256 digests of the shared documents);
    missed_leaks (leaky cases verify_disjoint let through); false_refusals (disjoint cases it
    refused, or refused with an error other than DataError)."""
    if device != "cpu":
        raise ValueError(f"the leak guard is host code; device {device!r} is not judged here")
    data = importlib.import_module("pvlab.runtime.data")   # read at call time: planted bugs swap its functions
    errors = importlib.import_module("pvlab.runtime.errors")

    documents = _documents(12, seed)
    train_only, held_only = documents[:6], documents[6:]
    cases = leaky = mismatches = missed = false_refusals = 0
    for shared_count in range(max_shared + 1):
        shared = held_only[:shared_count]
        for repeats in (1, 2):
            train = train_only + shared * repeats
            held_out = held_only
            cases += 1
            leaky += bool(shared)
            expected = sorted({_digest(d) for d in shared})
            mismatches += list(data.overlapping_documents(train, held_out)) != expected
            try:
                data.verify_disjoint(train, held_out)
                refused = False
            except errors.DataError:
                refused = True
            except Exception:  # noqa: BLE001 - a guard that crashes is not a refusal
                refused, false_refusals = False, false_refusals + 1
            missed += bool(shared) and not refused
            false_refusals += (not shared) and refused
    return {"cases": cases, "leaky_cases": leaky, "overlap_mismatches": mismatches, "missed_leaks": missed,
            "false_refusals": false_refusals}
