"""The compiled training path (Trainer(compile=True): torch.compile of every decoder layer,
forward and backward) follows the eager trajectory.

Compilation is an optimisation: N optimizer steps from the same weights on the same batches must
move the parameters where eager execution moves them, up to the rounding of reordered
arithmetic. The public record holds compilers that silently changed the arithmetic of a
training step (an optimizer update or a fused backward that differs from eager). The measure is
relative to the distance travelled: |compiled - eager| over all parameters, divided by
|eager - initial|, after each step (a miscompiled op moves the trajectory by a fraction of the
update; rounding moves it by far less). A small model (one decoder layer by default) keeps the
compile time down.
"""

from __future__ import annotations

import torch

from ._util import generator, rtol_atol, torch_device


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().to("cpu", torch.float64).flatten() for p in model.parameters()])


def _run(config, *, device, path, compiled: bool | str, batches, seed: int):
    from pvlab.runtime import checkpoint, trainer

    model = checkpoint.init_model(config=config, weights="random", seed=seed, device=device, path=path,
                                  parity_gate=False)
    start = _flat(model)
    run = trainer.Trainer(model, lr=3e-3, weight_decay=0.1, grad_clip=1.0, seed=seed, compile=compiled)
    losses, snapshots = [], []
    for batch in batches:
        losses.append(run.train_batch(batch))
        snapshots.append(_flat(model))
    return start, losses, snapshots


def compiled_matches_eager(*, device: str, path: str | None = None, steps: int = 4, layers: int = 1,
                           seed: int = 0, scope: str = "layers", tolerance: dict | None = None) -> dict:
    """`steps` Trainer.train_batch steps of the tiny preset cut to `layers` decoder layers, once
    eager and once compiled (Trainer(compile=scope): "layers" each decoder layer, "model" the
    whole decoder body as one graph), from the same seeded init on the same random batches.

    Observations: trajectory_rel_diff (max over steps of |p_compiled - p_eager| / |p_eager - p_0|,
    L2 over every parameter), param_max_abs_diff (after the last step), loss_max_abs_diff (over
    the steps' losses), update_norm (|p_eager - p_0| after the last step), steps, rtol (the
    bound on trajectory_rel_diff: the float32 or bfloat16 entry of the tolerance, by path)."""
    from pvlab.runtime import data, devices
    from pvlab.runtime.config import preset

    dev = torch_device(device)
    path = path or devices.default_path(dev)
    rtol, _ = rtol_atol(tolerance, "bfloat16" if path == "fast" else "float32")
    config = preset("tiny").replace(num_hidden_layers=int(layers))
    tokens = torch.randint(0, config.vocab_size, (steps, 4, 33), generator=generator(seed))
    batches = [data.LMBatch.from_sequences(tokens[i]) for i in range(steps)]
    start, eager_losses, eager = _run(config, device=str(dev), path=path, compiled=False, batches=batches, seed=seed)
    _, compiled_losses, compiled = _run(config, device=str(dev), path=path, compiled=scope, batches=batches, seed=seed)
    relative = [float((c - e).norm() / (e - start).norm()) for c, e in zip(compiled, eager)]
    return {"trajectory_rel_diff": max(relative), "param_max_abs_diff": float((compiled[-1] - eager[-1]).abs().max()),
            "loss_max_abs_diff": max(abs(a - b) for a, b in zip(compiled_losses, eager_losses)),
            "update_norm": float((eager[-1] - start).norm()), "steps": len(relative), "rtol": rtol}
