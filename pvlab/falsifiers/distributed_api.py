"""runtime.distributed's trainer API used directly (not through `pretrain`), in a one-process gloo
group in this process: what a caller of DistributedTrainer, save_sharded and resume relies on.

Oracles written here: runtime.Trainer's settings on one device (the distributed trainer's
docstring promises its optimizer, schedule and clipping; so its defaults must be Trainer's),
the path asked for, the step count the check itself took, the directory the check named, and
the parameters the check saved (compared bit for bit after resume).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from .entrypoints import _single_rank_torchrun_env


def trainer_api_round_trip(*, device: str, steps: int = 2, tolerance: dict | None = None) -> dict:
    """In a one-process gloo group: DistributedTrainer(model, ctx) with every default has
    runtime.Trainer(model)'s hyperparameters; DistributedTrainer(..., path="fast") runs the fast
    path; `steps` train_batch calls, then save_sharded(trainer, D) returns D, and
    DistributedTrainer.resume(D, ctx) comes back at step `steps` with the same parameters.

    Observations: default_mismatches (hyperparameter names whose values differ, or a
    construction with every default that raised), path_wrong, save_return_wrong,
    resumed_step_wrong, resumed_param_mismatches, parameters, gated_placeholder (resume ran the
    parity gate on the placeholder model it then overwrites), crashed (a trainer without a path
    argument failed to construct)."""
    import torch.distributed as dist

    from pvlab.runtime import checkpoint, distributed
    from pvlab.runtime.config import preset
    from pvlab.runtime.data import LMBatch
    from pvlab.runtime.trainer import Trainer

    if dist.is_initialized():
        raise RuntimeError("a process group is already initialised in this process; the check needs its own")

    def tiny():
        return checkpoint.init_model(config=preset("tiny"), weights="random", seed=0, device="cpu",
                                     path="reference", parity_gate=False)

    generator = torch.Generator().manual_seed(0)
    batch = LMBatch.from_sequences(torch.randint(1, preset("tiny").vocab_size, (4, 17), generator=generator))
    with tempfile.TemporaryDirectory(prefix="pv-dist-api-") as tmp, _single_rank_torchrun_env():
        ctx = distributed.init("cpu")
        try:
            single = Trainer(tiny()).hyperparameters
            try:
                defaults = distributed.DistributedTrainer(tiny(), ctx).hyperparameters
                default_mismatches = sorted(k for k in set(defaults) | set(single) if defaults.get(k) != single.get(k))
            except Exception as error:  # noqa: BLE001 - every argument left at its default must construct
                default_mismatches = [f"construction with defaults raised {type(error).__name__}"]
            fast = distributed.DistributedTrainer(tiny(), ctx, path="fast")
            path_wrong = int(fast.path != "fast" or fast.model.path != "fast")
            try:
                trainer = distributed.DistributedTrainer(tiny(), ctx, warmup_steps=1, total_steps=10)
            except Exception as error:  # noqa: BLE001 - a trainer without a path argument must construct
                return {"default_mismatches": len(default_mismatches), "path_wrong": path_wrong, "crashed": 1,
                        "first_failure": f"{type(error).__name__}: {error}", "save_return_wrong": 1,
                        "resumed_step_wrong": 1, "resumed_param_mismatches": 1, "parameters": 0,
                        "gated_placeholder": 1}
            for _ in range(steps):
                trainer.train_batch(batch)
            saved = {name: value.clone() for name, value in trainer.full_state().items()}
            directory = Path(tmp) / "sharded"
            returned = distributed.save_sharded(trainer, directory)
            resumed = distributed.DistributedTrainer.resume(directory, ctx)
            state = resumed.full_state()
            mismatches = sum(1 for name, value in saved.items()
                             if name not in state or not torch.equal(state[name], value))
            # resume's random placeholder is overwritten by the load: it is placed ungated (no
            # forward pass over weights about to be replaced), so it carries no parity report
            gated_placeholder = int(getattr(resumed.model, "parity_report", None) is not None)
        finally:
            distributed.shutdown()
    return {"default_mismatches": len(default_mismatches), "path_wrong": path_wrong,
            "save_return_wrong": int(returned != directory), "resumed_step_wrong": int(resumed.step != steps),
            "resumed_param_mismatches": mismatches, "parameters": len(saved),
            "gated_placeholder": gated_placeholder, "crashed": 0, "first_failure": ""}
