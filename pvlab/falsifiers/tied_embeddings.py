"""Tied embeddings stay one tensor through the whole life of a model; untied ones stay two.

A config with tie_word_embeddings=true promises that the output head *is* the input embedding.
The public defect: the config says tied while the model holds two tensors (after a meta-device
init, a load or a resume), which then train apart, and the file drops lm_head.weight because the
config says it is redundant — so a resume silently replaces the trained head. The check follows
one model through init, optimizer steps, Trainer.save, runtime.load, Trainer.resume and more
steps, and at every stage asks the tensors themselves (same storage), never the config.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from ._util import generator, torch_device


def _one_storage(model) -> int:
    head, embedding = model.lm_head.weight, model.model.embed_tokens.weight
    return int(head.data_ptr() == embedding.data_ptr() and head.shape == embedding.shape)


def _batch(vocab: int, seed: int):
    from pvlab.runtime import data

    return data.LMBatch.from_sequences(torch.randint(0, vocab, (2, 17), generator=generator(seed)))


def _train(run, steps: int, seed: int) -> None:
    for step in range(steps):
        run.train_batch(_batch(run.model.config.vocab_size, seed + step))


def _file_has_head(directory: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(directory / "model.safetensors"), framework="pt") as handle:
        return int("lm_head.weight" in handle.keys())


def tied_embeddings_stay_tied(*, device: str, tied: bool = True, path: str | None = None, steps: int = 2,
                              seed: int = 0) -> dict:
    """The tiny preset with tie_word_embeddings = `tied`, random init; `steps` optimizer steps;
    Trainer.save; runtime.load of that directory; Trainer.resume of it and `steps` more steps.

    Observations (1 = head and embedding share storage): one_tensor_after_init,
    one_tensor_after_steps, one_tensor_after_load, one_tensor_after_resume,
    one_tensor_after_resume_steps; one_tensor_stages (how many of those five), file_has_lm_head
    (the saved file holds its own lm_head.weight), optimizer_tensors_for_head (distinct tensors the
    optimizer updates for head + embedding: 1 tied, 2 untied), head_equals_embedding_after_steps
    (values equal after the resumed steps; an untied pair must have moved apart), resume_refused
    (1 if Trainer.resume refused the checkpoint the trainer itself had written; the later
    stages then count as not one tensor)."""
    from pvlab.runtime import checkpoint, devices, errors, trainer
    from pvlab.runtime.config import preset

    dev = torch_device(device)
    path = path or devices.default_path(dev)
    config = preset("tiny").replace(tie_word_embeddings=bool(tied))
    model = checkpoint.init_model(config=config, weights="random", seed=seed, device=str(dev), path=path,
                                  parity_gate=False)
    stages = {"one_tensor_after_init": _one_storage(model)}
    run = trainer.Trainer(model, lr=1e-2, seed=seed)
    _train(run, steps, seed)
    stages["one_tensor_after_steps"] = _one_storage(model)
    with tempfile.TemporaryDirectory(prefix="pv-tied-") as tmp:
        directory = Path(tmp) / "ckpt"
        run.save(directory)
        file_has_head = _file_has_head(directory)
        stages["one_tensor_after_load"] = _one_storage(checkpoint.load(directory, device=str(dev), path=path,
                                                                       parity_gate=False))
        try:
            resumed = trainer.Trainer.resume(directory, device=str(dev), path=path)
        except (errors.CheckpointError, errors.ParityGateError):
            # The runtime refused its own checkpoint (optimizer state for one tensor and a
            # model with two; on a GPU, the parity gate refusing a resumed model whose head is
            # not its embedding): an observed failure of the claim, not a failure to measure.
            resumed = None
    if resumed is None:
        return {**stages, "one_tensor_after_resume": 0, "one_tensor_after_resume_steps": 0,
                "one_tensor_stages": sum(stages.values()), "file_has_lm_head": file_has_head,
                "optimizer_tensors_for_head": 0, "head_equals_embedding_after_steps": 0,
                "resume_refused": 1, "tied_config": int(bool(tied))}
    stages["one_tensor_after_resume"] = _one_storage(resumed.model)
    _train(resumed, steps, seed + steps)
    stages["one_tensor_after_resume_steps"] = _one_storage(resumed.model)
    head, embedding = resumed.model.lm_head.weight, resumed.model.model.embed_tokens.weight
    updated = {p.data_ptr() for g in resumed.optimizer.param_groups for p in g["params"]}
    return {**stages, "one_tensor_stages": sum(stages.values()), "file_has_lm_head": file_has_head,
            "optimizer_tensors_for_head": len(updated & {head.data_ptr(), embedding.data_ptr()}),
            "head_equals_embedding_after_steps": int(torch.equal(head.detach().cpu(), embedding.detach().cpu())),
            "resume_refused": 0, "tied_config": int(bool(tied))}
