"""What the data path hands to the loss: every real target token scored once, nothing else.

Claims about runtime.data, runtime.corpus, runtime.pretrain.PreparedData and Trainer.evaluate
that no loss bound sees: a padding target scored as a token, a token-weighted mean that is
really a mean of batch means, documents that run into each other in the token stream, eval
windows taken from the wrong stream, a held-out split of the wrong size. Each oracle is built in
the check from the documented definition (float64 NLL of each sequence alone, the documents
themselves, the streams themselves, the binomial spread of a hash split), never from the
runtime function under test.
"""

from __future__ import annotations

import hashlib
import math

import torch

from . import fixtures
from ._util import generator, rtol_atol, torch_device


def _nll64(model, sequence: list[int], device) -> tuple[float, int]:
    """Summed next-token NLL of one sequence *alone* (no padding anywhere), in float64 from the
    model's logits, and its number of targets."""
    ids = torch.tensor([sequence[:-1]], device=device)
    with torch.no_grad():
        logits = model(ids)[0].to("cpu", torch.float64)                                 # (T, V)
    targets = torch.tensor(sequence[1:])
    return float((torch.logsumexp(logits, -1) - logits.gather(1, targets[:, None]).squeeze(1)).sum()), len(targets)


def eval_scores_every_real_token(*, device: str, path: str | None = None, lengths: list | None = None,
                                 seed: int = 0, short_text: str = "def fib(n):\n    if n < 2:\n        return n\n",
                                 tolerance: dict | None = None) -> dict:
    """Trainer.eval_batch and Trainer.evaluate on batches of sequences of unequal lengths (built
    by LMBatch.from_sequences, right-padded), against a float64 oracle: each sequence scored
    alone, the NLL summed over every real target and divided by their count.

    Batches: random token sequences of `lengths` split as [all but the last] and [the last] (a
    short last batch, as a held-out set's tail is), the last one replaced by the first tokens of
    `short_text` (code in the training distribution). Observations: batch_rel_diff (first batch's eval_batch
    vs its oracle), evaluate_rel_diff (evaluate over both batches vs the oracle over all their
    tokens), target_tokens (num_target_tokens of the batches), expected_tokens (sum of len - 1),
    padded_rows, rtol (the contract's tolerance for the path's dtype)."""
    from pvlab.runtime import devices
    from pvlab.runtime.data import LMBatch
    from pvlab.runtime.trainer import Trainer

    dev = torch_device(device)
    path = path or devices.default_path(dev)
    rtol, _ = rtol_atol(tolerance, "bfloat16" if path == "fast" else "float32")
    model = fixtures.model("tiny-trained", device, path)
    lengths = [int(n) for n in (lengths or [17, 9, 4, 6])]
    vocab = model.config.vocab_size
    sequences = [torch.randint(1, vocab, (n,), generator=generator(seed + i)).tolist() for i, n in enumerate(lengths)]
    # The short last batch is code the model has learnt (low loss) after random tokens (high
    # loss): weighting batches instead of tokens then moves the mean by far more than rounding.
    sequences[-1] = model.tokenizer.encode(short_text).ids[:lengths[-1]]
    groups = [sequences[:-1], sequences[-1:]]
    batches = [LMBatch.from_sequences(group) for group in groups]
    trainer = Trainer(model)
    oracle = [[_nll64(model, s, dev) for s in group] for group in groups]
    first_total, first_count = sum(n for n, _ in oracle[0]), sum(c for _, c in oracle[0])
    all_total = sum(n for group in oracle for n, _ in group)
    all_count = sum(c for group in oracle for _, c in group)
    batch_loss = trainer.eval_batch(batches[0])
    evaluated = trainer.evaluate(batches)
    return {"batch_rel_diff": abs(batch_loss - first_total / first_count) / (first_total / first_count),
            "evaluate_rel_diff": abs(evaluated - all_total / all_count) / (all_total / all_count),
            "target_tokens": sum(b.num_target_tokens for b in batches), "expected_tokens": all_count,
            "padded_rows": sum(n < max(lengths[:-1]) for n in lengths[:-1]), "rtol": rtol}


def stream_terminates_documents(*, device: str, documents: int = 40, vocab_size: int = 320, seed: int = 0) -> dict:
    """Encode `documents` synthetic documents with a tokenizer the runtime trains on them
    (data.train_tokenizer, encode_documents, token_stream) and cut the stream at every
    END_OF_TEXT id: the pieces must decode to the documents, in order, one each.

    Observations: documents, end_tokens (END_OF_TEXT ids in the stream), stream_ends_with_end,
    decoded_mismatches (pieces whose decoding is not the document of the same index, or missing)."""
    from pvlab.runtime import data

    torch_device(device)
    texts = data.synthetic_python_corpus(documents, seed)
    tokenizer = data.train_tokenizer(texts, vocab_size)
    end = tokenizer.token_to_id(data.END_OF_TEXT)
    stream = data.token_stream(data.encode_documents(tokenizer, texts)).tolist()
    pieces, current = [], []
    for token in stream:
        if token == end:
            pieces.append(current)
            current = []
        else:
            current.append(token)
    if current:
        pieces.append(current)
    mismatches = sum(1 for i, text in enumerate(texts) if i >= len(pieces) or tokenizer.decode(pieces[i]) != text)
    return {"documents": len(texts), "end_tokens": stream.count(end),
            "stream_ends_with_end": int(bool(stream) and stream[-1] == end), "decoded_mismatches": mismatches}


def eval_windows_come_from_their_stream(*, device: str, checkpoint: str = "tiny-trained", batches: int = 2) -> dict:
    """The fixed eval windows of a recipe (PreparedData.heldout_batches / train_eval_batches, what
    pretrain reports as val_loss / train_loss): row i of the held-out batches must be the held-out
    stream's tokens [i(T+1), (i+1)(T+1)), inputs then the last target, and likewise for the
    training windows and the training stream.

    Observations: heldout_rows, train_rows, heldout_row_mismatches, train_row_mismatches,
    streams_differ (1 when the two streams' first windows differ: otherwise the check could not
    tell them apart)."""
    import dataclasses

    torch_device(device)
    recipe = dataclasses.replace(fixtures.recipe(checkpoint), eval_batches=batches)
    prepared = fixtures.prepared_data(checkpoint)
    observations = {}
    windows = {}
    for side, built, stream in (("heldout", prepared.heldout_batches(recipe), prepared.heldout_stream),
                                ("train", prepared.train_eval_batches(recipe), prepared.train_stream)):
        rows = torch.cat([torch.cat((b.inputs, b.targets[:, -1:]), dim=1) for b in built])      # (N, T+1)
        width = rows.shape[1]
        expected = stream[:rows.shape[0] * width].view(-1, width) if stream.numel() >= rows.shape[0] * width else None
        observations[f"{side}_rows"] = rows.shape[0]
        observations[f"{side}_row_mismatches"] = (rows.shape[0] if expected is None or expected.shape != rows.shape
                                                  else int((rows != expected).any(dim=1).sum()))
        windows[side] = stream[:width]
    observations["streams_differ"] = int(not torch.equal(windows["heldout"], windows["train"]))
    return observations


def split_holds_out_val_fraction(*, device: str, splitter: str = "path", files: int = 400, val_fraction: float = 0.1,
                                 seed: int = 0) -> dict:
    """A held-out split of `files` distinct synthetic files: runtime.corpus.split_by_path (by
    path) or runtime.data.split_documents (by content). Its held-out share must be val_fraction
    within binomial spread (the split is a hash, i.e. a Bernoulli draw per file), the two sides
    must partition the files, and (by path) a file's side must not move when other files are
    removed.

    Observations: held_out_fraction, binomial_sigma (sqrt(p(1-p)/n)), overlap, missing,
    moved_when_others_removed (path splitter; 0 for the content splitter, which promises no such
    stability)."""
    from pathlib import Path

    from pvlab.runtime import corpus, data

    torch_device(device)
    texts = [f"def f_{i}(x):\n    return x + {i}\n" for i in range(files)]
    paths = [f"pkg/{hashlib.sha256(str(i).encode()).hexdigest()[:8]}/m{i}.py" for i in range(files)]
    if splitter == "path":
        whole = corpus.Corpus("synthetic", Path("."), tuple(corpus.SourceFile(p, t) for p, t in zip(paths, texts)))
        train, held = corpus.split_by_path(whole, val_fraction=val_fraction, seed=seed)
        train_keys, held_keys = {s.path for s in train}, {s.path for s in held}
        half = corpus.Corpus("half", Path("."), whole.files[::2])
        half_train, half_held = corpus.split_by_path(half, val_fraction=val_fraction, seed=seed)
        moved = (sum(1 for s in half_held if s.path not in held_keys)
                 + sum(1 for s in half_train if s.path not in train_keys))
        everything = set(paths)
    elif splitter == "document":
        train_texts, held_texts = data.split_documents(texts, val_fraction=val_fraction, seed=seed)
        train_keys, held_keys, moved, everything = set(train_texts), set(held_texts), 0, set(texts)
    else:
        raise ValueError(f"splitter must be 'path' or 'document', got {splitter!r}")
    return {"held_out_fraction": len(held_keys) / files,
            "binomial_sigma": math.sqrt(val_fraction * (1 - val_fraction) / files),
            "overlap": len(train_keys & held_keys), "missing": len(everything - train_keys - held_keys),
            "moved_when_others_removed": moved}
