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
