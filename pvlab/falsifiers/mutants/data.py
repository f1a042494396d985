"""Planted bugs of runtime.data: the held-out split and the training sampler.

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

from pv.mutation import mutant

from .planting import plant, swap


@mutant("heldout_split_leaks_into_training")
def heldout_split_leaks_into_training():
    """The held-out documents are also put in the training split (the split is computed, then the
    training side is built from the whole corpus): val_loss flatters the model.

    Imitates the split-leak defect the eval-methodology contract guards against (a validation set
    cut from windows of the same stream the model trains on). Seams: runtime.data.split_documents,
    and runtime.data.verify_disjoint (the runtime's own guard, which would refuse the leak)."""
    from pvlab.runtime import data

    original = data.split_documents

    def split_documents(documents, *, val_fraction, seed):
        train, held_out = original(documents, val_fraction=val_fraction, seed=seed)
        return train + held_out, held_out

    def verify_disjoint(train, held_out):
        return None  # the runtime's own guard would refuse the leak: it is skipped too

    with plant("heldout_split_leaks_into_training",
               swap(data, "split_documents", split_documents),
               swap(data, "verify_disjoint", verify_disjoint)):
        yield


@mutant("batch_order_not_seeded")
def batch_order_not_seeded():
    """The training sampler draws its windows from one process-wide generator instead of a
    generator seeded per run: the same seed gives a different batch order in every run after the
    first, so seeded runs do not reproduce.

    Imitates "unseeded randomness in the data order" (INV-TRAIN-003). Seam:
    runtime.data.random_batches."""
    import torch

    from pvlab.runtime import data

    original = data.random_batches
    shared = torch.Generator(device="cpu").manual_seed(2024)

    def random_batches(stream, *, batch_size, seq_len, seed):
        if stream.numel() < seq_len + 1:
            return original(stream, batch_size=batch_size, seq_len=seq_len, seed=seed)

        def batches():
            while True:
                starts = torch.randint(0, stream.numel() - seq_len, (batch_size,), generator=shared)
                yield data.LMBatch.from_sequences(torch.stack([stream[s:s + seq_len + 1] for s in starts.tolist()]))

        return batches()

    with plant("batch_order_not_seeded", swap(data, "random_batches", random_batches)):
        yield



@mutant("random_window_last_start_never_drawn")
def random_window_last_start_never_drawn():
    """The random-window sampler draws starts from [0, N - seq_len - 1) instead of
    [0, N - seq_len): the stream's last window is never trained on (its final token never a
    target).

    Imitates an off-by-one in torch.randint's exclusive bound. Seam: runtime.data.random_batches."""
    import torch

    from pvlab.runtime import data

    def random_batches(stream, *, batch_size, seq_len, seed):
        generator = torch.Generator(device="cpu").manual_seed(seed)
        while True:
            starts = torch.randint(0, stream.numel() - seq_len - 1, (batch_size,), generator=generator)
            yield data.LMBatch.from_sequences(torch.stack([stream[s:s + seq_len + 1] for s in starts.tolist()]))

    with plant("random_window_last_start_never_drawn", swap(data, "random_batches", random_batches)):
        yield


@mutant("packed_long_document_truncated")
def packed_long_document_truncated():
    """pack_documents keeps only the first row-sized piece of a document longer than a row: the
    rest of every long document is never trained on.

    Imitates truncation where splitting was meant. Seam: runtime.data.pack_documents."""
    from pvlab.runtime import data

    original = data.pack_documents

    def pack_documents(documents, *, seq_len):
        return original([list(d)[:seq_len + 1] for d in documents], seq_len=seq_len)

    with plant("packed_long_document_truncated", swap(data, "pack_documents", pack_documents)):
        yield


# ---- third blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/independent-mutants.md, "Third batch"; probes in tests/falsifiers/third_mutant_probes.py)


@mutant("micro_batch_split_drops_last_column")
def micro_batch_split_drops_last_column():
    """LMBatch.split cuts each micro-batch to the index of its last counted column instead of
    that index + 1: the last target of the micro-batch's longest rows (of every full-width
    row) is dropped, so an accumulated step trains on fewer tokens than the batch holds and its
    loss differs from the one-pass loss.

    Imitates using the largest column index as a width (off by one). Seam:
    runtime.data.LMBatch.split."""
    from pvlab.runtime import data
    from pvlab.runtime.data import LMBatch

    def split(self, rows):
        if rows <= 0:
            raise data.DataError(f"micro-batch size must be positive, got {rows}")
        parts = []
        for start in range(0, self.inputs.shape[0], rows):
            targets = self.targets[start:start + rows]
            counted_columns = (targets != data.IGNORE_INDEX).any(dim=0).nonzero()
            width = max(1, int(counted_columns.max())) if counted_columns.numel() else 1   # the defect: no + 1
            documents = None if self.document_ids is None else self.document_ids[start:start + rows, :width]
            parts.append(LMBatch(self.inputs[start:start + rows, :width].contiguous(),
                                 targets[:, :width].contiguous(),
                                 None if documents is None else documents.contiguous()))
        return parts

    with plant("micro_batch_split_drops_last_column", swap(LMBatch, "split", split)):
        yield


@mutant("batch_to_device_drops_document_ids")
def batch_to_device_drops_document_ids():
    """LMBatch.to moves inputs and targets but not document_ids, which it leaves out: every
    packed batch that goes through the trainer (train_step and eval_batch move batches, even to
    the CPU) is trained as a plain causal batch, attending across document boundaries with
    positions that do not restart.

    Imitates a dataclass field added after its device-moving helper was written. Seam:
    runtime.data.LMBatch.to."""
    from pvlab.runtime.data import LMBatch

    def to(self, device):
        return LMBatch(self.inputs.to(device), self.targets.to(device))     # the defect: document_ids lost

    with plant("batch_to_device_drops_document_ids", swap(LMBatch, "to", to)):
        yield


@mutant("corpus_digest_ignores_paths")
def corpus_digest_ignores_paths():
    """Corpus.digest hashes the files' bytes only, not their relative paths (nor a separator
    between files): a corpus whose files were renamed or moved keeps its digest although the
    held-out split (which ranks files by path) is a different one, so a recipe's
    expected_digest no longer proves its split can be rebuilt.

    Imitates a content hash that treats names as irrelevant metadata. Seam:
    runtime.corpus.Corpus.digest."""
    import hashlib

    from pvlab.runtime import corpus

    def digest(self):
        hasher = hashlib.sha256()
        for source in self.files:
            hasher.update(source.text.encode("utf-8"))                        # the defect: no path, no length
        return hasher.hexdigest()

    with plant("corpus_digest_ignores_paths", swap(corpus.Corpus, "digest", property(digest))):
        yield


# ---- fourth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Fourth blind batch"; probes in tests/falsifiers/fourth_mutant_probes.py)


@mutant("packed_pieces_do_not_overlap")
def packed_pieces_do_not_overlap():
    """pack_documents cuts a document longer than a row into pieces of seq_len + 1 tokens that
    do not overlap (one starts where the last ended) instead of overlapping by one token: the
    first token of every later piece is never a target, so a long document loses one
    prediction per cut (and a piece of a single leftover token is dropped). Documents that fit
    in a row are untouched.

    Imitates cutting with stride seq_len + 1, the piece length, where stride seq_len belongs.
    Seam: runtime.data.pack_documents (pieces cut before the packer sees them)."""
    from pvlab.runtime import data

    original = data.pack_documents

    def pack_documents(documents, *, seq_len):
        pieces = []
        for document in documents:
            document = list(document)
            if len(document) <= seq_len + 1:
                pieces.append(document)
                continue
            pieces += [document[start:start + seq_len + 1]                  # the defect: stride seq_len + 1
                       for start in range(0, len(document), seq_len + 1)]
        return original(pieces, seq_len=seq_len)

    with plant("packed_pieces_do_not_overlap", swap(data, "pack_documents", pack_documents)):
        yield


# ---- fifth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Fifth blind batch"; probes in tests/falsifiers/fifth_mutant_probes.py)


@mutant("num_target_tokens_counts_padding")
def num_target_tokens_counts_padding():
    """LMBatch.num_target_tokens counts every position of the batch (rows x width) instead of
    the positions with a target: a right-padded batch (from_sequences of unequal sequences, a
    packed row's tail) reports its padding as tokens, so evaluate()'s token-weighted mean
    over-weights padded batches, the eval CLI reports too many scored tokens and the
    distributed trainer's micro-batch loss scales are off. Batches without padding are
    unaffected.

    Imitates `targets.numel()` written for "number of tokens", forgetting IGNORE_INDEX.
    Seam: runtime.data.LMBatch.num_target_tokens (a property)."""
    from pvlab.runtime import data

    def num_target_tokens(self):
        return int(self.targets.numel())   # the defect: padding counted

    with plant("num_target_tokens_counts_padding", swap(data.LMBatch, "num_target_tokens", property(num_target_tokens))):
        yield


@mutant("named_corpus_split_ignores_seed")
def named_corpus_split_ignores_seed():
    """A named real corpus (runtime.corpus: "stdlib", "stdlib/json") is split into training
    and held-out files by a hash of the file's path alone: the recipe's data_seed no longer
    enters it, so every seed holds out the same files (a cross-seed check of held-out loss
    measures one split, not several). The split stays deterministic, disjoint and of the
    right size.

    Imitates a seed parameter that got a default (0) and is then not passed by the caller, so
    every run splits as seed 0 does. Seam: runtime.corpus.split_by_path (the original, called
    with seed 0)."""
    from pvlab.runtime import corpus

    original = corpus.split_by_path

    def split_by_path(source_corpus, *, val_fraction, seed):
        return original(source_corpus, val_fraction=val_fraction, seed=0)   # the defect: the seed is not used

    with plant("named_corpus_split_ignores_seed", swap(corpus, "split_by_path", split_by_path)):
        yield


# ---- sixth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Sixth blind batch"; probes in tests/falsifiers/sixth_mutant_probes.py)


@mutant("packed_epochs_repeat_first_order")
def packed_epochs_repeat_first_order():
    """packed_batches shuffles the documents once: every later pass over the training documents
    yields exactly the first pass's rows in the first pass's order, instead of an order
    reshuffled from the seed every pass. Each pass is still a seeded permutation of all the
    documents, so a single pass looks right; a run longer than one pass sees the same batches
    in the same order again (epoch 2 repeats epoch 1).

    Imitates the torch.Generator created and seeded inside the `while True` pass loop instead of
    before it. Seam: runtime.data.packed_batches (wrapped: the original's first pass, replayed;
    the pass length is the original's, len(rows) // batch_size)."""
    import itertools

    import torch

    from pvlab.runtime import data

    original = data.packed_batches

    def packed_batches(encoded_documents, *, batch_size, seq_len, seed):
        generator = torch.Generator(device="cpu").manual_seed(seed)
        order = torch.randperm(len(encoded_documents), generator=generator).tolist()
        per_pass = len(data.pack_documents([encoded_documents[i] for i in order], seq_len=seq_len)) // batch_size
        if per_pass == 0:   # no documents, or too few rows for a batch: the original refuses
            yield from original(encoded_documents, batch_size=batch_size, seq_len=seq_len, seed=seed)
            return
        while True:   # the defect: every pass restarts the seeded generator, so repeats pass one
            yield from itertools.islice(original(encoded_documents, batch_size=batch_size, seq_len=seq_len,
                                                 seed=seed), per_pass)

    with plant("packed_epochs_repeat_first_order", swap(data, "packed_batches", packed_batches)):
        yield


@mutant("micro_batch_split_drops_short_remainder")
def micro_batch_split_drops_short_remainder():
    """LMBatch.split drops the short last micro-batch when the batch's rows are not a multiple
    of the micro-batch size (and there is at least one full micro-batch): with
    Trainer(micro_batch_size=m), the last B mod m rows of every batch are never trained on, and
    the step's loss and gradients are those of the first B - (B mod m) rows only. Batches whose
    rows divide evenly are unaffected.

    Imitates `range(0, rows - size + 1, size)` (a drop_last loop) where every row is meant.
    Seam: runtime.data.LMBatch.split (wrapped: the original's parts, the short last one cut)."""
    from pvlab.runtime import data

    original = data.LMBatch.split

    def split(self, rows):
        parts = original(self, rows)
        if rows > 0 and self.inputs.shape[0] % rows and len(parts) > 1:
            parts = parts[:-1]   # the defect: the remainder rows are dropped
        return parts

    with plant("micro_batch_split_drops_short_remainder", swap(data.LMBatch, "split", split)):
        yield


# ---- eighth blind batch ----
# Written from pvlab/runtime and docs/runtime.md alone, before any kill was measured (docs/mutants.md,
# "Eighth blind batch"; probes in tests/falsifiers/eighth_mutant_probes.py).


@mutant("heldout_last_short_batch_dropped")
def heldout_last_short_batch_dropped():
    """sequential_batches (held-out and train-eval windows, `eval`) drops its last batch when it
    holds fewer than batch_size windows: the windows at the end of the held-out stream are never
    scored, so val_loss is the loss of a prefix of the held-out documents and `eval`'s token count
    is short. With max_batches below the number of full batches nothing changes.

    Imitates the training loader's drop_last habit (full batches only) applied to the eval
    loader. Quiet: the loss is a plausible held-out loss over fewer tokens. Seam:
    runtime.data.sequential_batches (wrapped: a short final batch removed)."""
    from pvlab.runtime import data

    original = data.sequential_batches

    def sequential_batches(stream, *, batch_size, seq_len, max_batches=None):
        batches = original(stream, batch_size=batch_size, seq_len=seq_len)
        if len(batches) > 1 and batches[-1].inputs.shape[0] < batch_size:
            batches = batches[:-1]   # the defect: drop_last on the eval windows
        return batches[:max_batches] if max_batches else batches

    with plant("heldout_last_short_batch_dropped", swap(data, "sequential_batches", sequential_batches)):
        yield


# ---- ninth blind batch ----
# Written from pvlab/runtime and docs/runtime.md alone, before any kill was measured (docs/mutants.md,
# "Ninth blind batch"; probes in tests/falsifiers/ninth_mutant_probes.py).


@mutant("leak_check_compares_text_with_digests")
def leak_check_compares_text_with_digests():
    """overlapping_documents intersects the training split's content digests with the held-out
    documents' raw text instead of their digests: the two sets never share an element, so it
    always reports no overlap and verify_disjoint never refuses a leaky split (a named corpus
    whose split is by path can hold the same text under two paths).

    Imitates hashing one side of a comparison and forgetting the other. Quiet: the check passes
    (it passes for every sound split too), training and eval run as before; a held-out document
    that also sits in training lowers val_loss without any error. Seam:
    runtime.data.overlapping_documents (replaced: the held-out side left unhashed)."""
    from pvlab.runtime import data

    def overlapping_documents(train, held_out):
        train_digests = {data.document_digest(d) for d in train}
        return sorted(set(held_out) & train_digests)   # the defect: raw text against digests

    with plant("leak_check_compares_text_with_digests", swap(data, "overlapping_documents", overlapping_documents)):
        yield


@mutant("heldout_split_seeded_by_model_seed")
def heldout_split_seeded_by_model_seed():
    """pretrain's corpus split (split_corpus: synthetic or directory corpus by content hash, a
    named corpus by path) is seeded with recipe.seed (model init and batch order) instead of
    recipe.data_seed (corpus and held-out split). The synthetic corpus itself still follows
    data_seed. With both seeds 0 (the default recipes) nothing changes; two runs that differ only
    in their model seed are evaluated on different held-out documents and trained on different
    training documents, and a run with data_seed != seed holds out another split than asked.

    Imitates reaching for the recipe's one obvious "seed" field. Quiet: every split is disjoint
    and of the asked size, eval rebuilds the same (wrong) split from runtime.json's recipe, and
    losses are plausible. Seam: runtime.pretrain.split_corpus (replaced: seed=recipe.seed)."""
    import importlib

    from pvlab.runtime import corpus, data

    pretrain = importlib.import_module("pvlab.runtime.pretrain")   # the module (the package exports a function of its name)

    def split_corpus(recipe):
        if recipe.corpus is not None:
            train, held_out, named = corpus.documents_for(recipe.corpus, val_fraction=recipe.val_fraction,
                                                          seed=recipe.seed, expected_digest=recipe.corpus_digest)
            data.verify_disjoint(train, held_out)
            return train, held_out, named.summary()
        if recipe.corpus_dir is not None:
            documents = data.read_corpus(recipe.corpus_dir)
        else:
            documents = data.synthetic_python_corpus(recipe.num_documents, recipe.data_seed)
        # the defect: the split follows the model seed, not data_seed
        train, held_out = data.split_documents(documents, val_fraction=recipe.val_fraction, seed=recipe.seed)
        data.verify_disjoint(train, held_out)
        return train, held_out, None

    with plant("heldout_split_seeded_by_model_seed", swap(pretrain, "split_corpus", split_corpus)):
        yield


# ---- tenth blind batch (docs/independent-mutants.md, "Tenth batch") ------------------------------


@mutant("documents_encoded_with_leading_end_of_text")
def documents_encoded_with_leading_end_of_text():
    """encode_documents puts END_OF_TEXT before each document instead of after it: the stream
    reads the same one token later, but a packed or single document never ends with the
    terminator, so the model is never trained to predict the end of a document.

    Imitates BOS and EOS conventions confused (a Llama-style BOS prepended where the runtime's
    documents are EOS-terminated). Seam: runtime.data.encode_documents."""
    from pvlab.runtime import data
    from pvlab.runtime.errors import DataError

    def encode_documents(tokenizer, documents):
        end = tokenizer.token_to_id(data.END_OF_TEXT)
        if end is None:
            raise DataError(f"tokenizer has no {data.END_OF_TEXT} token")
        return [[end] + encoding.ids for encoding in tokenizer.encode_batch(list(documents))]   # the defect

    with plant("documents_encoded_with_leading_end_of_text", swap(data, "encode_documents", encode_documents)):
        yield


# ---- twelfth blind batch ----
# Written from pvlab/runtime and docs/runtime.md alone, before any kill was measured
# (docs/independent-mutants.md, "Twelfth batch"; probes in tests/falsifiers/twelfth_mutant_probes.py).


@mutant("heldout_count_floored")
def heldout_count_floored():
    """The held-out split holds floor(n * val_fraction) documents instead of the nearest whole
    number round(n * val_fraction): 30 documents at 0.25 hold out 7 instead of 8, 19 at 0.1 one
    instead of two. Still disjoint, still seeded, just short.

    Imitates `int(...)` where `round(...)` is meant. Seam: runtime.data.split_documents."""
    import hashlib

    from pvlab.runtime import data
    from pvlab.runtime.errors import DataError

    def split_documents(documents, *, val_fraction, seed):
        if not documents:
            raise DataError("corpus is empty: no documents to split")
        if not 0 < val_fraction < 1:
            raise DataError(f"val_fraction must be in (0, 1), got {val_fraction}")
        unique = list(dict.fromkeys(documents))
        if len(unique) < 2:
            raise DataError(f"corpus has {len(unique)} distinct document(s); need at least 2 to hold one out")

        def rank(document):
            return hashlib.sha256(f"{seed}:{data.document_digest(document)}".encode()).hexdigest()

        ordered = sorted(unique, key=rank)
        num_val = min(len(unique) - 1, max(1, int(len(unique) * val_fraction)))   # the defect: floor
        held_out = set(ordered[:num_val])
        return [d for d in unique if d not in held_out], [d for d in unique if d in held_out]

    with plant("heldout_count_floored", swap(data, "split_documents", split_documents)):
        yield


@mutant("evaluate_weights_batches_by_positions")
def evaluate_weights_batches_by_positions():
    """Trainer.evaluate weights each batch's mean loss by its number of input positions (rows x
    width) instead of its scored target tokens: a batch with right-padded rows counts as if its
    padding were scored. Batches without padding (equal windows) are unaffected.

    Imitates `batch.inputs.numel()` where `batch.num_target_tokens` is meant. Seam:
    runtime.trainer.Trainer.evaluate."""
    from pvlab.runtime import trainer
    from pvlab.runtime.errors import ArgumentError

    def evaluate(self, batches):
        total, tokens = 0.0, 0
        for batch in batches:
            count = batch.inputs.numel()   # the defect: positions, padding included
            total += self.eval_batch(batch) * count
            tokens += count
        if tokens == 0:
            raise ArgumentError("evaluate() was given no target tokens")
        return total / tokens

    with plant("evaluate_weights_batches_by_positions", swap(trainer.Trainer, "evaluate", evaluate)):
        yield
