"""Invariants of the training backend: parameter count of a preset, finite losses, the reported
gradient norm, seeded reproducibility of the optimizer state, checkpoint save/resume, and
fine-tuning from a checkpoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import tempfile
from pathlib import Path

import torch

from . import fixtures
from ._util import torch_device


def param_count(*, device: str, preset: str = "llama-370m") -> dict:
    """Build the preset's CausalLM on the meta device (shapes only, nothing allocated) and count
    distinct parameters (a tied head shares its storage and counts once).

    Observations: param_count (from the module tree), config_param_count (the config's own
    arithmetic, runtime.ModelConfig.num_parameters), tensors, tied_head (1/0)."""
    from pvlab.runtime.config import preset as preset_config
    from pvlab.runtime.model import CausalLM

    torch_device(device)
    config = preset_config(preset)
    with torch.device("meta"):
        model = CausalLM(config)
    seen, count = set(), 0
    for _, parameter in model.named_parameters(remove_duplicate=False):
        if id(parameter) in seen:
            continue
        seen.add(id(parameter))
        count += parameter.numel()
    return {"param_count": count, "config_param_count": config.num_parameters(), "tensors": len(seen),
            "tied_head": int(model.lm_head.weight is model.model.embed_tokens.weight)}


def _trainer(model, recipe, **overrides):
    from pvlab.runtime.trainer import Trainer

    settings = dict(lr=recipe.lr, weight_decay=recipe.weight_decay, betas=(recipe.beta1, recipe.beta2),
                    grad_clip=recipe.grad_clip, seed=recipe.seed)
    settings.update(overrides)
    return Trainer(model, **settings)


def finite_loss(*, device: str, checkpoint: str = "tiny-random", path: str | None = None, steps: int = 20,
                seed: int = 0) -> dict:
    """`steps` Trainer.train_batch steps from `checkpoint` on the recipe's training batches (its
    peak learning rate from the first step: the hardest start), on `device` / `path`.

    Observations: steps, nonfinite_losses (NaN/Inf losses returned), nonfinite_grad_norms,
    trainer_nonfinite_count (the trainer's own counter), first_loss, last_loss."""
    from pvlab.runtime.devices import default_path

    dev = torch_device(device)
    path = path or default_path(dev)
    model = fixtures.fresh_copy(fixtures.model(checkpoint, device, path))
    trainer = _trainer(model, fixtures.recipe(checkpoint))
    losses, norms = [], []
    for batch in fixtures.train_batches(checkpoint, steps, seed=seed):
        losses.append(trainer.train_batch(batch))
        norms.append(trainer.last_grad_norm)
    return {"steps": len(losses), "nonfinite_losses": sum(1 for x in losses if not math.isfinite(x)),
            "nonfinite_grad_norms": sum(1 for x in norms if x is None or not math.isfinite(x)),
            "trainer_nonfinite_count": trainer.nonfinite_losses, "first_loss": losses[0], "last_loss": losses[-1]}


def grad_norm(*, device: str, checkpoint: str = "tiny-random", path: str | None = None, grad_clip: float = 0.5,
              seed: int = 0) -> dict:
    """The grad norm Trainer.train_batch reports (last_grad_norm) against the global L2 norm
    recomputed here: an identical copy of the model runs the same loss and backward, and the
    norm is sqrt(sum of g^2 over every element of every parameter's .grad) in float64 — before
    any clipping (grad_clip is set so that clipping is active and a post-clip norm would show).

    Observations: grad_norm, reference_grad_norm, grad_clip, clipping_active (1 if the reference
    norm exceeds grad_clip), parameters_with_grad, parameters."""
    from pvlab.runtime.devices import default_path

    dev = torch_device(device)
    path = path or default_path(dev)
    base = fixtures.model(checkpoint, device, path)
    batch = fixtures.train_batches(checkpoint, 1, seed=seed)[0]

    independent = fixtures.fresh_copy(base)
    independent.train()
    independent.zero_grad(set_to_none=True)
    loss = independent.loss(batch.inputs.to(dev), batch.targets.to(dev))
    loss.backward()
    grads = [p.grad for p in independent.parameters() if p.grad is not None]
    reference = math.sqrt(sum(float(g.detach().double().pow(2).sum()) for g in grads))

    model = fixtures.fresh_copy(base)
    trainer = _trainer(model, fixtures.recipe(checkpoint), grad_clip=grad_clip)
    trainer.train_batch(batch)
    reported = trainer.last_grad_norm
    return {"grad_norm": float(reported), "reference_grad_norm": reference, "grad_clip": grad_clip,
            "clipping_active": int(reference > grad_clip), "parameters_with_grad": len(grads),
            "parameters": sum(1 for _ in independent.parameters())}


def _state_digest(trainer) -> str:
    """sha256 of the optimizer state and the weights, computed here (not by the runtime)."""
    digest = hashlib.sha256()
    for name, parameter in trainer.model.named_parameters():
        digest.update(name.encode())
        digest.update(parameter.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        for key, value in sorted(trainer.optimizer.state.get(parameter, {}).items()):
            tensor = value if isinstance(value, torch.Tensor) else torch.tensor(value)
            digest.update(key.encode())
            digest.update(tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _seeded_run(device: str, path: str, steps: int, seed: int):
    from pvlab.runtime import checkpoint as runtime_checkpoint
    from pvlab.runtime.config import ModelConfig

    config = ModelConfig.from_json_file(fixtures.checkpoint_dir("tiny-trained") / "config.json")
    model = runtime_checkpoint.init_model(config=config, weights="random", seed=seed, device=device, path=path,
                                          parity_gate=False)
    trainer = _trainer(model, fixtures.recipe("tiny-trained"), seed=seed)
    for batch in fixtures.train_batches("tiny-trained", steps, seed=seed):
        trainer.train_batch(batch)
    return trainer


def optimizer_digest(*, device: str, path: str | None = None, steps: int = 5, seed: int = 0) -> dict:
    """Two complete runs from the same seed (init, batch order, optimizer) for `steps` steps, and
    a third from seed + 1. Digests compared: the runtime's own Trainer.optimizer_digest() and an
    independent sha256 of optimizer state + weights taken here.

    Observations: runs (2), digest_mismatches (of the two digests, how many differ between the
    same-seed runs), other_seed_differs (1 if the seed + 1 run's independent digest differs: the
    digest is not a constant), steps."""
    from pvlab.runtime.devices import default_path

    dev = torch_device(device)
    path = path or default_path(dev)
    first, second = _seeded_run(device, path, steps, seed), _seeded_run(device, path, steps, seed)
    other = _seeded_run(device, path, steps, seed + 1)
    mismatches = int(first.optimizer_digest() != second.optimizer_digest())
    mismatches += int(_state_digest(first) != _state_digest(second))
    return {"runs": 2, "digest_mismatches": mismatches,
            "other_seed_differs": int(_state_digest(other) != _state_digest(first)), "steps": steps}


def checkpoint_resume(*, device: str, path: str | None = None, steps_before: int = 3, steps_after: int = 3,
                      seed: int = 0) -> dict:
    """Train `steps_before` steps, Trainer.save, Trainer.resume, train `steps_after` more; compare
    with one uninterrupted run of steps_before + steps_after on the same batches.

    Observations: max_param_diff (largest |weight difference| after the last step),
    loss_max_diff (largest difference of the post-resume losses), digest_equal (1/0, the
    independent state digest), step_after_resume (the resumed trainer's step counter),
    steps_before."""
    from pvlab.runtime.devices import default_path
    from pvlab.runtime.trainer import Trainer

    dev = torch_device(device)
    path = path or default_path(dev)
    batches = fixtures.train_batches("tiny-trained", steps_before + steps_after, seed=seed)
    straight = _seeded_run(device, path, 0, seed)
    straight_losses = [straight.train_batch(b) for b in batches]

    interrupted = _seeded_run(device, path, 0, seed)
    for b in batches[:steps_before]:
        interrupted.train_batch(b)
    with tempfile.TemporaryDirectory(prefix="pv-resume-") as tmp:
        interrupted.save(Path(tmp) / "ckpt")
        resumed = Trainer.resume(Path(tmp) / "ckpt", device=device, path=path)
    step_after_resume = resumed.step
    resumed_losses = [resumed.train_batch(b) for b in batches[steps_before:]]
    max_param_diff = max(float((a.detach().double().cpu() - b.detach().double().cpu()).abs().max())
                         for a, b in zip(straight.model.parameters(), resumed.model.parameters()))
    return {"max_param_diff": max_param_diff,
            "loss_max_diff": max(abs(a - b) for a, b in zip(straight_losses[steps_before:], resumed_losses)),
            "digest_equal": int(_state_digest(straight) == _state_digest(resumed)),
            "step_after_resume": step_after_resume, "steps_before": steps_before}


def _independently_loaded(directory: Path, device: str, path: str):
    """The checkpoint's weights in a runtime CausalLM without runtime.load / populate: the file
    is read with safetensors and copied by load_state_dict, so a loader that fails to load the
    weights cannot also corrupt the value it is compared with."""
    from safetensors.torch import load_file

    from pvlab.runtime.config import ModelConfig
    from pvlab.runtime.model import CausalLM

    config = ModelConfig.from_json_file(directory / "config.json")
    model = CausalLM(config)
    state = load_file(str(directory / "model.safetensors"))
    if config.tie_word_embeddings:
        state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    model.load_state_dict(state, strict=True)
    model.to(torch.device(device)).set_path(path)
    return model.eval()


@fixtures.cached
def _finetune(device: str, path: str, checkpoint: str, steps: int, lr: float, eval_batches: int) -> tuple:
    from pvlab.runtime.pretrain import pretrain
    from pvlab.runtime.trainer import Trainer

    recipe = dataclasses.replace(fixtures.recipe(checkpoint), steps=steps, lr=lr, min_lr=lr, warmup_steps=0,
                                 eval_every=steps, eval_batches=eval_batches)
    directory = fixtures.checkpoint_dir(checkpoint)
    own = _independently_loaded(directory, device, path)
    checkpoint_val = Trainer(own).evaluate(fixtures.heldout_batches(checkpoint, eval_batches))
    history: list[dict] = []
    completed = 1
    with tempfile.TemporaryDirectory(prefix="pv-finetune-") as tmp:
        try:
            pretrain(recipe, Path(tmp) / "out", device=device, path=path, init=directory, progress=False,
                     on_eval=history.append)
        except Exception:
            # The evals the claim is about may have happened before the run broke (e.g. while
            # saving); judge those, and report that the run did not complete.
            if len(history) < 2 or history[-1]["step"] != steps:
                raise
            completed = 0
    return checkpoint_val, history[0]["val_loss"], history[-1]["val_loss"], history[-1]["step"], completed


def finetune_from_checkpoint(*, device: str, checkpoint: str = "tiny-trained", path: str | None = None,
                             steps: int = 10, lr: float = 1e-3, eval_batches: int = 2) -> dict:
    """runtime.pretrain(recipe, init=<checkpoint>) for `steps` steps at a constant `lr`, and the
    checkpoint's own eval: its weights read from the file independently of runtime.load (see
    _independently_loaded), on the same device/path, scored by Trainer.evaluate on the same
    held-out batches. Cached per process (both falsifiers of the
    contract read one run).

    Observations: checkpoint_val_loss, first_val_loss (the fine-tune's eval at step 0),
    final_val_loss (after `steps` steps), steps, ln_vocab, run_completed (0 if the run broke
    after its last eval, e.g. while saving: the evals are still judged)."""
    from pvlab.runtime.devices import default_path

    dev = torch_device(device)
    path = path or default_path(dev)
    checkpoint_val, first, final, last_step, completed = _finetune(device, path, checkpoint, steps, lr, eval_batches)
    vocab = fixtures.model(checkpoint, "cpu", "reference").config.vocab_size
    return {"checkpoint_val_loss": checkpoint_val, "first_val_loss": first, "final_val_loss": final,
            "steps": last_step, "ln_vocab": math.log(vocab), "run_completed": completed}
