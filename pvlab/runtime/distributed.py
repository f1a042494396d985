"""Data-parallel training on torch.distributed: DDP or FSDP2 (`fully_shard`), launched by torchrun.

    torchrun --nproc-per-node 2 -m pvlab.runtime pretrain --config tiny --steps 40 --out ckpt/

    ctx = distributed.init("cpu")                   # reads torchrun's RANK/WORLD_SIZE/... ; gloo or nccl
    trainer = distributed.DistributedTrainer(model, ctx, strategy="fsdp", accumulation_steps=2)
    loss = trainer.train_batch(rank_batch)          # this rank's B sequences; the same loss on every rank
    distributed.save_sharded(trainer, "run/sharded")         # torch.distributed.checkpoint, every rank
    distributed.consolidate("run/sharded", "run/hf", ...)    # rank 0: a transformers directory
    trainer = distributed.DistributedTrainer.resume("run/sharded", ctx, strategy="ddp")  # any world size

What the pieces promise (contracts/distributed-training-v1.yaml falsifies each):

* **Sampler** (`shard_indices`, `RankWindows`): the training data is the stream cut into
  non-overlapping windows; each epoch is a seeded permutation of them, and rank r takes every
  W-th window from position r. Shards are disjoint and together cover the epoch, and the windows
  all ranks use at step s are exactly the windows one process with batch W*B uses at step s -- so
  the world size can change on resume without changing the data.
* **Loss scale**: every micro-batch loss is scaled by W * tokens / global tokens (all ranks, all
  micro-batches of the step), so after DDP/FSDP *average* the gradients over ranks the gradient is
  that of the token-mean loss of the whole global batch, padding and uneven batches included.
* **Accumulation**: the non-final micro-batches run without gradient synchronisation
  (`DistributedDataParallel.no_sync`, FSDP2 `set_requires_gradient_sync(False)`); the final one
  synchronises the accumulated sum once.
* **Gradient norm** is the global norm over every (sharded) gradient; clipping scales each rank's
  shard by the same factor.
* **Checkpoints**: `save_sharded` writes model and optimizer state with torch.distributed.checkpoint
  (each rank its shards) plus `trainer.json`; `consolidate` (rank 0, no collectives) reads them into
  a full CPU model and writes a Hugging Face directory; `resume` reshards onto any world size.

Seams (docs/runtime.md "Seams"; planted bugs in pvlab/falsifiers/mutants/distributed.py): every
choice above is a module-level function looked up at call time: shard_indices, wrap_ddp,
wrap_fsdp, gradient_sync, loss_scale, grad_norm, barrier, load_sharded.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
import torch.distributed as dist
import torch.nn as nn

# Sibling modules, not their functions: calls look them up at call time (docs/runtime.md, "Seams").
from . import checkpoint, devices, trainer as trainers
from .config import ModelConfig
from .data import LMBatch
from .errors import ArgumentError, CheckpointError, DataError, DeviceError
from .model import CausalLM

STRATEGIES = ("ddp", "fsdp")
TRAINER_STATE_NAME = "trainer.json"
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


# ---- process group -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Context:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def torchrun_env() -> bool:
    """True inside a process started by torchrun (or pvlab.falsifiers.launch, which sets the same)."""
    return all(name in os.environ for name in TORCHRUN_VARIABLES)


def init(device: str | torch.device = "cpu", *, timeout_s: float = 300.0) -> Context:
    """Join the process group torchrun's environment describes: gloo on the CPU, NCCL on CUDA
    (each rank on GPU LOCAL_RANK). Already initialised: return the context of that group."""
    if not torchrun_env():
        missing = [name for name in TORCHRUN_VARIABLES if name not in os.environ]
        raise ArgumentError(f"not started by torchrun: {', '.join(missing)} unset "
                            "(run `torchrun --nproc-per-node N -m pvlab.runtime pretrain ...`)")
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    requested = devices.resolve_device(device, argument="--device")
    if requested.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise DeviceError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPU(s) on this machine")
        target = torch.device("cuda", local_rank)
        torch.cuda.set_device(target)
        backend = "nccl"
    else:
        target, backend = torch.device("cpu"), "gloo"
    if not dist.is_initialized():
        kwargs: dict[str, Any] = {"device_id": target} if backend == "nccl" else {}
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=timeout_s), **kwargs)
    return Context(rank=rank, world_size=world_size, local_rank=local_rank, backend=dist.get_backend(),
                   device=target)


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier(ctx: Context) -> None:
    """Every rank waits here for every other (device_ids for NCCL, so it does not guess a GPU)."""
    if ctx.backend == "nccl":
        dist.barrier(device_ids=[ctx.device.index])
    else:
        dist.barrier()


# ---- the sampler ---------------------------------------------------------------------------------

def epoch_windows(stream: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The training stream as non-overlapping (seq_len + 1)-token windows, (N, seq_len + 1)."""
    window = seq_len + 1
    count = stream.numel() // window
    if count == 0:
        raise DataError(f"training stream has {stream.numel()} tokens, fewer than one window of {window}")
    return stream[:count * window].view(count, window)


def shard_indices(num_items: int, *, rank: int, world_size: int, seed: int, epoch: int) -> list[int]:
    """This rank's windows of one epoch: a seeded permutation of range(num_items), every
    world_size-th element from position rank. Disjoint across ranks; together all of them."""
    if not 0 <= rank < world_size:
        raise ArgumentError(f"rank {rank} outside a world of {world_size}")
    generator = torch.Generator(device="cpu").manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(num_items, generator=generator)
    return order[rank::world_size].tolist()


class RankWindows:
    """This rank's batches, step after step, epoch after epoch: at global step s the rank takes
    the s-th run of `batch_size` windows of its shard. `position` (the global step) is what a
    resumed run restores; it means the same thing at every world size."""

    def __init__(self, windows: torch.Tensor, *, rank: int, world_size: int, batch_size: int, seed: int,
                 position: int = 0):
        self.windows, self.rank, self.world_size = windows, rank, world_size
        self.batch_size, self.seed, self.position = batch_size, seed, position
        self.steps_per_epoch = (windows.shape[0] // world_size) // batch_size
        if self.steps_per_epoch == 0:
            raise DataError(f"{windows.shape[0]} windows cannot fill one global batch of "
                            f"{world_size} x {batch_size}")

    def next_indices(self) -> list[int]:
        epoch, step = divmod(self.position, self.steps_per_epoch)
        shard = shard_indices(self.windows.shape[0], rank=self.rank, world_size=self.world_size, seed=self.seed,
                              epoch=epoch)
        self.position += 1
        return shard[step * self.batch_size:(step + 1) * self.batch_size]

    def __iter__(self) -> Iterator[LMBatch]:
        return self

    def __next__(self) -> LMBatch:
        return LMBatch.from_sequences(self.windows[self.next_indices()])


# ---- wrapping the model --------------------------------------------------------------------------

class LossModule(nn.Module):
    """`CausalLM.loss` as a module's forward, so DDP's and FSDP's forward hooks run around it."""

    def __init__(self, model: CausalLM):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.model.loss(inputs, targets)


def wrap_ddp(module: LossModule, ctx: Context) -> nn.Module:
    """DistributedDataParallel with torch's own gradient averaging (all-reduce, divide by W)."""
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=device_ids)


def wrap_fsdp(module: LossModule, ctx: Context) -> nn.Module:
    """FSDP2: each decoder layer one shard group, the root (embedding, tied head, final norm)
    another; parameters become DTensors sharded on dim 0. Gradients are reduce-scattered and
    averaged over ranks (FSDP2's default divide factor)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    for layer in module.model.model.layers:
        fully_shard(layer, mesh=mesh)
    return fully_shard(module, mesh=mesh)


def gradient_sync(wrapped: nn.Module, strategy: str, enabled: bool):
    """A context in which backward synchronises gradients across ranks only when `enabled`
    (accumulation: only the final micro-batch of a step synchronises)."""
    if enabled:
        return contextlib.nullcontext()
    if strategy == "ddp":
        return wrapped.no_sync()
    return _fsdp_no_sync(wrapped)


@contextlib.contextmanager
def _fsdp_no_sync(wrapped: nn.Module) -> Iterator[None]:
    wrapped.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        wrapped.set_requires_gradient_sync(True)


def loss_scale(micro_tokens: int, global_tokens: int, world_size: int) -> float:
    """The factor on one micro-batch's mean loss so that, after the ranks' gradients are averaged,
    the gradient is that of the token-mean loss over the whole global batch."""
    return world_size * micro_tokens / global_tokens


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (a view), or the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def grad_norm(gradients: Sequence[torch.Tensor], ctx: Context) -> torch.Tensor:
    """Global L2 norm of all gradients. DDP: every rank holds the full averaged gradients;
    FSDP: each holds a shard, so the squared norms of the shards are summed over ranks."""
    sharded = any(hasattr(g, "to_local") for g in gradients)
    squares = torch.zeros((), dtype=torch.float64, device=ctx.device)
    for gradient in gradients:
        squares += torch.linalg.vector_norm(local_tensor(gradient).double()) ** 2
    if sharded:
        dist.all_reduce(squares)
    return squares.sqrt()


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole value of a (possibly sharded) tensor; collective for DTensors."""
    gather = getattr(tensor, "full_tensor", None)
    return gather() if callable(gather) else tensor


# ---- the trainer ---------------------------------------------------------------------------------

class DistributedTrainer:
    """Trains `model` data-parallel over the ranks of `ctx`, like runtime.Trainer on one device.

    `train_batch(batch)` takes this rank's batch (B sequences), splits it into
    `accumulation_steps` micro-batches and makes one optimizer step; it returns the token-mean
    loss of the whole global batch (every rank returns the same number). `last_grad_norm` is the
    global gradient norm before clipping. The optimizer, its decay policy, clipping and the
    learning-rate schedule are runtime.trainer's own.
    """

    def __init__(self, model: CausalLM, ctx: Context, *, strategy: str = "ddp", accumulation_steps: int = 1,
                 lr: float = 3e-3, weight_decay: float = 0.1, betas: tuple[float, float] = (0.9, 0.95),
                 grad_clip: float = 1.0, seed: int = 0, path: str | None = None, warmup_steps: int = 0,
                 total_steps: int | None = None, min_lr: float | None = None):
        if strategy not in STRATEGIES:
            raise ArgumentError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
        if accumulation_steps < 1:
            raise ArgumentError(f"accumulation_steps must be at least 1, got {accumulation_steps}")
        self.hyperparameters = trainers.hyperparameters(
            lr=lr, weight_decay=weight_decay, betas=betas, grad_clip=grad_clip, seed=seed,
            warmup_steps=warmup_steps, total_steps=total_steps, min_lr=min_lr)
        model.to(ctx.device)
        if path is not None:
            model.set_path(path)
        self.model, self.ctx, self.strategy = model, ctx, strategy
        self.accumulation_steps = accumulation_steps
        self.path = model.path
        torch.manual_seed(seed)
        self.wrapped = (wrap_ddp if strategy == "ddp" else wrap_fsdp)(LossModule(model), ctx)
        self.named_parameters = list(model.named_parameters())   # DTensors after fully_shard
        self.optimizer = trainers.build_optimizer(self.named_parameters, lr=lr, weight_decay=weight_decay,
                                                  betas=tuple(betas), path=self.path, device=ctx.device)
        self.step = 0
        self.last_loss: float | None = None
        self.last_grad_norm: float | None = None
        self.nonfinite_losses = 0

    def current_lr(self) -> float:
        h = self.hyperparameters
        return trainers.learning_rate(self.step, peak=h["lr"], warmup_steps=h["warmup_steps"],
                                      total_steps=h["total_steps"], min_lr=h["min_lr"])

    def micro_batches(self, batch: LMBatch) -> list[LMBatch]:
        count = self.accumulation_steps
        rows = batch.inputs.shape[0]
        if rows % count:
            raise ArgumentError(f"a batch of {rows} sequences does not split into {count} equal micro-batches")
        size = rows // count
        return [LMBatch(batch.inputs[i:i + size], batch.targets[i:i + size]) for i in range(0, rows, size)]

    def _all_reduce_sum(self, value: float) -> float:
        total = torch.tensor([value], dtype=torch.float64, device=self.ctx.device)
        dist.all_reduce(total)
        return float(total)

    def backward_micro_batch(self, micro: LMBatch, *, final: bool, global_tokens: int) -> float:
        """Forward and backward of one micro-batch (synchronising only if `final`); returns its
        token-summed loss on this rank."""
        micro = micro.to(self.ctx.device)
        with gradient_sync(self.wrapped, self.strategy, enabled=final):
            loss = self.wrapped(micro.inputs, micro.targets)
            scale = loss_scale(micro.num_target_tokens, global_tokens, self.ctx.world_size)
            (loss * scale).backward()
        return float(loss.detach()) * micro.num_target_tokens

    def accumulate_gradients(self, batch: LMBatch, on_micro_batch=None) -> float:
        """Zero the gradients, then forward and backward every micro-batch of this rank's `batch`
        (only the last one synchronises); `on_micro_batch(index)` is called after each backward.
        Returns the token-mean loss of the global batch (the same on every rank). Afterwards each
        parameter's .grad is the gradient of that loss (sharded under FSDP)."""
        self.wrapped.train()
        self.optimizer.zero_grad(set_to_none=True)
        micro = self.micro_batches(batch)
        global_tokens = int(self._all_reduce_sum(float(sum(m.num_target_tokens for m in micro))))
        if global_tokens == 0:
            raise DataError("the global batch has no target tokens")
        loss_sum = 0.0
        for index, one in enumerate(micro):
            loss_sum += self.backward_micro_batch(one, final=index == len(micro) - 1, global_tokens=global_tokens)
            if on_micro_batch is not None:
                on_micro_batch(index)
        return self._all_reduce_sum(loss_sum) / global_tokens

    def train_batch(self, batch: LMBatch) -> float:
        lr = self.current_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss_value = self.accumulate_gradients(batch)
        self.last_loss = loss_value
        if not math.isfinite(loss_value):        # every rank sees the same value: all skip together
            self.nonfinite_losses += 1
            self.last_grad_norm = float("nan")
            self.optimizer.zero_grad(set_to_none=True)
            return loss_value
        gradients = [p.grad for _, p in self.named_parameters if p.grad is not None]
        total_norm = grad_norm(gradients, self.ctx)
        self.last_grad_norm = float(total_norm)
        trainers.clip_gradients([local_tensor(g) for g in gradients], self.hyperparameters["grad_clip"],
                                total_norm.float())
        self.optimizer.step()
        self.step += 1
        return loss_value

    def evaluate(self, batches: Sequence[LMBatch]) -> float:
        """Token-weighted mean loss; every rank scores the same batches (FSDP needs all ranks in
        every forward), so every rank returns the same value."""
        was_training = self.wrapped.training
        self.wrapped.eval()
        total, tokens = 0.0, 0
        try:
            with torch.no_grad():
                for batch in batches:
                    batch = batch.to(self.ctx.device)
                    count = batch.num_target_tokens
                    total += float(self.wrapped(batch.inputs, trainers.eval_targets(batch))) * count
                    tokens += count
        finally:
            self.wrapped.train(was_training)
        if tokens == 0:
            raise ArgumentError("evaluate() was given no target tokens")
        return total / tokens

    def full_state(self) -> dict[str, torch.Tensor]:
        """Every parameter's whole value on the CPU by HF name (collective under FSDP)."""
        return {name: full_tensor(p.detach()).to("cpu").clone() for name, p in self.named_parameters}

    def state(self) -> dict[str, Any]:
        return {"step": self.step, "path": self.path, "hyperparameters": self.hyperparameters,
                "last_loss": self.last_loss, "world_size": self.ctx.world_size, "strategy": self.strategy,
                "config": self.model.config.to_hf_dict(), "torch": torch.__version__}

    @classmethod
    def resume(cls, directory: Path | str, ctx: Context, *, strategy: str = "ddp", accumulation_steps: int = 1,
               path: str | None = None) -> "DistributedTrainer":
        """Continue a run saved by `save_sharded`, at this world size (DCP reshards)."""
        directory = Path(directory)
        state = read_trainer_state(directory)
        config = ModelConfig.from_hf_dict(state["config"], source=str(directory / TRAINER_STATE_NAME))
        hyper = state["hyperparameters"]
        model = checkpoint.init_model(config=config, weights="random", seed=hyper["seed"], device="cpu",
                                      path="reference", parity_gate=False)  # overwritten by the load below
        trainer = cls(model, ctx, strategy=strategy, accumulation_steps=accumulation_steps,
                      lr=hyper["lr"], weight_decay=hyper["weight_decay"], betas=tuple(hyper["betas"]),
                      grad_clip=hyper["grad_clip"], seed=hyper["seed"], path=path or state["path"],
                      warmup_steps=hyper["warmup_steps"], total_steps=hyper["total_steps"], min_lr=hyper["min_lr"])
        load_sharded(trainer, directory)
        trainer.step = int(state["step"])
        trainer.last_loss = state.get("last_loss")
        return trainer


# ---- sharded checkpoints -------------------------------------------------------------------------

def _checkpoint_state(trainer: DistributedTrainer) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(trainer.model, trainer.optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


def save_sharded(trainer: DistributedTrainer, directory: Path | str) -> Path:
    """Every rank writes its shards of the model and optimizer state (torch.distributed.checkpoint,
    a collective); rank 0 adds trainer.json (step, schedule, config, world size)."""
    import torch.distributed.checkpoint as dcp

    directory = Path(directory)
    dcp.save(_checkpoint_state(trainer), checkpoint_id=str(directory))
    if trainer.ctx.is_main:
        (directory / TRAINER_STATE_NAME).write_text(json.dumps(trainer.state(), indent=2) + "\n", encoding="utf-8")
    barrier(trainer.ctx)
    return directory


def read_trainer_state(directory: Path) -> dict[str, Any]:
    file = Path(directory) / TRAINER_STATE_NAME
    try:
        state = json.loads(file.read_text(encoding="utf-8"))
        state["config"], state["hyperparameters"], state["step"]  # noqa: B018 - the keys resume needs
    except FileNotFoundError:
        raise CheckpointError(f"{file}: missing; {directory} is not a sharded checkpoint written by save_sharded") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise CheckpointError(f"{file}: unreadable trainer state ({error})") from None
    return state


def load_sharded(trainer: DistributedTrainer, directory: Path | str) -> None:
    """Read model and optimizer state into `trainer`, resharded onto its world size and strategy."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = _checkpoint_state(trainer)
    dcp.load(state, checkpoint_id=str(directory))
    set_state_dict(trainer.model, trainer.optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"])


def consolidate(sharded_dir: Path | str, out: Path | str, *, tokenizer=None,
                runtime_meta: dict[str, Any] | None = None) -> Path:
    """The model of a sharded checkpoint as one Hugging Face directory (transformers opens it).
    Reads the files without any collective, so one process does it (rank 0, or a later job)."""
    import torch.distributed.checkpoint as dcp

    sharded_dir = Path(sharded_dir)
    state = read_trainer_state(sharded_dir)
    config = ModelConfig.from_hf_dict(state["config"], source=str(sharded_dir / TRAINER_STATE_NAME))
    model = CausalLM(config)
    wanted = {name: tensor for name, tensor in model.state_dict().items()}  # views of the parameters
    dcp.load({"model": wanted}, checkpoint_id=str(sharded_dir), no_dist=True)
    model.tokenizer = tokenizer
    meta = {"distributed": {"world_size": state["world_size"], "strategy": state["strategy"], "step": state["step"]}}
    meta.update(runtime_meta or {})
    return checkpoint.save_checkpoint(model, out, tokenizer=tokenizer, runtime_meta=meta)


def save_and_consolidate(trainer: DistributedTrainer, sharded_dir: Path | str, out: Path | str, *, tokenizer=None,
                         runtime_meta: dict[str, Any] | None = None) -> Path:
    """save_sharded, then rank 0 consolidates into `out` while the others wait: when this
    returns on any rank, `out` is complete."""
    save_sharded(trainer, sharded_dir)
    barrier(trainer.ctx)
    if trainer.ctx.is_main:
        consolidate(sharded_dir, out, tokenizer=tokenizer, runtime_meta=runtime_meta)
    barrier(trainer.ctx)
    return Path(out)


# ---- pretraining under torchrun ------------------------------------------------------------------

def pretrain(recipe, out: Path | str, *, device: str | torch.device = "cpu", path: str | None = None,
             strategy: str = "ddp", accumulation_steps: int = 1, progress: bool = True) -> dict[str, Any]:
    """runtime.pretrain's pipeline on every rank of a torchrun job: the same corpus, tokenizer and
    random init on every rank; `recipe.batch_size` is the *global* batch (W ranks take
    batch_size / W windows each, from RankWindows); rank 0 prints the evals. Writes `out/sharded`
    (the DCP checkpoint, resumable on any world size) and consolidates `out` into a Hugging Face
    directory. Returns the results stored in out/runtime.json (tokens_per_second counts the
    tokens of all ranks)."""
    import importlib
    import time

    from . import config as configs, data

    # The module, not runtime.pretrain (the package re-exports the function under that name).
    pretraining = importlib.import_module(".pretrain", __package__)

    started = time.monotonic()
    ctx = init(device)
    path = path or devices.default_path(ctx.device)
    if recipe.steps < 1 or recipe.batch_size % (ctx.world_size * accumulation_steps):
        raise ArgumentError(f"the global batch of {recipe.batch_size} does not split into {ctx.world_size} ranks x "
                            f"{accumulation_steps} micro-batches (and steps must be positive, got {recipe.steps})")
    config = configs.preset(recipe.config)
    prepared = pretraining.prepare_data(recipe, vocab_size=config.vocab_size)
    end_of_text = prepared.tokenizer.token_to_id(data.END_OF_TEXT)
    config = config.replace(bos_token_id=end_of_text, eos_token_id=end_of_text)
    model = checkpoint.init_model(config=config, weights="random", seed=recipe.seed, device="cpu",
                                  path="reference", parity_gate=False)
    model.tokenizer = prepared.tokenizer
    trainer = DistributedTrainer(model, ctx, strategy=strategy, accumulation_steps=accumulation_steps, lr=recipe.lr,
                                 weight_decay=recipe.weight_decay, betas=(recipe.beta1, recipe.beta2),
                                 grad_clip=recipe.grad_clip, seed=recipe.seed, path=path,
                                 warmup_steps=recipe.warmup_steps, total_steps=recipe.steps, min_lr=recipe.min_lr)
    batches = RankWindows(epoch_windows(prepared.train_stream, recipe.seq_len), rank=ctx.rank,
                          world_size=ctx.world_size, batch_size=recipe.batch_size // ctx.world_size, seed=recipe.seed)
    heldout, train_eval = prepared.heldout_batches(recipe), prepared.train_eval_batches(recipe)
    bar = pretraining.Progress(recipe.steps, enabled=progress and ctx.is_main)
    history: list[dict[str, Any]] = []

    def evaluate(step: int) -> None:
        record = {"step": step, "train_loss": trainer.evaluate(train_eval), "val_loss": trainer.evaluate(heldout),
                  "seconds": round(time.monotonic() - started, 2)}
        history.append(record)
        bar.message(f"step {step:>5}/{recipe.steps}  train_loss {record['train_loss']:.4f}  "
                    f"val_loss {record['val_loss']:.4f}  ({record['seconds']:.0f}s, {ctx.world_size} ranks)")

    train_seconds = pretraining.train_steps(trainer, batches, recipe, bar, evaluate)
    results = {
        "train_loss": history[-1]["train_loss"], "val_loss": history[-1]["val_loss"],
        "ln_vocab": math.log(config.vocab_size), "parameters": config.num_parameters(), "steps": recipe.steps,
        "history": history, "world_size": ctx.world_size, "backend": ctx.backend, "strategy": strategy,
        "accumulation_steps": accumulation_steps, "device": str(ctx.device), "path": path,
        "tokens_per_second": round(recipe.steps * recipe.batch_size * recipe.seq_len / max(train_seconds, 1e-9), 1),
        "seconds": round(time.monotonic() - started, 2), "torch": torch.__version__,
    }
    save_and_consolidate(trainer, Path(out) / "sharded", out, tokenizer=prepared.tokenizer,
                         runtime_meta={"recipe": recipe.as_dict(), "results": results})
    return results
