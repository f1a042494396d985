"""Planted bugs for the contract fast-routes (issue #26's GPU survivors): each makes the fast path
take a route other than the one torch offers on the device — a silent fallback, a compile where
the path is documented eager, a backend refused or misjudged, a device index never checked —
while every number it computes where it runs at all stays right (docs/mutants.md)."""

from __future__ import annotations

from pv.mutation import mutant

from .planting import plant, swap


@mutant("mixed_precision_probe_trusts_version")
def mixed_precision_probe_trusts_version():
    """The fused loss's mixed-precision probe answers from torch's version instead of trying the
    kernel: every device of a recent torch is said to multiply bf16 into fp32 in one GEMM, so
    the loss calls torch.mm(out_dtype=) where the build has no such kernel (the CPU) and crashes.

    Imitates a capability test by version number. Seam: runtime.kernels._mixed_precision_matmul_available."""
    import torch

    from pvlab.runtime import kernels

    def _mixed_precision_matmul_available(device_type: str) -> bool:
        return tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 8)

    with plant("mixed_precision_probe_trusts_version",
               swap(kernels, "_mixed_precision_matmul_available", _mixed_precision_matmul_available)):
        yield


@mutant("loss_chunks_compiled_everywhere")
def loss_chunks_compiled_everywhere():
    """The fused loss compiles its per-chunk steps on every device, the CPU included, where the
    path is documented eager: every CPU process pays inductor's C++ compilation (tens of
    seconds) for a loss that is the same either way.

    Imitates a device test dropped from a speed switch. Seam: runtime.kernels._chunk_step."""
    from pvlab.runtime import kernels

    def _chunk_step(function, device):
        return kernels._compiled(function) if kernels.COMPILE_LOSS_CHUNKS else function

    with plant("loss_chunks_compiled_everywhere", swap(kernels, "_chunk_step", _chunk_step)):
        yield


@mutant("sdpa_probe_ignores_pin")
def sdpa_probe_ignores_pin():
    """sdpa_backend_available runs its probe attention without pinning the backend it is asked
    about: torch picks any kernel it has, so every backend is "available" — set_attention_backend
    accepts 'efficient' on a CPU, and the attention-backends checks test another kernel than
    the one they name.

    Imitates a context manager left out of a probe. Seam: runtime.kernels.sdpa_backend_available."""
    import torch
    import torch.nn.functional as F

    from pvlab.runtime import kernels

    def sdpa_backend_available(name, device, dtype=torch.bfloat16):
        q = torch.zeros(1, 2, 4, 64, device=device, dtype=dtype, requires_grad=True)
        try:
            with torch.enable_grad():
                F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
        except RuntimeError:
            return False
        return True

    with plant("sdpa_probe_ignores_pin", swap(kernels, "sdpa_backend_available", sdpa_backend_available)):
        yield


@mutant("efficient_backend_gqa_unshared")
def efficient_backend_gqa_unshared():
    """With the memory-efficient SDPA kernel pinned, a grouped-query model's K/V heads are passed
    as they are instead of shared with their query heads; that kernel takes no grouped K/V, so
    every forward of a GQA model under it fails (a DeviceError blaming the backend).

    Imitates a special case dropped in a refactor. Seam: runtime.model.Attention._attend_fast."""
    from pvlab.runtime import kernels
    from pvlab.runtime.errors import DeviceError
    from pvlab.runtime.model import Attention

    def _attend_fast(self, q, k, v, mask):
        backend = self.attention_backend
        try:
            with kernels.sdpa_backend(backend):
                return kernels.attention_fast(q, k, v) if mask is None else kernels.attention_fast(q, k, v, mask)
        except RuntimeError as error:
            if backend is None:
                raise
            raise DeviceError(f"attention backend {backend!r} cannot run this attention on {q.device.type}: "
                              f"{error}") from None

    with plant("efficient_backend_gqa_unshared", swap(Attention, "_attend_fast", _attend_fast)):
        yield


@mutant("cuda_index_unchecked")
def cuda_index_unchecked():
    """resolve_device accepts "cuda:N" for any N: a device index past the last GPU is handed on,
    and the run fails later, inside torch, far from the option that named it.

    Imitates a bounds check dropped. Seam: runtime.devices.resolve_device."""
    import torch

    from pvlab.runtime import devices
    from pvlab.runtime.errors import DeviceError

    original = devices.resolve_device

    def resolve_device(requested=None, *, allow_gpu=True, argument="device"):
        text = "" if requested is None else str(requested).strip().lower()
        if allow_gpu and text.startswith("cuda:") and torch.cuda.is_available():
            try:
                return torch.device(text)
            except RuntimeError:
                raise DeviceError(f"{argument} {requested!r} is not a valid device name") from None
        return original(requested, allow_gpu=allow_gpu, argument=argument)

    with plant("cuda_index_unchecked", swap(devices, "resolve_device", resolve_device)):
        yield


# ---- the training step replayed as one CUDA graph (FALSIFY-CAPTURED-STEP-001/-002) ----------

@mutant("graph_learning_rate_frozen")
def graph_learning_rate_frozen():
    """GraphedTrainer hands the optimizer the learning rate as a Python float inside the captured
    step too: the fused AdamW kernel takes it as an argument, so the graph replays every later
    step at the rate of the step it captured, and the schedule stops at the capture.

    Imitates a host value frozen into a CUDA graph. Seam: runtime.step_graph.GraphedTrainer.current_lr."""
    from pvlab.runtime import step_graph
    from pvlab.runtime.trainer import Trainer

    def current_lr(self):
        return Trainer.current_lr(self)

    with plant("graph_learning_rate_frozen", swap(step_graph.GraphedTrainer, "current_lr", current_lr)):
        yield


@mutant("graph_replays_the_captured_batch")
def graph_replays_the_captured_batch():
    """GraphedTrainer replays its graph without copying the new batch into the buffers the graph
    reads: every replayed step trains on the batch it was captured with (the loss it reports
    falls all the faster).

    Imitates a static input never refreshed. Seam: runtime.step_graph.GraphedTrainer._replay_step."""
    from pvlab.runtime import step_graph

    original = step_graph.GraphedTrainer._replay_step

    def _replay_step(self, batch):
        return original(self, self._train.static)

    with plant("graph_replays_the_captured_batch", swap(step_graph.GraphedTrainer, "_replay_step", _replay_step)):
        yield


@mutant("graph_eval_scores_the_captured_batch")
def graph_eval_scores_the_captured_batch():
    """GraphedTrainer replays its eval graph without copying the new batch into the buffers the
    graph reads: every replayed eval scores the batch it was captured with, and a held-out set
    of many batches reports the loss of one.

    Imitates a static input never refreshed. Seam: runtime.step_graph._Captured.fill."""
    from pvlab.runtime import step_graph

    original = step_graph._Captured.fill

    def fill(self, batch):
        if self.output is None:          # the training graph (its outputs are the trainer's)
            return original(self, batch)
        return None                      # an eval graph: its buffers keep the captured batch

    with plant("graph_eval_scores_the_captured_batch", swap(step_graph._Captured, "fill", fill)):
        yield


# ---- tenth blind batch (docs/independent-mutants.md, "Tenth batch") ------------------------------


@mutant("fused_projection_biases_reversed")
def fused_projection_biases_reversed():
    """With fused projections on, the stacked bias is built in the reverse order of the stacked
    weights ([b_v; b_k; b_q] under [W_q; W_k; W_v]): the lengths still add up, so Q, K and V get
    slices of the wrong biases. Models without projection biases are untouched.

    Imitates a fused QKV bias assembled in a different order than its weight. Seam:
    runtime.kernels.fused_linear_fast."""
    import torch

    from pvlab.runtime import kernels

    def fused_linear_fast(x, weights, biases):
        weight = torch.cat(weights)
        pairs = list(zip(weights, biases))[::-1]                                      # the defect
        bias = None if all(b is None for b in biases) else torch.cat(
            [b if b is not None else w.new_zeros(w.shape[0]) for w, b in pairs])
        return kernels.linear_fast(x, weight, bias).split([w.shape[0] for w in weights], dim=-1)

    with plant("fused_projection_biases_reversed", swap(kernels, "fused_linear_fast", fused_linear_fast)):
        yield
