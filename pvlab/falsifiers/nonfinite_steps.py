"""A training step whose loss is non-finite changes nothing, on both execution paths.

Trainer.train_batch documents: "A non-finite loss skips the update and is counted in
`nonfinite_losses`". Counting alone (FALSIFY-DOCUMENTED-VALUES-004) does not say the update was
skipped: a guard that counts the bad step and falls through applies NaN gradients (the reference
path's host-side skip) or, where the optimizer skips on the device (fused AdamW, the fast path's
optimizer on the CPU too), drops the update but advances the step counter and with it the
learning-rate schedule. The oracle here is the trainer's own state before the step, snapshotted
by the check (every parameter, every optimizer-state tensor and setting, `trainer.step`) and
compared bit for bit with NaN equal to NaN: it shares none of the trainer's skip logic
(`_read_step`, `skips_on_device`, the `found_inf` hand-off).
"""

from __future__ import annotations

import math

from ._util import torch_device


def _same(a, b) -> bool:
    """Bit-for-bit equality with NaN equal to NaN (torch.equal with equal_nan semantics)."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
            return False
        if a.is_floating_point() or a.is_complex():
            both_nan = torch.isnan(a) & torch.isnan(b)
            return bool(((a == b) | both_nan).all())
        return bool(torch.equal(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _snapshot(model, optimizer) -> dict:
    """Copies of everything a step may change, by parameter name (read from the model itself)."""
    import torch

    params = {name: p.detach().clone() for name, p in model.named_parameters()}
    state = {}
    for name, p in model.named_parameters():
        for key, value in optimizer.state.get(p, {}).items():
            state[(name, key)] = value.detach().clone() if isinstance(value, torch.Tensor) else value
    groups = [{k: v for k, v in group.items() if k not in ("params", "lr")} for group in optimizer.param_groups]
    return {"params": params, "state": state, "groups": groups}


def _differences(before: dict, after: dict) -> tuple[int, int, int]:
    params = sum(1 for name in before["params"] if not _same(before["params"][name], after["params"].get(name)))
    params += len(set(after["params"]) ^ set(before["params"]))
    keys = set(before["state"]) | set(after["state"])
    state = sum(1 for key in keys if key not in before["state"] or key not in after["state"]
                or not _same(before["state"][key], after["state"][key]))
    groups = int(len(before["groups"]) != len(after["groups"]))
    for g_before, g_after in zip(before["groups"], after["groups"]):
        for key in set(g_before) | set(g_after):
            groups += int(not _same(g_before.get(key), g_after.get(key)))
    return params, state, groups


def nonfinite_step_changes_nothing(*, device: str, paths: list | None = None, healthy_steps: int = 2,
                                   poisoned_token: int = 7, lr: float = 1e-3) -> dict:
    """For each execution path: a tiny random model trains `healthy_steps` finite steps (so the
    optimizer holds moments and step counts, and the run is past its first warmup step), then
    one embedding row that the batch reads (`poisoned_token`) is set to NaN, as a corrupted
    checkpoint row or a row an earlier overflow wrote would be, and one more step is taken on
    the batch. That step's loss is NaN; after it every parameter (the NaN row included, NaN
    equal to NaN), every optimizer-state tensor and setting (the learning rate aside, which
    train_step rewrites from the schedule at every step), and `trainer.step` must be what they
    were before it, and `nonfinite_losses` must have grown by one.

    The fast path's optimizer is read from `optimizer.defaults` (torch's own flag), so the
    device-side skip (fused AdamW) is known to be the one exercised.

    Observations: paths; per path P: P_params_changed, P_state_changed, P_groups_changed,
    P_step_advanced, P_nonfinite_counted, P_poisoned_loss_finite, P_healthy_updates (parameters
    the healthy steps moved: a trainer that never updates would pass vacuously), P_fused; and
    over the paths: params_changed, state_changed, groups_changed, step_advanced,
    nonfinite_counted, poisoned_losses_finite, healthy_paths (paths whose healthy steps moved
    every parameter the batch reaches, at least one), fast_fused."""
    import torch

    from pvlab.runtime import data, trainer

    from . import fixtures

    dev = torch_device(device)
    paths = list(paths or ["reference", "fast"])
    batch = data.LMBatch.from_sequences([[1, 2, 3, poisoned_token, 5, 6], [8, 9, poisoned_token, 10, 11, 12]])
    obs: dict = {"paths": len(paths)}
    totals = dict.fromkeys(("params_changed", "state_changed", "groups_changed", "step_advanced",
                            "nonfinite_counted", "poisoned_losses_finite", "healthy_paths", "fast_fused"), 0)
    for path in paths:
        model = fixtures.fresh_copy(fixtures.random_model("tiny")).to(dev)
        # A schedule that moves at every step (warmup then cosine): a step counter that advances
        # on a skipped step changes the rate of every later step.
        run = trainer.Trainer(model, lr=lr, warmup_steps=2, total_steps=20, min_lr=lr / 10, path=path, device=dev)
        fused = int(bool(run.optimizer.defaults.get("fused")))
        start = {name: p.detach().clone() for name, p in model.named_parameters()}
        for _ in range(healthy_steps):
            run.train_step([batch])
        moved = sum(1 for name, p in model.named_parameters() if not torch.equal(start[name], p.detach()))
        with torch.no_grad():
            dict(model.named_parameters())["model.embed_tokens.weight"][poisoned_token] = float("nan")
        before = _snapshot(model, run.optimizer)
        step_before, count_before = run.step, run.nonfinite_losses
        loss = run.train_step([batch])
        after = _snapshot(model, run.optimizer)
        params, state, groups = _differences(before, after)
        values = {"params_changed": params, "state_changed": state, "groups_changed": groups,
                  "step_advanced": run.step - step_before, "nonfinite_counted": run.nonfinite_losses - count_before,
                  "poisoned_loss_finite": int(loss is not None and math.isfinite(loss)),
                  "healthy_updates": moved, "fused": fused}
        for key, value in values.items():
            obs[f"{path}_{key}"] = value
        for key in ("params_changed", "state_changed", "groups_changed", "step_advanced", "nonfinite_counted"):
            totals[key] += values[key]
        totals["poisoned_losses_finite"] += values["poisoned_loss_finite"]
        totals["healthy_paths"] += int(moved == len(start) and moved > 0)
        if path == "fast":
            totals["fast_fused"] = fused
    obs.update(totals)
    return obs
