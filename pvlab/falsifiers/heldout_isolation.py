"""Held-out isolation: nothing a run trains with depends on its held-out documents.

runtime.pretrain.prepare_data splits the corpus by whole document, then fits a fresh run's BPE
tokenizer "trained on the training split only" (its docstring; docs/runtime.md: "held-out split
by whole document ... assignment by seeded content hash") and encodes the training stream with
it. The split being disjoint is verified by the runtime itself (verify_disjoint); what is not is
that the held-out text stays out of everything else the model is trained with. A tokenizer
fitted before the split — on every document — learns merges from the text val_loss is measured
on: the held-out score is flattered and the checkpoint's tokenizer is not its recipe's.

Oracle, independent of the runtime's corpus generator and of its split code: the corpora are
.py files the check writes into a temporary directory (text from the check's own seeded
generator), and which of them the runtime must hold out is derived here from the documented
rule — every distinct document ranked by sha256(f"{data_seed}:{sha256(text)}"), the
round(n * val_fraction) lowest held out — by salting each document until its rank falls on the
intended side; the check then asserts that the runtime's split is that one. Two properties:

* invariance: corpora that differ only in their held-out documents' text give byte-identical
  training-side outputs (tokenizer JSON, training documents, training token stream);
* canary: held-out documents, and only they, repeat a long word that no training document
  contains; the tokenizer prepare_data fits must not encode it in fewer tokens than the one it
  fits when those documents hold other text (no merge learned from held-out text alone).
"""

from __future__ import annotations

import hashlib
import importlib
import random
import tempfile
from pathlib import Path

from ._util import torch_device

CANARY = "zqxvbwjk"
CANARY_REPEATS = 200
NUM_TRAIN, NUM_HELDOUT = 12, 3
VAL_FRACTION = 0.2             # round(15 * 0.2) = 3 held out
TOKENIZER_VOCAB, MODEL_VOCAB = 400, 512

_WORDS = ("total", "count", "value", "items", "index", "result", "name", "size", "left", "right",
          "limit", "step", "scale", "offset", "buffer", "record", "window", "queue", "table", "cache")


def _rank(text: str, data_seed: int) -> str:
    """The documented split key of a document: sha256 of the seed and the text's sha256."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return hashlib.sha256(f"{data_seed}:{digest}".encode()).hexdigest()


def _salted(body: str, data_seed: int, held_out: bool) -> str:
    """body plus a salt comment, the first salt whose rank falls on the intended side: held-out
    documents rank below '4' (first hex digit 0-3), training documents at or above it, so the
    NUM_HELDOUT lowest ranks are exactly the held-out ones."""
    for salt in range(10_000):
        text = f"{body}# salt {salt}\n"
        if (_rank(text, data_seed) < "4") == held_out:
            return text
    raise AssertionError("no salt puts the document on its side")  # pragma: no cover - 2**-10000


def _code(rng: random.Random, lines: int) -> str:
    """A small Python function from the check's own generator (no canary in it)."""
    name = "_".join(rng.sample(_WORDS, 2))
    out = [f"def {name}({rng.choice(_WORDS)}, {rng.choice(_WORDS)}):", f"    {rng.choice(_WORDS)} = 0"]
    for _ in range(lines):
        a, b = rng.choice(_WORDS), rng.choice(_WORDS)
        out.append(f"    {a} = {a} {rng.choice('+-*')} {b} + {rng.randint(0, 99)}")
    out.append(f"    return {rng.choice(_WORDS)}")
    return "\n".join(out) + "\n"


def _prose(rng: random.Random) -> str:
    """Held-out text of another kind: comments of ordinary words (no canary)."""
    return "".join("# " + " ".join(rng.choice(_WORDS) for _ in range(12)) + "\n" for _ in range(20))


def _corpora(seed: int) -> tuple[list[str], dict[str, list[str]]]:
    """(training documents, {variant: held-out documents}) for three corpora sharing the
    training documents: 'canary' (held-out documents repeat CANARY), 'plain' (code instead) and
    'prose' (comments instead)."""
    rng = random.Random(seed)
    train = [_salted(_code(rng, rng.randint(4, 10)), seed, held_out=False) for _ in range(NUM_TRAIN)]
    canary_line = " ".join([CANARY] * CANARY_REPEATS)
    heldout = {
        "canary": [_salted(f"# {canary_line}\n{CANARY} = {i}\n{_code(rng, 3)}", seed, held_out=True)
                   for i in range(NUM_HELDOUT)],
        "plain": [_salted(_code(rng, rng.randint(6, 12)), seed, held_out=True) for _ in range(NUM_HELDOUT)],
        "prose": [_salted(_prose(rng), seed, held_out=True) for _ in range(NUM_HELDOUT)],
    }
    assert not any(CANARY in d for d in train) and not any(CANARY in d for v in ("plain", "prose")
                                                          for d in heldout[v])
    return train, heldout


def _canary_tokens(tokenizer) -> int:
    """Tokens of the canary as it occurs in running text (after a space: one pre-token)."""
    return len(tokenizer.encode(f" {CANARY}").ids)


def heldout_isolated(*, device: str, seed: int = 0) -> dict:
    """prepare_data (fresh tokenizer) on three corpora written here into .py files, each the same
    NUM_TRAIN training documents plus NUM_HELDOUT held-out ones ('canary': a comment of CANARY
    x CANARY_REPEATS each; 'plain': other code; 'prose': comments), data_seed = seed,
    val_fraction 0.2, tokenizer_vocab_size 400. Every document is salted so the documented rule
    holds out exactly the intended ones; the runtime's split is compared with that.

    Observations: corpora (3); heldout_documents (the runtime's held-out count, each corpus
    alike, else -1); split_mismatches (corpora whose training list, in file order, or held-out
    set differs from the expected one); tokenizer_changed, train_documents_changed,
    train_stream_changed (corpora 'canary' and 'prose' whose tokenizer JSON, training documents
    or training token stream differ from those of 'plain'); canary_tokens (' zqxvbwjk' encoded by
    the tokenizer fitted on the 'canary' corpus) and canary_tokens_without (by the one fitted on
    'plain')."""
    torch_device(device)           # the data preparation runs on the CPU; a bad name still fails
    pretrain = importlib.import_module("pvlab.runtime.pretrain")
    train, heldout = _corpora(seed)

    prepared = {}
    split_mismatches = 0
    counts = set()
    with tempfile.TemporaryDirectory(prefix="pv-heldout-") as tmp:
        for variant, held in heldout.items():
            directory = Path(tmp) / variant
            directory.mkdir()
            # file names interleave held-out documents among training ones; path order = list order
            documents = train[:4] + held[:1] + train[4:8] + held[1:2] + train[8:] + held[2:]
            for i, text in enumerate(documents):
                (directory / f"doc_{i:02d}.py").write_text(text, encoding="utf-8", newline="\n")
            recipe = pretrain.Recipe(corpus_dir=str(directory), data_seed=seed, val_fraction=VAL_FRACTION,
                                     tokenizer_vocab_size=TOKENIZER_VOCAB)
            p = pretrain.prepare_data(recipe, vocab_size=MODEL_VOCAB)
            prepared[variant] = p
            counts.add(len(p.heldout_documents))
            if list(p.train_documents) != train or sorted(p.heldout_documents) != sorted(held):
                split_mismatches += 1

    base = prepared["plain"]
    others = [prepared["canary"], prepared["prose"]]
    tokenizer_changed = sum(p.tokenizer.to_str() != base.tokenizer.to_str() for p in others)
    train_documents_changed = sum(list(p.train_documents) != list(base.train_documents) for p in others)
    train_stream_changed = sum(p.train_stream.dtype != base.train_stream.dtype
                               or p.train_stream.shape != base.train_stream.shape
                               or not bool((p.train_stream == base.train_stream).all()) for p in others)
    return {"corpora": len(prepared), "heldout_documents": counts.pop() if len(counts) == 1 else -1,
            "split_mismatches": split_mismatches, "tokenizer_changed": tokenizer_changed,
            "train_documents_changed": train_documents_changed, "train_stream_changed": train_stream_changed,
            "canary_tokens": _canary_tokens(prepared["canary"].tokenizer),
            "canary_tokens_without": _canary_tokens(base.tokenizer)}
