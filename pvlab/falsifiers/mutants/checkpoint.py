"""Planted bugs of runtime.checkpoint and runtime.parity: loading, populating, init_model, placing on a device behind the parity gate, fine-tuning from a checkpoint.

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

from pv.mutation import mutant

from .planting import plant, swap


@mutant("populate_drops_optional_tensors")
def populate_drops_optional_tensors():
    """Loading skips the optional tensors (every `.bias`): they are neither copied nor kept —
    the model ends up with no bias fields — yet the populate report says N/N, complete.

    Imitates the seed defect where upload/populate silently dropped the Q/K/V biases while the
    coverage check, which read the loader's own report, stayed green. Seam:
    runtime.checkpoint.populate (used by runtime.load and init_model with weights)."""
    import torch

    from pvlab.runtime import checkpoint

    def populate(model, tensors, plan):
        parameters = dict(model.named_parameters())
        for name in plan.found:
            if name.endswith(".bias"):
                continue
            value = tensors[name]
            checkpoint.copy_tensor(parameters[name], value() if callable(value) else value)
        for module in model.modules():
            if isinstance(getattr(module, "bias", None), torch.nn.Parameter):
                module.bias = None
        return checkpoint.PopulateReport(expected=plan.expected, found=plan.found, missing=plan.missing,
                                         extra=plan.extra, mismatched=plan.mismatched, ignored=plan.ignored,
                                         source=plan.source)

    with plant("populate_drops_optional_tensors", swap(checkpoint, "populate", populate)):
        yield


@mutant("loader_reads_wrong_byte_order")
def loader_reads_wrong_byte_order():
    """The loader copies every tensor with its bytes in the wrong order (big- instead of
    little-endian, as safetensors stores them): weights become garbage — huge, tiny, Inf, NaN —
    while names, shapes and the populate report are all correct.

    Imitates a dtype/endianness misread of checkpoint bytes ("a tensor was loaded as garbage").
    Seam: runtime.checkpoint.copy_tensor, which populate uses for every tensor."""
    import torch

    from pvlab.runtime import checkpoint

    original = checkpoint.copy_tensor

    def copy_tensor(parameter, tensor):
        tensor = tensor.contiguous()
        size = tensor.element_size()
        swapped = tensor.view(torch.uint8).reshape(-1, size).flip(-1).reshape(-1).view(tensor.dtype)
        return original(parameter, swapped.reshape(tensor.shape))

    with plant("loader_reads_wrong_byte_order", swap(checkpoint, "copy_tensor", copy_tensor)):
        yield


@mutant("init_accepts_unpaired_arguments")
def init_accepts_unpaired_arguments():
    """init_model invents what it was not given: an architecture without weights gets random
    weights, weights without an architecture get the tiny preset — no error.

    Imitates the seed defect of an init path that silently fell back to random weights or a
    default architecture. Seam: runtime.checkpoint.init_model."""
    from pvlab.runtime import checkpoint

    original = checkpoint.init_model

    def init_model(*, config=None, weights=None, **kwargs):
        if weights is None:
            weights = "random"
        if config is None:
            config = "tiny"
        return original(config=config, weights=weights, **kwargs)

    with plant("init_accepts_unpaired_arguments", swap(checkpoint, "init_model", init_model)):
        yield


@mutant("tied_head_uninitialised")
def tied_head_uninitialised():
    """A model with tie_word_embeddings gets its own, never-filled output head instead of sharing
    the (trained) embedding: the head is a fresh zero buffer, so every logit is 0.

    Imitates the seed defect "tied head replaced by an uninitialised one" (a device upload that
    allocated a separate lm_head buffer for a tied checkpoint, which holds no lm_head.weight, and
    never filled it). Seam: runtime.parity.place, the step every load()/init_model() ends with."""
    import torch

    from pvlab.runtime import parity

    original = parity.place

    def place(model, device, path, **kwargs):
        if model.config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight:
            model.lm_head.weight = torch.nn.Parameter(torch.zeros_like(model.lm_head.weight.detach()))
        return original(model, device, path, **kwargs)

    with plant("tied_head_uninitialised", swap(parity, "place", place)):
        yield


@mutant("parity_gate_compares_device_with_itself")
def parity_gate_compares_device_with_itself():
    """The init-time parity gate compares the device's logits with themselves instead of with the
    CPU reference: it can never refuse anything.

    Imitates a gate that "compares nothing" (the bug hunt had no comparison at all while the GPU
    decode printed gibberish). Seam: runtime.parity.compare_logits."""
    from pvlab.runtime import parity

    original = parity.compare_logits

    def compare_logits(reference, candidate, **kwargs):
        return original(candidate, candidate, **kwargs)

    with plant("parity_gate_compares_device_with_itself",
               swap(parity, "compare_logits", compare_logits)):
        yield


@mutant("finetune_starts_from_random_init")
def finetune_starts_from_random_init():
    """Fine-tuning (pretrain with init=<checkpoint>) loads the checkpoint's config and tokenizer
    but starts from freshly initialised weights: the first eval of the fine-tune sits near ln V.

    Imitates the seed defect "fine-tune runs that silently started from random init".
    Seam: the `checkpoint` module as runtime.pretrain sees it (its load() re-initialises the
    weights); every other user of runtime.checkpoint is untouched."""
    import importlib

    from pvlab.runtime import checkpoint
    from pvlab.runtime.model import init_weights

    pretrain = importlib.import_module("pvlab.runtime.pretrain")  # `runtime.pretrain` is the function

    class CheckpointAsPretrainSeesIt:
        def __getattr__(self, name):
            return getattr(checkpoint, name)

        @staticmethod
        def load(*args, **kwargs):
            model = checkpoint.load(*args, **kwargs)
            init_weights(model, seed=0)
            return model

    with plant("finetune_starts_from_random_init", swap(pretrain, "checkpoint", CheckpointAsPretrainSeesIt())):
        yield



@mutant("tied_head_replaced_by_random_rows")
def tied_head_replaced_by_random_rows():
    """After populating a tied checkpoint, the output head is a separate, freshly drawn
    N(0, 0.02) matrix instead of the trained embedding: the logits look plausible (finite,
    peaked) and mean nothing.

    Imitates the seed defect "tied head replaced by an uninitialised one" in its harder-to-see
    form (random rather than zero rows). Seam: runtime.checkpoint.populate."""
    import torch

    from pvlab.runtime import checkpoint

    original = checkpoint.populate

    def populate(model, tensors, plan):
        report = original(model, tensors, plan)
        generator = torch.Generator(device="cpu").manual_seed(2)
        rows = torch.randn(model.lm_head.weight.shape, generator=generator) * 0.02
        model.lm_head.weight = torch.nn.Parameter(rows.to(model.lm_head.weight.dtype))
        return report

    with plant("tied_head_replaced_by_random_rows", swap(checkpoint, "populate", populate)):
        yield


@mutant("parity_gate_refuses_everything")
def parity_gate_refuses_everything():
    """The parity gate demands a logits cosine above 1.01, which no model can reach: every gated
    placement is refused, a faithful one included.

    Imitates a gate whose threshold is wrong in the other direction (a gate that is "safe" by
    never letting anything through). Seam: runtime.parity.place."""
    from pvlab.runtime import parity

    original = parity.place

    def place(model, device, path, *, gate=None, min_cosine=parity.PARITY_MIN_COSINE):
        return original(model, device, path, gate=gate, min_cosine=1.01)

    with plant("parity_gate_refuses_everything", swap(parity, "place", place)):
        yield


# ---- third blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/independent-mutants.md, "Third batch"; probes in tests/falsifiers/third_mutant_probes.py)


@mutant("tied_checkpoint_conflicting_head_accepted")
def tied_checkpoint_conflicting_head_accepted():
    """A tied checkpoint (tie_word_embeddings=true) that also stores an lm_head.weight different
    from its embedding is loaded without complaint: the stored head is listed as ignored and
    silently discarded, so the model answers with the embedding as its head, not with the head
    the file was trained with.

    Imitates treating every tolerated tensor as ignorable without checking that it is redundant.
    Seam: runtime.checkpoint.populate."""
    from pvlab.runtime import checkpoint

    def populate(model, tensors, plan):
        parameters = dict(model.named_parameters())
        copied = []
        for name in plan.found:
            value = tensors[name]
            checkpoint.copy_tensor(parameters[name], value() if callable(value) else value)
            copied.append(name)
        unfilled = sorted(set(parameters) - set(copied))
        report = checkpoint.PopulateReport(expected=plan.expected, found=tuple(copied),
                                           missing=plan.missing + tuple(unfilled), extra=plan.extra,
                                           mismatched=plan.mismatched, ignored=plan.ignored, source=plan.source)
        checkpoint._refuse_unless_complete(report)
        return report                                                        # the defect: no redundancy check

    with plant("tied_checkpoint_conflicting_head_accepted", swap(checkpoint, "populate", populate)):
        yield


# ---- fourth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Fourth blind batch"; probes in tests/falsifiers/fourth_mutant_probes.py)


@mutant("unexpected_tensors_ignored_on_load")
def unexpected_tensors_ignored_on_load():
    """Tensors in the files that the architecture does not know are tolerated instead of
    refused: the coverage report lists them as `ignored`, not `extra`, so it reads complete and
    the loader discards them. A Llama checkpoint trained with attention_bias=True whose
    config.json lost the flag loads without its Q/K/V/O biases, and `inspect` calls it
    complete; checkpoints that match their config are untouched.

    Imitates load_state_dict(strict=False) (or a `_keys_to_ignore_on_load_unexpected` list grown
    to a catch-all) used to silence a warning. Seam: runtime.checkpoint.compare_tensors (what
    load, init_model and inspect_checkpoint read)."""
    import dataclasses

    from pvlab.runtime import checkpoint

    original = checkpoint.compare_tensors

    def compare_tensors(config, index, *, source=""):
        report = original(config, index, source=source)
        return dataclasses.replace(report, extra=(),                           # the defect: extras tolerated
                                   ignored=tuple(sorted(report.ignored + report.extra)))

    with plant("unexpected_tensors_ignored_on_load", swap(checkpoint, "compare_tensors", compare_tensors)):
        yield


# ---- fifth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Fifth blind batch"; probes in tests/falsifiers/fifth_mutant_probes.py)


@mutant("load_ignores_requested_path")
def load_ignores_requested_path():
    """runtime.load(dir, path=...) drops the requested execution path and always places the
    model on the device's default one (reference on the CPU, fast on CUDA): asking for the
    fast path on the CPU, or the reference path on a GPU, silently runs the other one, and a
    resumed Trainer (which loads through it with the path it saved) switches path mid-run.

    Imitates a keyword argument accepted by the public entry point and never passed on.
    Seams: runtime.checkpoint.load and its re-export pvlab.runtime.load."""
    import functools
    import importlib

    from pvlab.runtime import checkpoint

    package = importlib.import_module("pvlab.runtime")
    original = checkpoint.load

    @functools.wraps(original)
    def load(checkpoint_dir, *, device="cpu", path=None, parity_gate=None, allow_gpu=True):
        return original(checkpoint_dir, device=device, path=None,   # the defect: path not passed on
                        parity_gate=parity_gate, allow_gpu=allow_gpu)

    with plant("load_ignores_requested_path", swap(checkpoint, "load", load), swap(package, "load", load)):
        yield


# ---- seventh blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Seventh blind batch"; probes in tests/falsifiers/seventh_mutant_probes.py)


@mutant("checkpoint_load_rounds_fp32_to_bf16")
def checkpoint_load_rounds_fp32_to_bf16():
    """Loading a checkpoint rounds every fp32 tensor to bf16 on its way into the fp32 model:
    runtime.load, Trainer.resume and fine-tuning all start from weights that differ from the
    saved ones in the low 16 bits (logits move by ~1e-3, a resumed run no longer continues the
    saved one bit for bit). bf16 files load exactly as before.

    Imitates a loader that reads tensors in a default half dtype (torch_dtype=bfloat16) and
    upcasts afterwards. Seam: runtime.checkpoint.copy_tensor (wrapped: the tensor rounded
    through bf16 first)."""
    import torch

    from pvlab.runtime import checkpoint

    original = checkpoint.copy_tensor

    def copy_tensor(parameter, tensor):
        if tensor.dtype == torch.float32:
            tensor = tensor.to(torch.bfloat16)   # the defect: read at half precision, then widened
        return original(parameter, tensor)

    with plant("checkpoint_load_rounds_fp32_to_bf16", swap(checkpoint, "copy_tensor", copy_tensor)):
        yield


# ---- ninth blind batch ----
# Written from pvlab/runtime and docs/runtime.md alone, before any kill was measured (docs/mutants.md,
# "Ninth blind batch"; probes in tests/falsifiers/ninth_mutant_probes.py).


@mutant("saved_meta_prefers_loaded_model_meta")
def saved_meta_prefers_loaded_model_meta():
    """Trainer.save merges the runtime metadata the other way round: the runtime.json the model
    was loaded with (model.runtime_meta) overrides the runtime_meta given to save. A model
    trained from scratch has no loaded metadata and saves as before; a run started from a
    checkpoint (pretrain init=, a fine-tune) writes the base checkpoint's recipe, recipe digest
    and results into its own runtime.json, so `eval` rebuilds the base run's held-out split and
    the recorded losses are the base run's.

    Imitates `meta = dict(new); meta.update(old)`: a dict merge with its precedence reversed.
    Quiet: the weights, optimizer state and trainer.json are right; runtime.json is well-formed
    and plausible. Seam: runtime.trainer.Trainer.save (wrapped: the loaded metadata wins)."""
    from pvlab.runtime import trainer

    original = vars(trainer.Trainer)["save"]

    def save(self, directory, *, runtime_meta=None):
        merged = dict(runtime_meta or {})
        merged.update(getattr(self.model, "runtime_meta", None) or {})   # the defect: the old metadata wins
        return original(self, directory, runtime_meta=merged)

    with plant("saved_meta_prefers_loaded_model_meta", swap(trainer.Trainer, "save", save)):
        yield


# ---- twelfth blind batch ----
# Written from pvlab/runtime and docs/runtime.md alone, before any kill was measured
# (docs/independent-mutants.md, "Twelfth batch"; probes in tests/falsifiers/twelfth_mutant_probes.py).
# The trainer's resume and save seams; here rather than in trainer.py, which was at its size limit.


@mutant("resume_drops_weight_decay")
def resume_drops_weight_decay():
    """Trainer.resume rebuilds the trainer without the saved weight decay: the resumed run
    decays with the default 0.1 whatever the run was started with. A run saved with the
    default continues exactly.

    Imitates a keyword left out of the hand-written argument list. Seam:
    runtime.trainer.Trainer.resume."""
    import json
    from pathlib import Path

    from pvlab.runtime import checkpoint, trainer

    def resume(cls, directory, *, device="cpu", path=None):
        directory = Path(directory)
        state = json.loads((directory / trainer.TRAINER_STATE_NAME).read_text(encoding="utf-8"))
        hyper, saved_path, step = state["hyperparameters"], state["path"], int(state["step"])
        model = checkpoint.load(directory, device=device, path=path or saved_path)
        resumed = cls(model, lr=hyper["lr"], betas=tuple(hyper["betas"]),   # the defect: no weight_decay
                      grad_clip=hyper["grad_clip"], seed=hyper["seed"], warmup_steps=hyper["warmup_steps"],
                      total_steps=hyper["total_steps"], min_lr=hyper["min_lr"])
        resumed._load_optimizer_state(directory / trainer.OPTIMIZER_STATE_NAME)
        resumed.step = step
        resumed.last_loss = state.get("last_loss")
        return resumed

    with plant("resume_drops_weight_decay", swap(trainer.Trainer, "resume", classmethod(resume))):
        yield


@mutant("optimizer_moments_saved_in_bfloat16")
def optimizer_moments_saved_in_bfloat16():
    """Trainer.save writes the AdamW moments (exp_avg, exp_avg_sq) to optimizer.safetensors in
    bfloat16; resume reads them back and widens them to fp32: the resumed run's moments are
    rounded to 8 bits of mantissa. Weights, step counts and trainer.json are exact.

    Imitates halving the optimizer file's size by saving the moments in the training dtype.
    Seam: runtime.trainer.Trainer.save."""
    import json

    import torch
    from safetensors.torch import save as save_tensors_to_bytes

    from pvlab.runtime import checkpoint, trainer

    def save(self, directory, *, runtime_meta=None):
        meta = dict(getattr(self.model, "runtime_meta", None) or {})
        meta.update(runtime_meta or {})
        state = {key: tensor.to(torch.bfloat16) if key.endswith(("::exp_avg", "::exp_avg_sq")) else tensor
                 for key, tensor in self._named_optimizer_state().items()}   # the defect
        extra = {
            trainer.OPTIMIZER_STATE_NAME: save_tensors_to_bytes(state),
            trainer.TRAINER_STATE_NAME: (json.dumps(self.state(), indent=2) + "\n").encode(),
        }
        return checkpoint.save_checkpoint(self.model, directory, runtime_meta=meta, extra_files=extra)

    with plant("optimizer_moments_saved_in_bfloat16", swap(trainer.Trainer, "save", save)):
        yield
