"""Planted bugs at the edges of the runtime's argument domains (contract argument-domains):
the mutations `pv mutate` found surviving every older falsifier, planted as named bugs so the
new falsifiers are judged by `pv strength` like every other (docs/mutants.md)."""

from __future__ import annotations

from pv.mutation import mutant

from .planting import plant, swap, swap_item


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


@mutant("config_accepts_float_sizes")
def config_accepts_float_sizes():
    """ModelConfig.validate lets a size given as a float (hidden_size 64.0, as a JSON writer
    may give it) through: the model is built with a float width and fails far from the config.

    Imitates an `isinstance(value, (int, float))` check. Seam: runtime.config.ModelConfig.validate."""
    from pvlab.runtime.config import ModelConfig

    original = ModelConfig.validate

    def validate(self):
        if any(isinstance(value, float) for value in (self.vocab_size, self.hidden_size, self.intermediate_size)):
            return
        original(self)

    with plant("config_accepts_float_sizes", swap(ModelConfig, "validate", validate)):
        yield


@mutant("qwen2_preset_untied")
def qwen2_preset_untied():
    """The qwen2-0.5b preset unties its output head: a model built from it has a second
    151936 x 896 matrix (136M parameters) Qwen/Qwen2-0.5B does not have, and a checkpoint of
    the real model does not load into it.

    Imitates a preset copied with a wrong flag. Seam: runtime.config.PRESETS["qwen2-0.5b"]."""
    from pvlab.runtime import config

    untied = config.PRESETS["qwen2-0.5b"].replace(tie_word_embeddings=False)
    with plant("qwen2_preset_untied", swap_item(config.PRESETS, "qwen2-0.5b", untied, "PRESETS")):
        yield


@mutant("device_request_not_normalised")
def device_request_not_normalised():
    """resolve_device takes the request as typed: " CPU " or "AUTO" (a flag read from a file
    or typed in capitals) is refused as an unknown device.

    Imitates a missing `.strip().lower()`. Seam: runtime.devices.resolve_device."""
    from pvlab.runtime import devices
    from pvlab.runtime.errors import DeviceError

    original = devices.resolve_device

    def resolve_device(requested=None, **options):
        if isinstance(requested, str) and requested != requested.strip().lower():
            raise DeviceError(f"device {requested!r} is not a device this runtime supports")
        return original(requested, **options)

    with plant("device_request_not_normalised", swap(devices, "resolve_device", resolve_device)):
        yield


@mutant("header_reads_u32_as_five_bytes")
def header_reads_u32_as_five_bytes():
    """The header reader's width of U32 is 5 bytes: every valid file holding a uint32 tensor
    is refused as corrupt.

    Imitates a typo in a dtype-width table. Seam: runtime.checkpoint.OTHER_DTYPES["U32"]."""
    from pvlab.runtime import checkpoint

    with plant("header_reads_u32_as_five_bytes", swap_item(checkpoint.OTHER_DTYPES, "U32", 5, "OTHER_DTYPES")):
        yield


@mutant("nonfinite_losses_not_counted")
def nonfinite_losses_not_counted():
    """A step whose loss is NaN is skipped but not counted: the run's report says no step was
    lost.

    Imitates a counter never incremented. Seam: runtime.trainer.Trainer._read_step."""
    from pvlab.runtime import trainer

    original = trainer.Trainer._read_step

    def _read_step(self, loss_total, total_norm, step_tokens):
        counted = self.nonfinite_losses
        applies = original(self, loss_total, total_norm, step_tokens)
        self.nonfinite_losses = counted
        return applies

    with plant("nonfinite_losses_not_counted", swap(trainer.Trainer, "_read_step", _read_step)):
        yield


@mutant("warmup_defaults_to_one_step")
def warmup_defaults_to_one_step():
    """A schedule given no warmup warms up for one step: the cosine starts a step late, so
    every later step runs at a higher rate than documented.

    Imitates a default of 1 where 0 is documented. Seam: runtime.trainer.learning_rate."""
    from pvlab.runtime import trainer

    original = trainer.learning_rate

    def learning_rate(step, *, warmup_steps, **schedule):
        return original(step, warmup_steps=warmup_steps or 1, **schedule)

    with plant("warmup_defaults_to_one_step", swap(trainer, "learning_rate", learning_rate)):
        yield


@mutant("generated_sources_kept")
def generated_sources_kept():
    """The corpus reader no longer recognises tool-generated files: Sphinx's and gencodec's
    output trains the model as if people had written it.

    Imitates a marker check that never matches. Seam: runtime.corpus._is_generated."""
    from pvlab.runtime import corpus

    with plant("generated_sources_kept", swap(corpus, "_is_generated", lambda text: False)):
        yield


from . import entrypoints  # noqa: E402,F401 - registers the entry points' planted bugs (issue #26) without a new line in
#   the package __init__, whose module-level code every planted-bug record binds
