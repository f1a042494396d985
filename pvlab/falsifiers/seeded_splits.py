"""Seeded splits: both held-out split rules are partitions fixed by data_seed, and data_seed moves them.

The runtime has two train/held-out split rules, and both are documented as seeded:

* a named corpus (recipe `corpus="stdlib"`, `"stdlib/json"`) is split by whole file with
  `runtime.corpus.split_by_path`: a file is held out when sha256("<seed>:<relative path>"), read as
  a fraction of 2^256, is below val_fraction (its docstring; docs/runtime.md: "split by whole file
  on sha256(seed:path)"; the module docstring: "depends only on the seed and the file's relative
  path"). Only a corpus where no file, or every file, falls below the threshold is corrected (the
  lowest-ranked file held out, the highest trained). The held-out share is therefore not a fixed
  count: it is the number of files under the threshold.
* a document list (synthetic or `corpus_dir`) is split with `runtime.data.split_documents`:
  "assignment by seeded content hash" (docs/runtime.md); distinct documents ranked by
  sha256(f"{seed}:{sha256(text)}"), the min(n - 1, max(1, round(n * val_fraction))) lowest held
  out (the rule its docstring and FALSIFY-HELDOUT-ISOLATION-001 read).

runtime.pretrain.split_corpus passes the recipe's data_seed to whichever applies, so a cross-seed
study of held-out loss measures a different held-out set per seed. A seed that does not reach the
split (a parameter given a default and not passed on) keeps every split deterministic, disjoint
and of the right size: only comparing seeds shows it.

Oracle, independent of the runtime's split code: the inputs are 40 file paths / 40 documents the
check writes; the documented rules are written here as a formula (sha256 threshold, the rounded
count) and as set arithmetic (disjoint, covering, equal sets) without calling the runtime's
ranking. For each seed: the split is a partition of the input, the held-out count is the
formula's, the held-out set is the documented one, a second call gives the same lists; across
seeds, no two seeds hold out the same set. For a correct seeded rule a pair of seeds repeats its
held-out set with probability (p^2 + (1 - p)^2)^40 = 0.68^40 ~ 2.0e-7 (split_by_path, p = 0.2 per
file, sha256 read as a random oracle) or 1/C(40, 8) = 1/76,904,685 ~ 1.3e-8 (split_documents, 8
of 40); with 6 seeds, 15 pairs per rule: under 3.3e-6 in all. The inputs are fixed, so the outcome
is too: the check confirms the documented sets of the seeds it uses are pairwise distinct.
"""

from __future__ import annotations

import hashlib
import importlib
from itertools import combinations
from pathlib import Path

NUM_INPUTS = 40
VAL_FRACTION = 0.2
SEEDS = (0, 1, 2, 3, 4, 5)


def _paths_and_texts() -> list[tuple[str, str]]:
    """40 (relative path, text) pairs: four packages of ten modules, every text distinct."""
    return [(f"pkg{i // 10}/module_{i:02d}.py", f"VALUE_{i:02d} = {i * 7 + 3}\n\n\ndef f_{i:02d}():\n    return VALUE_{i:02d}\n")
            for i in range(NUM_INPUTS)]


def _documents() -> list[str]:
    """40 distinct documents (different text from the files', so the two rules see other inputs)."""
    return [f"# document {i}\nclass Item{i:02d}:\n    size = {i * 11 + 5}\n" for i in range(NUM_INPUTS)]


def _fraction(key: str) -> float:
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest(), 16) / 2 ** 256


def expected_path_heldout(paths: list[str], seed: int, val_fraction: float) -> frozenset[str]:
    """The documented named-corpus rule: held out iff sha256(f"{seed}:{path}") / 2^256 < val_fraction;
    none under the threshold: the lowest held out; all under it: the highest trained."""
    fractions = {path: _fraction(f"{seed}:{path}") for path in paths}
    held = {path for path, value in fractions.items() if value < val_fraction}
    if not held:
        held = {min(paths, key=fractions.__getitem__)}
    elif len(held) == len(paths):
        held.discard(max(paths, key=fractions.__getitem__))
    return frozenset(held)


def expected_document_count(n: int, val_fraction: float) -> int:
    """The documented document rule's held-out count: round(n * val_fraction), at least 1, at most n - 1."""
    return min(n - 1, max(1, round(n * val_fraction)))


def expected_document_heldout(documents: list[str], seed: int, val_fraction: float) -> frozenset[str]:
    """The lowest expected_document_count documents by sha256(f"{seed}:{sha256(text)}")."""
    def key(text: str) -> str:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        return hashlib.sha256(f"{seed}:{digest}".encode("utf-8")).hexdigest()

    return frozenset(sorted(documents, key=key)[:expected_document_count(len(documents), val_fraction)])


def _is_partition(inputs: list[str], train: list[str], held: list[str]) -> bool:
    """train and held disjoint, each without repeats, together exactly the inputs."""
    return (len(train) == len(set(train)) and len(held) == len(set(held)) and not set(train) & set(held)
            and set(train) | set(held) == set(inputs))


def splits_seeded(*, device: str = "cpu", val_fraction: float = VAL_FRACTION, seeds: tuple[int, ...] = SEEDS) -> dict:
    """runtime.corpus.split_by_path on a 40-file corpus built here and runtime.data.split_documents
    on 40 documents, each at every seed in `seeds` (twice), val_fraction 0.2.

    Observations: seeds (how many); inputs (files = documents = 40); partition_errors ((rule,
    seed) whose train and held-out lists are not a partition of the input); share_errors ((rule,
    seed) whose held-out count is not the documented formula's); rule_mismatches ((rule, seed)
    whose held-out set is not the documented one); nondeterministic ((rule, seed) whose second
    call returns other lists); seeds_sharing_a_split (pairs of seeds, both rules counted, whose
    held-out sets are equal); oracle_sharing_a_split (the same count for the documented sets:
    0 confirms the fixture is not one of the unlucky ones); heldout_files_min / _max (the
    runtime's named-corpus held-out counts over the seeds); heldout_documents (expected count)."""
    if device != "cpu":
        raise ValueError(f"the split rules are host code; device {device!r} is not judged here")
    corpus = importlib.import_module("pvlab.runtime.corpus")   # attributes read at call time (planted bugs swap them)
    data = importlib.import_module("pvlab.runtime.data")

    pairs = _paths_and_texts()
    paths = [path for path, _ in pairs]
    named = corpus.Corpus(spec="seeded-splits", root=Path("seeded-splits"),
                          files=tuple(corpus.SourceFile(path, text) for path, text in pairs))
    documents = _documents()

    partition_errors = share_errors = rule_mismatches = nondeterministic = 0
    observed: dict[str, list[frozenset[str]]] = {"paths": [], "documents": []}
    oracle: dict[str, list[frozenset[str]]] = {"paths": [], "documents": []}
    file_counts = []
    for seed in seeds:
        # named corpus: by path
        runs = [corpus.split_by_path(named, val_fraction=val_fraction, seed=seed) for _ in range(2)]
        (train, held), (train2, held2) = ([[s.path for s in side] for side in run] for run in runs)
        expected = expected_path_heldout(paths, seed, val_fraction)
        partition_errors += not _is_partition(paths, train, held)
        share_errors += len(held) != len(expected)
        rule_mismatches += set(held) != expected
        nondeterministic += (train, held) != (train2, held2)
        observed["paths"].append(frozenset(held))
        oracle["paths"].append(expected)
        file_counts.append(len(held))

        # document list: by content
        train_docs, held_docs = data.split_documents(documents, val_fraction=val_fraction, seed=seed)
        again = data.split_documents(documents, val_fraction=val_fraction, seed=seed)
        expected_docs = expected_document_heldout(documents, seed, val_fraction)
        partition_errors += not _is_partition(documents, list(train_docs), list(held_docs))
        share_errors += len(held_docs) != expected_document_count(len(documents), val_fraction)
        rule_mismatches += set(held_docs) != expected_docs
        nondeterministic += (list(train_docs), list(held_docs)) != (list(again[0]), list(again[1]))
        observed["documents"].append(frozenset(held_docs))
        oracle["documents"].append(expected_docs)

    def sharing(sets: dict[str, list[frozenset[str]]]) -> int:
        return sum(a == b for rule in sets.values() for a, b in combinations(rule, 2))

    return {"seeds": len(seeds), "inputs": NUM_INPUTS,
            "partition_errors": int(partition_errors), "share_errors": int(share_errors),
            "rule_mismatches": int(rule_mismatches), "nondeterministic": int(nondeterministic),
            "seeds_sharing_a_split": sharing(observed), "oracle_sharing_a_split": sharing(oracle),
            "heldout_files_min": min(file_counts), "heldout_files_max": max(file_counts),
            "heldout_documents": expected_document_count(len(documents), val_fraction)}
