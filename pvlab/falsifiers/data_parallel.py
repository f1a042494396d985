"""Checks of data-parallel training (runtime.distributed): each starts `world_size` ranks itself
(pvlab.falsifiers.launch: torchrun's environment, gloo on the CPU, NCCL on CUDA, a hard timeout),
collects what every rank observed, and compares it here, in this process, with an independent
reference: one device training on the global batch (runtime.Trainer, the single-device code),
float64 autograd on the global batch, transformers reading the consolidated directory.

A failing or hanging rank raises (launch.RankFailed / RanksTimedOut): an ERROR, never a pass.
Every check returns `world_size` and `backend` with its observations, so the ledger record says
how the run was distributed.

The model is the tiny preset from random init (seed), the data a seeded random token stream cut
into the runtime's windows: cheap enough for CI's two cores (see docs/distributed.md for times).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from . import launch
from ._util import device_unavailable, rtol_atol, torch_device

VOCAB = 512            # the tiny preset's vocabulary
STREAM_TOKENS = 6000
RANK_ENVIRONMENT = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # W ranks share the cores


# ---- what every rank does first ------------------------------------------------------------------

def _stream(seed: int) -> torch.Tensor:
    generator = torch.Generator(device="cpu").manual_seed(seed + 1)
    return torch.randint(0, VOCAB, (STREAM_TOKENS,), generator=generator)


def _fresh_model(seed: int):
    from pvlab.runtime import checkpoint

    return checkpoint.init_model(config="tiny", weights="random", seed=seed, device="cpu", path="reference",
                                 parity_gate=False)


def _windows(seed: int, seq_len: int) -> torch.Tensor:
    from pvlab.runtime import distributed

    return distributed.epoch_windows(_stream(seed), seq_len)


def _trainer(ctx, *, strategy: str, seed: int, path: str, accumulation_steps: int, lr: float):
    from pvlab.runtime import distributed

    return distributed.DistributedTrainer(_fresh_model(seed), ctx, strategy=strategy, path=path, seed=seed, lr=lr,
                                          accumulation_steps=accumulation_steps)


def _rank_batches(ctx, *, seed: int, seq_len: int, batch_size: int, position: int = 0):
    from pvlab.runtime import distributed

    return distributed.RankWindows(_windows(seed, seq_len), rank=ctx.rank, world_size=ctx.world_size,
                                   batch_size=batch_size, seed=seed, position=position)


def _launch(target, device: str, world_size: int, timeout_s: float, **kwargs) -> list[dict[str, Any]]:
    if device != "cpu":
        # One GPU per rank (NCCL): fewer GPUs than ranks is a machine that cannot run the claim
        # (SKIP, not evidence), not a failing rank (ERROR).
        torch_device(device)
        if torch.cuda.device_count() < world_size:
            raise device_unavailable(f"{world_size} ranks on {device} need {world_size} GPUs, one per rank; "
                                     f"this machine has {torch.cuda.device_count()}")
    return launch.run_ranks(target, world_size=world_size, timeout_s=timeout_s, environment=RANK_ENVIRONMENT,
                            kwargs={"device": device, **kwargs})


def _header(world_size: int, device: str) -> dict[str, Any]:
    return {"world_size": world_size, "backend": launch.backend_for(device)}


def _max_diff(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> tuple[float, float]:
    """max |a - b| over every tensor of two name->tensor maps (float64), and max |b|."""
    if set(first) != set(second):
        raise ValueError(f"different tensors: {sorted(set(first) ^ set(second))[:3]}")
    diff = max(float((first[k].double().cpu() - second[k].double().cpu()).abs().max()) for k in first)
    return diff, max(float(second[k].double().abs().max()) for k in second)


def _run_against(run: dict[str, Any], reference: dict[str, Any], tolerance: dict | None) -> dict[str, float]:
    """A rank's run (its "losses" and final "state") against a reference run: the largest loss and
    parameter differences, the reference's magnitudes, and the float32 rtol/atol."""
    param_diff, param_ref = _max_diff(run["state"], reference["state"])
    rtol, atol = rtol_atol(tolerance, "float32")
    return {"rtol": rtol, "atol": atol,
            "loss_max_abs_diff": max(abs(a - b) for a, b in zip(run["losses"], reference["losses"])),
            "loss_max_abs_ref": max(abs(b) for b in reference["losses"]),
            "param_max_abs_diff": param_diff, "param_max_abs_ref": param_ref}


def _single_device_trainer(device: str, *, seed: int, path: str, lr: float):
    from pvlab.runtime.trainer import Trainer

    return Trainer(_fresh_model(seed), lr=lr, seed=seed, path=path, device=device)


def _global_batches(*, seed: int, seq_len: int, global_batch: int, steps: int) -> list:
    """What one process with batch W*B trains on: the sampler at world size 1."""
    from pvlab.runtime import distributed

    windows = distributed.RankWindows(_windows(seed, seq_len), rank=0, world_size=1, batch_size=global_batch,
                                      seed=seed)
    return [next(windows) for _ in range(steps)]


# ---- DDP on W ranks == one device with the global batch ------------------------------------------

def _train_rank(*, device: str, strategy: str, steps: int, batch_size: int, seq_len: int, seed: int, path: str,
                accumulation_steps: int, lr: float) -> dict[str, Any]:
    from pvlab.runtime import distributed

    ctx = distributed.init(device)
    trainer = _trainer(ctx, strategy=strategy, seed=seed, path=path, accumulation_steps=accumulation_steps, lr=lr)
    batches = _rank_batches(ctx, seed=seed, seq_len=seq_len, batch_size=batch_size)
    losses, norms = [], []
    for _ in range(steps):
        losses.append(trainer.train_batch(next(batches)))
        norms.append(trainer.last_grad_norm)
    return {"losses": losses, "norms": norms, "state": trainer.full_state()}


def ddp_matches_single_device(*, device: str, world_size: int = 2, strategy: str = "ddp", steps: int = 3,
                              batch_size: int = 2, seq_len: int = 16, accumulation_steps: int = 1,
                              path: str = "reference", lr: float = 1e-3, seed: int = 0, timeout_s: float = 300,
                              tolerance: dict | None = None) -> dict:
    """`steps` steps of DistributedTrainer on `world_size` ranks with per-rank batch `batch_size`,
    against runtime.Trainer on one device with batch world_size * batch_size on the same windows.

    Observations: loss_max_abs_diff / loss_max_abs_ref (over every step), param_max_abs_diff /
    param_max_abs_ref (every parameter after the last step), grad_norm_max_rel_diff (the reported
    pre-clip norms), replica_max_abs_diff (rank 0 against every other rank), steps, rtol, atol,
    world_size, backend."""
    torch_device(device)
    ranks = _launch(_train_rank, device, world_size, timeout_s, strategy=strategy, steps=steps,
                    batch_size=batch_size, seq_len=seq_len, seed=seed, path=path,
                    accumulation_steps=accumulation_steps, lr=lr)
    single = _single_device_trainer(device, seed=seed, path=path, lr=lr)
    losses, norms = [], []
    for batch in _global_batches(seed=seed, seq_len=seq_len, global_batch=world_size * batch_size, steps=steps):
        losses.append(single.train_batch(batch))
        norms.append(single.last_grad_norm)
    reference_state = {name: p.detach().cpu() for name, p in single.model.named_parameters()}
    param_diff, param_ref = _max_diff(ranks[0]["state"], reference_state)
    replica = max(_max_diff(r["state"], ranks[0]["state"])[0] for r in ranks)
    rtol, atol = rtol_atol(tolerance, "float32")
    return {**_header(world_size, device), "steps": steps, "rtol": rtol, "atol": atol,
            "loss_max_abs_diff": max(abs(a - b) for a, b in zip(ranks[0]["losses"], losses)),
            "loss_max_abs_ref": max(abs(b) for b in losses),
            "param_max_abs_diff": param_diff, "param_max_abs_ref": param_ref,
            "grad_norm_max_rel_diff": max(abs(a - b) / b for a, b in zip(ranks[0]["norms"], norms)),
            "replica_max_abs_diff": replica}


# ---- the all-reduced gradient == the float64 gradient of the global batch ------------------------

def _gradient_rank(*, device: str, strategy: str, batch_size: int, seq_len: int, seed: int, path: str,
                   accumulation_steps: int) -> dict[str, Any]:
    from pvlab.runtime import distributed

    ctx = distributed.init(device)
    trainer = _trainer(ctx, strategy=strategy, seed=seed, path=path, accumulation_steps=accumulation_steps, lr=1e-3)
    early: dict[str, torch.Tensor] = {}

    def after_micro_batch(index: int) -> None:
        # DDP keeps full local gradients between micro-batches: after the first (non-final) one
        # they must still be this rank's own, not yet averaged with the other ranks'.
        if index == 0 and accumulation_steps > 1 and strategy == "ddp":
            early.update({n: p.grad.detach().cpu().clone() for n, p in trainer.named_parameters})

    loss = trainer.accumulate_gradients(next(_rank_batches(ctx, seed=seed, seq_len=seq_len, batch_size=batch_size)),
                                        after_micro_batch)
    # A parameter without a gradient is an observation (counted by the check), not a crash.
    grads = {n: None if p.grad is None else distributed.full_tensor(p.grad.detach()).cpu().clone()
             for n, p in trainer.named_parameters}
    return {"loss": loss, "grads": grads, "early": early}


def _zero_filled(grads: dict[str, torch.Tensor | None], like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {n: torch.zeros_like(like[n]) if g is None else g for n, g in grads.items()}


def _float64_gradient(batches: list, *, seed: int, scale: float = 1.0) -> dict[str, torch.Tensor]:
    """d(scale * token-mean loss over all `batches` together)/d(parameters), float64, CPU."""
    model = _fresh_model(seed).double()
    inputs = torch.cat([b.inputs for b in batches])
    targets = torch.cat([b.targets for b in batches])
    (model.loss(inputs, targets) * scale).backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def allreduced_gradient(*, device: str, world_size: int = 2, strategy: str = "ddp", batch_size: int = 2,
                        seq_len: int = 16, accumulation_steps: int = 1, path: str = "reference", seed: int = 0,
                        timeout_s: float = 300, tolerance: dict | None = None) -> dict:
    """One DistributedTrainer.accumulate_gradients on every rank (no optimizer step); each rank's
    gradient (gathered whole under FSDP) against the float64 gradient of the global batch's
    token-mean loss, computed here from random init by autograd. With accumulation_steps > 1 and
    DDP, also the gradient after the first micro-batch, which must be the rank's own (1 /
    accumulation_steps of its micro-batch's float64 gradient): synchronising early would already
    have averaged it with the other ranks'.

    Observations: grad_max_abs_diff / grad_max_abs_ref (worst rank, worst parameter; a missing
    gradient counts as zero), parameters_without_grad (over all ranks), rank_max_abs_diff (ranks
    against rank 0), early_sync_max_abs_diff / early_max_abs_ref (DDP
    with accumulation only), rtol, atol, world_size, backend."""
    from pvlab.runtime import distributed

    torch_device(device)
    ranks = _launch(_gradient_rank, device, world_size, timeout_s, strategy=strategy, batch_size=batch_size,
                    seq_len=seq_len, seed=seed, path=path, accumulation_steps=accumulation_steps)
    (batch,) = _global_batches(seed=seed, seq_len=seq_len, global_batch=world_size * batch_size, steps=1)
    reference = _float64_gradient([batch], seed=seed)
    missing = sum(g is None for r in ranks for g in r["grads"].values())
    grads = [_zero_filled(r["grads"], reference) for r in ranks]
    rtol, atol = rtol_atol(tolerance, "float32")
    observed = {**_header(world_size, device), "rtol": rtol, "atol": atol, "parameters_without_grad": missing,
                "grad_max_abs_diff": max(_max_diff(g, reference)[0] for g in grads),
                "grad_max_abs_ref": _max_diff(grads[0], reference)[1],
                "rank_max_abs_diff": max(_max_diff(g, grads[0])[0] for g in grads)}
    if accumulation_steps > 1 and strategy == "ddp":
        early_diffs, early_refs = [], []
        windows = _windows(seed, seq_len)
        for rank, result in enumerate(ranks):
            own = distributed.RankWindows(windows, rank=rank, world_size=world_size, batch_size=batch_size, seed=seed)
            first_micro = _split(next(own), accumulation_steps)[0]
            expected = _float64_gradient([first_micro], seed=seed, scale=1.0 / accumulation_steps)
            diff, ref = _max_diff(result["early"], expected)
            early_diffs.append(diff)
            early_refs.append(ref)
        observed.update(early_sync_max_abs_diff=max(early_diffs), early_max_abs_ref=max(early_refs))
    return observed


def _split(batch, count: int) -> list:
    from pvlab.runtime.data import LMBatch

    size = batch.inputs.shape[0] // count
    return [LMBatch(batch.inputs[i:i + size], batch.targets[i:i + size]) for i in range(0, size * count, size)]


# ---- rank shards ---------------------------------------------------------------------------------

def _shard_rank(*, device: str, num_items: int, epochs: int, batch_size: int, seq_len: int,
                seed: int) -> dict[str, Any]:
    from pvlab.runtime import distributed

    ctx = distributed.init(device)
    shards = [distributed.shard_indices(num_items, rank=ctx.rank, world_size=ctx.world_size, seed=seed, epoch=e)
              for e in range(epochs)]
    sampler = _rank_batches(ctx, seed=seed, seq_len=seq_len, batch_size=batch_size)
    epoch_batches = [i for _ in range(sampler.steps_per_epoch) for i in sampler.next_indices()]
    return {"shards": shards, "epoch_batches": epoch_batches, "windows": int(sampler.windows.shape[0]),
            "steps_per_epoch": sampler.steps_per_epoch}


def rank_shards(*, device: str, world_size: int = 2, num_items: int = 25, epochs: int = 2, batch_size: int = 4,
                seq_len: int = 16, seed: int = 0, timeout_s: float = 300) -> dict:
    """Every rank's shard_indices for `epochs` epochs of `num_items` items, and the window indices
    of one epoch of the batches the rank trains on (RankWindows).

    Observations: shard_overlap (items in more than one rank's shard, summed over epochs),
    shard_covered (distinct items over all ranks, summed over epochs), shard_expected
    (num_items * epochs), shard_duplicates (an item twice in one rank's shard), batch_overlap,
    batch_covered (distinct windows trained on in one epoch), batch_expected (steps_per_epoch *
    world_size * batch_size), batch_windows (windows in the stream), world_size, backend."""
    torch_device(device)
    ranks = _launch(_shard_rank, device, world_size, timeout_s, num_items=num_items, epochs=epochs,
                    batch_size=batch_size, seq_len=seq_len, seed=seed)

    def overlap_and_cover(lists: list[list[int]]) -> tuple[int, int, int]:
        seen: dict[int, int] = {}
        for one in lists:
            for item in set(one):
                seen[item] = seen.get(item, 0) + 1
        duplicates = sum(len(one) - len(set(one)) for one in lists)
        return sum(1 for c in seen.values() if c > 1), len(seen), duplicates

    shard = [overlap_and_cover([r["shards"][e] for r in ranks]) for e in range(epochs)]
    batch_overlap, batch_covered, batch_duplicates = overlap_and_cover([r["epoch_batches"] for r in ranks])
    return {**_header(world_size, device),
            "shard_overlap": sum(s[0] for s in shard), "shard_covered": sum(s[1] for s in shard),
            "shard_duplicates": sum(s[2] for s in shard) + batch_duplicates, "shard_expected": num_items * epochs,
            "batch_overlap": batch_overlap, "batch_covered": batch_covered,
            "batch_expected": ranks[0]["steps_per_epoch"] * world_size * batch_size,
            "batch_windows": ranks[0]["windows"]}


# ---- FSDP2 == DDP --------------------------------------------------------------------------------

def _both_rank(**kwargs) -> dict[str, Any]:
    return {strategy: _train_rank(strategy=strategy, **kwargs) for strategy in ("ddp", "fsdp")}


def fsdp_matches_ddp(*, device: str, world_size: int = 2, steps: int = 3, batch_size: int = 2, seq_len: int = 16,
                     accumulation_steps: int = 2, path: str = "reference", lr: float = 1e-3, seed: int = 0,
                     timeout_s: float = 300, tolerance: dict | None = None) -> dict:
    """The same ranks train `steps` steps with DDP, then with FSDP2 from the same init on the same
    batches (with gradient accumulation, so both no-sync mechanisms run).

    Observations: loss_max_abs_diff / loss_max_abs_ref, param_max_abs_diff / param_max_abs_ref
    (FSDP's parameters gathered whole against DDP's), grad_norm_max_rel_diff, rtol, atol,
    world_size, backend."""
    torch_device(device)
    ranks = _launch(_both_rank, device, world_size, timeout_s, steps=steps, batch_size=batch_size, seq_len=seq_len,
                    seed=seed, path=path, accumulation_steps=accumulation_steps, lr=lr)
    ddp, fsdp = ranks[0]["ddp"], ranks[0]["fsdp"]
    return {**_header(world_size, device), "steps": steps, **_run_against(fsdp, ddp, tolerance),
            "grad_norm_max_rel_diff": max(abs(a - b) / b for a, b in zip(fsdp["norms"], ddp["norms"]))}


# ---- sharded checkpoint -> HF directory -> transformers ------------------------------------------

def _consolidate_rank(*, device: str, workdir: str, strategy: str, steps: int, batch_size: int, seq_len: int,
                      seed: int, path: str) -> dict[str, Any]:
    from pvlab.runtime import distributed

    ctx = distributed.init(device)
    trainer = _trainer(ctx, strategy=strategy, seed=seed, path=path, accumulation_steps=1, lr=1e-3)
    batches = _rank_batches(ctx, seed=seed, seq_len=seq_len, batch_size=batch_size)
    for _ in range(steps):
        trainer.train_batch(next(batches))
    state = trainer.full_state()
    out = Path(workdir) / "hf"
    distributed.save_and_consolidate(trainer, Path(workdir) / "sharded", out)
    # What this rank finds the moment save_and_consolidate returns to it.
    complete = (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    return {"state": state if ctx.is_main else None, "complete_on_return": complete}


def consolidated_checkpoint(*, device: str, world_size: int = 2, strategy: str = "fsdp", steps: int = 2,
                            batch_size: int = 2, seq_len: int = 16, path: str = "reference", seed: int = 0,
                            timeout_s: float = 300, tolerance: dict | None = None) -> dict:
    """Train `steps` steps on the ranks, save_and_consolidate into a Hugging Face directory, then
    open it with transformers (AutoModelForCausalLM, float32, CPU) and compare its logits on a
    probe batch with the trained model's: the ranks' parameters gathered whole in memory (not
    through the checkpoint) in a runtime CausalLM on the CPU reference path.

    Observations: logits_max_abs_diff / logits_max_abs_ref, missing_tensors (transformers'
    missing + unexpected keys), ranks_complete_on_return (ranks that found the directory complete
    when save_and_consolidate returned to them), rtol, atol, world_size, backend."""
    from transformers import AutoModelForCausalLM

    from pvlab.runtime.config import ModelConfig
    from pvlab.runtime.model import CausalLM

    torch_device(device)
    with tempfile.TemporaryDirectory(prefix="pv-consolidate-") as tmp:
        ranks = _launch(_consolidate_rank, device, world_size, timeout_s, workdir=tmp, strategy=strategy,
                        steps=steps, batch_size=batch_size, seq_len=seq_len, seed=seed, path=path)
        directory = Path(tmp) / "hf"
        opened, info = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, output_loading_info=True)
        config = ModelConfig.from_json_file(directory / "config.json")
    trained = CausalLM(config)
    state = dict(ranks[0]["state"])
    if config.tie_word_embeddings:   # one Parameter, named once by named_parameters()
        state.setdefault("lm_head.weight", state["model.embed_tokens.weight"])
    trained.load_state_dict(state, strict=True)
    probe = _windows(seed + 7, seq_len)[:2, :-1]
    with torch.no_grad():
        expected = trained.eval()(probe)
        got = opened.eval()(input_ids=probe).logits
    rtol, atol = rtol_atol(tolerance, "float32")
    return {**_header(world_size, device), "rtol": rtol, "atol": atol,
            "logits_max_abs_diff": float((got.double() - expected.double()).abs().max()),
            "logits_max_abs_ref": float(expected.double().abs().max()),
            "missing_tensors": len(info["missing_keys"]) + len(info["unexpected_keys"]),
            "ranks_complete_on_return": sum(int(r["complete_on_return"]) for r in ranks)}


# ---- resume from W ranks on one ---------------------------------------------------------------

def _interrupted_rank(*, device: str, workdir: str, strategy: str, steps_before: int, steps_after: int,
                      batch_size: int, seq_len: int, seed: int, path: str) -> dict[str, Any]:
    from pvlab.runtime import distributed

    ctx = distributed.init(device)
    trainer = _trainer(ctx, strategy=strategy, seed=seed, path=path, accumulation_steps=1, lr=1e-3)
    batches = _rank_batches(ctx, seed=seed, seq_len=seq_len, batch_size=batch_size)
    for _ in range(steps_before):
        trainer.train_batch(next(batches))
    distributed.save_sharded(trainer, Path(workdir) / "sharded")
    losses = [trainer.train_batch(next(batches)) for _ in range(steps_after)]   # the uninterrupted run
    return {"losses": losses, "state": trainer.full_state()}


def _resumed_rank(*, device: str, workdir: str, strategy: str, steps_after: int, global_batch: int,
                  seq_len: int, seed: int) -> dict[str, Any]:
    from pvlab.runtime import distributed

    ctx = distributed.init(device)
    trainer = distributed.DistributedTrainer.resume(Path(workdir) / "sharded", ctx, strategy=strategy)
    batches = _rank_batches(ctx, seed=seed, seq_len=seq_len, batch_size=global_batch // ctx.world_size,
                            position=trainer.step)
    step_after_resume = trainer.step
    losses = [trainer.train_batch(next(batches)) for _ in range(steps_after)]
    return {"losses": losses, "state": trainer.full_state(), "step_after_resume": step_after_resume}


def resume_on_other_world_size(*, device: str, world_size: int = 2, resume_world_size: int = 1,
                               strategy: str = "fsdp", resume_strategy: str = "ddp", steps_before: int = 2,
                               steps_after: int = 2, batch_size: int = 2, seq_len: int = 16,
                               path: str = "reference", seed: int = 0, timeout_s: float = 300,
                               tolerance: dict | None = None) -> dict:
    """`world_size` ranks train steps_before steps, save_sharded, and go on for steps_after more
    (the uninterrupted run); then `resume_world_size` ranks resume the sharded checkpoint (with
    `resume_strategy`, the same global batch) and train steps_after steps on the same windows.

    Observations: loss_max_abs_diff / loss_max_abs_ref (the steps after the resume),
    param_max_abs_diff / param_max_abs_ref (every parameter at the end), step_after_resume,
    steps_before, resume_world_size, rtol, atol, world_size, backend."""
    torch_device(device)
    with tempfile.TemporaryDirectory(prefix="pv-resume-") as tmp:
        straight = _launch(_interrupted_rank, device, world_size, timeout_s, workdir=tmp, strategy=strategy,
                           steps_before=steps_before, steps_after=steps_after, batch_size=batch_size,
                           seq_len=seq_len, seed=seed, path=path)[0]
        resumed = _launch(_resumed_rank, device, resume_world_size, timeout_s, workdir=tmp,
                          strategy=resume_strategy, steps_after=steps_after, global_batch=world_size * batch_size,
                          seq_len=seq_len, seed=seed)[0]
    return {**_header(world_size, device), "resume_world_size": resume_world_size,
            **_run_against(resumed, straight, tolerance), "step_after_resume": resumed["step_after_resume"], "steps_before": steps_before}
