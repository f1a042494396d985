"""Planted bugs at the edges of the runtime's argument domains (contract argument-domains):
the mutations `pv mutate` found surviving every older falsifier, planted as named bugs so the
new falsifiers are judged by `pv strength` like every other (docs/mutants.md)."""

from __future__ import annotations

from pv.mutation import mutant

from .planting import plant, swap


@mutant("shard_rank_gate_off_by_one")
def shard_rank_gate_off_by_one():
    """shard_indices accepts rank == world_size (the gate reads `rank <= world_size`): that rank
    gets the slice past the last real rank's, a shard no other rank has, and trains on it silently.

    Imitates an off-by-one in the rank check. Seam: runtime.distributed.shard_indices."""
    from pvlab.runtime import distributed

    original = distributed.shard_indices

    def shard_indices(num_items, *, rank, world_size, seed, epoch):
        if rank == world_size:
            return original(num_items, rank=0, world_size=world_size + 1, seed=seed, epoch=epoch)[1:]
        return original(num_items, rank=rank, world_size=world_size, seed=seed, epoch=epoch)

    with plant("shard_rank_gate_off_by_one", swap(distributed, "shard_indices", shard_indices)):
        yield


@mutant("zero_learning_rate_accepted")
def zero_learning_rate_accepted():
    """The optimizer settings accept lr == 0 (the gate reads `lr < 0`): a run whose weights
    never move starts without an error.

    Imitates a strict comparison where a non-strict one belongs. Seam: runtime.trainer.hyperparameters."""
    from pvlab.runtime import trainer

    original = trainer.hyperparameters

    def hyperparameters(*, lr, **settings):
        if lr == 0:
            return {**original(lr=1.0, **settings), "lr": 0.0}
        return original(lr=lr, **settings)

    with plant("zero_learning_rate_accepted", swap(trainer, "hyperparameters", hyperparameters)):
        yield


@mutant("zero_val_fraction_accepted")
def zero_val_fraction_accepted():
    """split_documents accepts val_fraction == 0 (the gate reads `0 <= val_fraction`), and the
    split still holds one document out: a run asked for no held-out set silently loses one.

    Imitates a closed interval where the domain is open. Seam: runtime.data.split_documents."""
    from pvlab.runtime import data

    original = data.split_documents

    def split_documents(documents, *, val_fraction, seed):
        return original(documents, val_fraction=val_fraction or 1e-9, seed=seed)

    with plant("zero_val_fraction_accepted", swap(data, "split_documents", split_documents)):
        yield


@mutant("batch_default_seed_changed")
def batch_default_seed_changed():
    """generate_batch samples with seed 1 when none is given (generate's default is 0): the same
    seedless request sampled alone and in a batch draws from different streams.

    Imitates a default edited in one entry point only. Seam: runtime.generate.generate_batch."""
    import importlib

    generate = importlib.import_module("pvlab.runtime.generate")   # the module, not the re-exported function

    original = generate.generate_batch

    def generate_batch(model, prompts, *, seed=1, **options):
        return original(model, prompts, seed=seed, **options)

    with plant("batch_default_seed_changed", swap(generate, "generate_batch", generate_batch)):
        yield


@mutant("end_of_text_falls_back_to_id_zero")
def end_of_text_falls_back_to_id_zero():
    """encode_documents ends each document with id 0 when the tokenizer has no end-of-text token,
    instead of refusing it: a foreign tokenizer's id 0 (any ordinary token) silently becomes the
    document separator of every training sequence.

    Imitates a `token_to_id(...) or 0` fallback. Seam: runtime.data.encode_documents."""
    from pvlab.runtime import data

    def encode_documents(tokenizer, documents):
        end = tokenizer.token_to_id(data.END_OF_TEXT) or 0
        return [encoding.ids + [end] for encoding in tokenizer.encode_batch(list(documents))]

    with plant("end_of_text_falls_back_to_id_zero", swap(data, "encode_documents", encode_documents)):
        yield
