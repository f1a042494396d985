"""The training step replayed as one CUDA graph (pvlab.runtime.step_graph.GraphedTrainer) trains
as the plain step does.

A captured graph replays kernels with the arguments they had at capture: whatever the step
computed on the host at that moment (a learning rate, a batch's address, a step count) is frozen
into it unless it lives in a device buffer the graph reads. Those bugs are silent: the loss
still falls, only not along the schedule or not on the data given. So the oracle is the plain
Trainer, which captures nothing: from the same seeded weights on the same batches, with a
learning rate that changes at every step (warm-up, then cosine) and with a batch of another
shape in the middle (trained as a plain step, leaving the graph's buffers alone), the two
trajectories must agree up to rounding, measured as in compiled_training:
|graphed - plain| / |plain - initial| over every parameter, after every step. The record also
counts the replayed steps, so a trainer that silently never replays cannot pass. After every
training step both trainers also score two eval batches (one they trained on, one unseen) (the eval graph shares the training
graph's memory pool, so an eval replay that overwrote what the training graph keeps, or read
the batch it was captured with, shows in the eval losses or in the next step).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._util import generator, rtol_atol, torch_device


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().to("cpu", torch.float64).flatten() for p in model.parameters()])


class _Run(NamedTuple):
    runner: object            # the trainer, for its counts
    start: torch.Tensor       # the parameters before the first step
    losses: list[float]       # each step's training loss
    evals: list[float]        # after each step, each eval batch's loss
    rates: list[float]        # the learning rate each optimizer held after the step
    snapshots: list[torch.Tensor]  # the parameters after each step


def captured_step_matches_plain(*, device: str, steps: int = 8, capture_after: int = 2, layers: int = 2,
                                scope: str | None = None, seed: int = 0, tolerance: dict | None = None) -> dict:
    """`steps` train_batch calls of the tiny preset cut to `layers` decoder layers on the fast
    path, once by runtime.Trainer and once by step_graph.GraphedTrainer(capture_after=...), with
    compile=scope (None: eager; "model": the whole decoder body, the bench's configuration).
    Batch 4 x 32 except step capture_after + 2, which is 4 x 16 (another layout).

    After each step both score two batches (eval_batch): the first training batch and an unseen one.

    Observations: trajectory_rel_diff (max over steps), eval_max_rel_diff, replayed_evals,
    plain_rerun_rel_diff (the same measure between the first plain run of the process and the
    oracle's: the device's nondeterminism and the compiler's shape specialisation, below),
    loss_max_rel_diff, lr_max_rel_diff (the learning rate each optimizer held after the step),
    replayed_steps, plain_steps, steps, update_norm, rtol (the bfloat16 entry of the tolerance)."""
    from pvlab.runtime import checkpoint, data, step_graph, trainer
    from pvlab.runtime.config import preset

    dev = torch_device(device)
    rtol, _ = rtol_atol(tolerance, "bfloat16")
    config = preset("tiny").replace(num_hidden_layers=int(layers))
    other = int(capture_after) + 2
    draw = generator(seed)
    batches = [data.LMBatch.from_sequences(torch.randint(0, config.vocab_size, (4, 17 if i == other else 33),
                                                         generator=draw)) for i in range(int(steps))]
    # Scored after every step: the first training batch (its loss falls as it is learnt) and an
    # unseen one, same layout, so the eval graph replays both. Two random batches of an
    # untrained model score within 1 % of each other: an eval graph that kept scoring the batch
    # it was captured with survived that on an H100 (0.0067 against a bound of 0.01).
    held_out = [batches[0], data.LMBatch.from_sequences(torch.randint(0, config.vocab_size, (4, 33), generator=draw))]
    options = dict(lr=3e-3, weight_decay=0.1, grad_clip=1.0, seed=seed, warmup_steps=2, total_steps=int(steps),
                   min_lr=3e-4, compile=scope or False)

    def run(kind, **extra) -> _Run:
        model = checkpoint.init_model(config=config, weights="random", seed=seed, device=str(dev), path="fast",
                                      parity_gate=False)
        done = _Run(kind(model, **options, **extra), _flat(model), [], [], [], [])
        for batch in batches:
            done.losses.append(done.runner.train_batch(batch))
            done.rates.append(float(done.runner.optimizer.param_groups[0]["lr"]))
            done.snapshots.append(_flat(model))
            done.evals.extend(done.runner.eval_batch(b) for b in held_out)
        return done

    # The first run in a process sees torch.compile specialise to the first shape and recompile
    # for both at the short batch; later runs start from that dynamic-shape code. Other kernels,
    # other bf16 rounding, which Adam amplifies (an element whose gradient is rounding noise still
    # moves by ~lr). So the oracle is the plain run made after one, under the compiler state the
    # graphed run meets; the first run's distance from it is reported as the noise of that.
    first = run(trainer.Trainer)
    plain = run(trainer.Trainer)
    graphed = run(step_graph.GraphedTrainer, capture_after=int(capture_after))

    def trajectory(other: _Run) -> list[float]:
        return [float((o - p).norm() / (p - plain.start).norm()) for o, p in zip(other.snapshots, plain.snapshots)]

    def worst_relative(mine: list[float], theirs: list[float]) -> float:
        return max(abs(a - b) / abs(b) for a, b in zip(mine, theirs))

    relative = trajectory(graphed)
    return {"trajectory_rel_diff": max(relative),
            "loss_max_rel_diff": worst_relative(graphed.losses, plain.losses),
            "eval_max_rel_diff": worst_relative(graphed.evals, plain.evals),
            "replayed_evals": graphed.runner.replayed_evals,
            "lr_max_rel_diff": worst_relative(graphed.rates, plain.rates),
            "replayed_steps": graphed.runner.replayed_steps, "plain_steps": graphed.runner.plain_steps,
            "plain_rerun_rel_diff": max(trajectory(first)),
            "steps": len(relative), "update_norm": float((plain.snapshots[-1] - plain.start).norm()), "rtol": rtol}
