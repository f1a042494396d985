"""The whole training step as one CUDA graph.

`GraphedTrainer` is a `Trainer` whose `train_batch` replays forward, backward, the gradient
norm, clipping and the fused AdamW update as one captured CUDA graph, for every batch of the
shape it captured; its `eval_batch` replays the eval forward and loss as a graph of its own.

Why: on an H100 the compiled fast path's step at the qwen2-0.5b shape (batch 8 x 1024) took
81.6 ms of wall time for 74.3 ms of kernels (bench/profile_step.py, docs/performance.md): the
GPU waited ~7 ms a step for the host to launch some 1,400 kernels; an eval step 27.2 ms for
22.5 ms of kernels. A replay launches them all at once.

How, and what stays the same:
* The captured code is `Trainer.train_batch` itself, not a copy: the same loss, the same
  clipping, the same on-device skip of a non-finite step. A graph needs two things a plain
  step does not do: the learning rate is a device tensor that the fused AdamW reads at replay
  (a Python float would be frozen into the graph at its capture-time value), and the step's one
  host read (`_read_step`) happens after the replay, not inside the captured code.
* Nothing may be created for the first time inside a capture (torch.compile's graphs, cuBLAS
  workspaces, the optimizer's moments), so the first `capture_after` batches train as plain steps
  on the stream the capture will use. The next batch is copied into static buffers and the
  step captured over them; every later batch of that shape is copied into the same buffers
  and the graph replayed. A batch of another shape or layout trains as a plain step.
* Each parameter's `.grad` holds the (clipped) gradient that was applied, as after a plain step.
* The learning rate the graph reads is float32 (the fused kernel's tensor form); a plain step's
  is the Python float. The two differ in the ninth significant digit, so a replayed step can
  differ from a plain one in the last bit of a weight: equal up to rounding, not bit for bit
  (FALSIFY-CAPTURED-STEP-001 measures it).

Needs CUDA and the fused AdamW (`trainer.skips_on_device`); micro-batches are refused (splitting
a batch reads its lengths on the host, which a graph cannot do).
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch

# The trainer module, not its functions: calls look them up at call time, so a seam replaced there
# (a planted bug in trainer.eval_targets, say) reaches the graphed steps too (docs/runtime.md, "Seams").
from . import trainer
from .data import LMBatch
from .errors import ArgumentError, DeviceError
from .model import CausalLM
from .trainer import Trainer


# ---- seams: the CUDA-only calls, so that the step logic can be exercised without a GPU ---------

def graphs_available(device: torch.device) -> bool:
    """Whether steps on `device` can be captured as CUDA graphs."""
    return device.type == "cuda"


def capture(step: Callable[[], None], stream, pool) -> Callable[[], None]:
    """Record `step`'s kernels on `stream` as a CUDA graph (the Python runs once, nothing
    executes), its memory from `pool` (torch.cuda.graph_pool_handle()); returns the function
    that replays them."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, stream=stream):
        step()
    return graph.replay


def batch_layout(batch: LMBatch) -> tuple:
    """What a captured graph is specific to: each tensor's shape, dtype and device."""
    tensors = (batch.inputs, batch.targets, batch.document_ids)
    return tuple(None if t is None else (tuple(t.shape), t.dtype, t.device) for t in tensors)


class GraphedTrainer(Trainer):
    """Trainer(...) whose training steps replay one captured CUDA graph (module docstring).
    capture_after: plain steps before the capture (at least 1; torch.compile needs 2 or more to
    finish compiling forward and backward, the default is 3). Every other option is Trainer's
    (its warmup_steps is the learning-rate warm-up, as there)."""

    def __init__(self, model: CausalLM, *, capture_after: int = 3, **options):
        if options.get("micro_batch_size") is not None:
            raise ArgumentError("GraphedTrainer replays one whole-batch step; micro_batch_size is not supported "
                                "(use Trainer for gradient accumulation)")
        if int(capture_after) < 1:
            raise ArgumentError(f"capture_after must be at least 1 (nothing may be first created inside a capture), "
                                f"got {capture_after}")
        super().__init__(model, **options)
        if not graphs_available(self.device):
            raise DeviceError(f"GraphedTrainer captures CUDA graphs; the model is on {self.device} "
                              "(use Trainer there)")
        if not trainer.skips_on_device(self.optimizer):
            raise DeviceError(f"GraphedTrainer needs the fused AdamW (it skips a non-finite step on the device); "
                              f"torch has none for {self.device}")
        self.capture_after = int(capture_after)
        self.plain_steps = 0          # steps trained without the graph (warm-up, other layouts)
        self.replayed_steps = 0       # steps trained by replaying it
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        # One memory pool for the training and the eval graph: they never run at once, so the
        # eval capture may reuse what the training capture freed; what either leaves for the host
        # (gradients, the loss) stays allocated, so the other's capture cannot take it. (On an
        # H100 the shared pool did not change the training peak; the 23.4 GiB FALSIFY-PERF-HF-001
        # once recorded was a peer's 5.9 GiB left allocated: docs/performance.md.)
        self._pool = torch.cuda.graph_pool_handle() if self.device.type == "cuda" else None
        self._learning_rate = torch.zeros((), dtype=torch.float32, device=self.device)
        self._train = _Captured()     # the training step's graph
        self._outputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._gradients: list[torch.Tensor | None] = []
        self._in_graph = False
        self.plain_evals = 0          # eval batches run without their graph
        self.replayed_evals = 0
        self._eval = _Captured()      # eval's own graph: forward and loss under no_grad

    # ---- the two places a captured step differs from a plain one ------------------------------
    def current_lr(self) -> float | torch.Tensor:
        if self._in_graph:
            return self._learning_rate   # read by the fused AdamW at replay; filled before each one
        return super().current_lr()

    def _read_step(self, loss_total: torch.Tensor, total_norm: torch.Tensor, step_tokens: torch.Tensor) -> bool:
        if self._in_graph:
            self._outputs = (loss_total, total_norm, step_tokens)   # read after the replay
            return False
        return super()._read_step(loss_total, total_norm, step_tokens)

    # ---- steps ---------------------------------------------------------------------------------
    def _route(self, graph: "_Captured", batch: LMBatch, plain_so_far: int) -> str:
        """What `batch` runs as: "plain" (warm-up, or a layout the graph was not captured for),
        "capture" (the first batch after the warm-up) or "replay"."""
        if graph.replay is None:
            return "plain" if plain_so_far < self.capture_after else "capture"
        return "replay" if batch_layout(batch) == graph.layout else "plain"

    def train_batch(self, batch: LMBatch) -> float:
        batch = batch.to(self.device)
        route = self._route(self._train, batch, self.plain_steps)
        if route == "plain":
            return self._plain_step(batch)
        if route == "capture":
            self._capture(batch)
        return self._replay_step(batch)

    def _plain_step(self, batch: LMBatch) -> float:
        with self._on_capture_stream():
            loss = super().train_batch(batch)
        self.plain_steps += 1
        return loss

    def _graph_body(self) -> None:
        self._in_graph = True
        try:
            super().train_batch(self._train.static)
        finally:
            self._in_graph = False
        # The gradient buffers the graph writes (allocated inside the capture): a plain step
        # between replays points .grad elsewhere, and the replay points it back.
        self._gradients = [p.grad for _, p in self.named_parameters]

    def _capture(self, batch: LMBatch) -> None:
        self._train.hold(batch)
        capturable = [group.get("capturable", False) for group in self.optimizer.param_groups]
        for group in self.optimizer.param_groups:
            group["capturable"] = True   # torch refuses to capture an optimizer step otherwise
        try:
            with self._on_capture_stream():
                self._train.replay = capture(self._graph_body, self._stream, self._pool)
        finally:
            for group, flag in zip(self.optimizer.param_groups, capturable):
                group["capturable"] = flag

    def _replay_step(self, batch: LMBatch) -> float:
        self._train.fill(batch)
        learning_rate = super().current_lr()
        self._learning_rate.fill_(learning_rate)
        self._train.replay()
        for (_, parameter), gradient in zip(self.named_parameters, self._gradients):
            parameter.grad = gradient   # a plain step since the capture may have pointed .grad elsewhere
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        applied = super()._read_step(*self._outputs)
        if applied:
            self.step += 1
        self.replayed_steps += 1
        return self.last_loss

    # ---- evaluation ----------------------------------------------------------------------------
    def eval_batch(self, batch: LMBatch) -> float:
        """Trainer.eval_batch's loss, from a graph of its own (eval mode, no gradients) once
        `capture_after` eval batches have run plain; other layouts run plain."""
        batch = batch.to(self.device)
        graph = self._eval
        route = self._route(graph, batch, self.plain_evals)
        if route == "plain":
            with self._on_capture_stream():
                loss = super().eval_batch(batch)
            self.plain_evals += 1
            return loss
        if route == "capture":
            graph.hold(batch)
            with self._on_capture_stream():
                graph.replay = capture(self._eval_body, self._stream, self._pool)
        graph.fill(batch)
        graph.replay()
        self.replayed_evals += 1
        return float(graph.output)

    def _eval_body(self) -> None:
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                static = self._eval.static
                self._eval.output = trainer._batch_loss(self.model, static, trainer.eval_targets(static))
        finally:
            self.model.train(was_training)

    def _on_capture_stream(self):
        """Warm-up and capture run on one side stream (what torch.cuda.graph asks: lazy
        initialisation happens where the capture will look for it), ordered after and before
        the caller's stream."""
        if self._stream is None:
            return contextlib.nullcontext()
        return _side_stream(self._stream)


@contextlib.contextmanager
def _side_stream(stream):
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        yield
    torch.cuda.current_stream().wait_stream(stream)


class _Captured:
    """One captured graph's static batch (the buffers it reads), its layout and its replay."""

    def __init__(self):
        self.replay: Callable[[], None] | None = None
        self.static: LMBatch | None = None
        self.layout: tuple | None = None
        self.output: torch.Tensor | None = None

    def hold(self, batch: LMBatch) -> None:
        self.static = LMBatch(batch.inputs.clone(), batch.targets.clone(),
                              None if batch.document_ids is None else batch.document_ids.clone())
        self.layout = batch_layout(batch)

    def fill(self, batch: LMBatch) -> None:
        self.static.inputs.copy_(batch.inputs)
        self.static.targets.copy_(batch.targets)
        if self.static.document_ids is not None:
            self.static.document_ids.copy_(batch.document_ids)
