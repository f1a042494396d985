"""pvlab.falsifiers.seeded_splits (FALSIFY-SEEDED-SPLITS-001, -003): holds on the runtime, false under
named_corpus_split_ignores_seed, and reports a split that trains on a file it holds out."""

from __future__ import annotations

from falsifier_helpers import assert_holds_and_killed, observe
from pvlab.falsifiers import seeded_splits
from pvlab.falsifiers.mutants import registry
from pvlab.runtime import corpus

CONTRACT, FALSIFIER, BUG = "seeded-splits", "FALSIFY-SEEDED-SPLITS-001", "named_corpus_split_ignores_seed"


def test_holds_on_the_runtime_and_fails_under_its_planted_bug():
    assert_holds_and_killed(CONTRACT, FALSIFIER, BUG)


def test_under_the_bug_every_pair_of_seeds_shares_the_named_corpus_split():
    with registry()[BUG]():
        observations, _ = observe(CONTRACT, FALSIFIER)
    # seeds 1..5 split as seed 0 does: the 15 pairs of the named-corpus rule; the documents' rule is untouched
    assert observations["seeds_sharing_a_split"] == 15 and observations["rule_mismatches"] == 5
    assert observations["partition_errors"] == 0 and observations["nondeterministic"] == 0


def test_a_split_that_trains_on_a_held_out_file_is_reported(monkeypatch):
    original = corpus.split_by_path

    def leaking(source_corpus, *, val_fraction, seed):
        train, held_out = original(source_corpus, val_fraction=val_fraction, seed=seed)
        return train + held_out[:1], held_out        # the first held-out file is trained on too

    monkeypatch.setattr(corpus, "split_by_path", leaking)
    observations, judgement = observe(CONTRACT, FALSIFIER)
    assert observations["partition_errors"] == 6 and not judgement.holds


def test_the_documented_rules_written_in_the_check():
    assert seeded_splits.expected_document_count(40, 0.2) == 8
    assert seeded_splits.expected_document_count(3, 0.01) == 1 and seeded_splits.expected_document_count(3, 0.99) == 2
    # a corpus of two files at a tiny fraction: nothing under the threshold, the lowest-ranked one is held out
    assert len(seeded_splits.expected_path_heldout(["a.py", "b.py"], 0, 1e-12)) == 1


def test_a_fractional_count_holds_on_the_runtime_and_a_floored_count_is_killed():
    """FALSIFY-SEEDED-SPLITS-003: at val_fraction 0.24, 40 * 0.24 = 9.6 documents round to 10."""
    assert_holds_and_killed(CONTRACT, "FALSIFY-SEEDED-SPLITS-003", "heldout_count_floored")
    assert seeded_splits.expected_document_count(40, 0.24) == 10
    with registry()["heldout_count_floored"]():
        observations, _ = observe(CONTRACT, "FALSIFY-SEEDED-SPLITS-003")
    assert observations["share_errors"] == 6 and observations["rule_mismatches"] == 6
