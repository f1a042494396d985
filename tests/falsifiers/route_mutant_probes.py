"""Probes of the planted bugs of mutants/routes.py (contract fast-routes), for test_mutants.py:
each is a cheap direct call whose result changes while its mutant is active, and is the same on
every clean call, on a machine with or without a GPU."""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

import torch
from behaviour_mutant_probes import _outcome

from pvlab.runtime import devices, kernels, step_graph  # step_graph loaded before any mutant: test_mutants compares module attributes
from pvlab.runtime.model import Attention


def probe_mixed_precision_probe_trusts_version():
    # "meta" has no mixed-precision GEMM to try: the clean probe answers False (or raises).
    return _outcome(lambda: kernels._mixed_precision_matmul_available("meta"))


def probe_loss_chunks_compiled_everywhere():
    step = kernels.chunk_loss_sum
    return kernels._chunk_step(step, torch.device("cpu")) is step


def probe_sdpa_probe_ignores_pin():
    # The CPU has no memory-efficient kernel; torch's own choice (math) runs the probe.
    return kernels.sdpa_backend_available("efficient", "cpu")


def probe_efficient_backend_gqa_unshared():
    shared = []
    original = kernels.repeat_kv
    q, k = torch.ones(1, 4, 3, 8), torch.ones(1, 2, 3, 8)   # grouped-query: 4 query heads, 2 KV heads
    with mock.patch.object(kernels, "repeat_kv", lambda x, groups: shared.append(groups) or original(x, groups)):
        _outcome(lambda: Attention._attend_fast(SimpleNamespace(attention_backend="efficient"), q, k, k, None))
    return shared


def probe_cuda_index_unchecked():
    with mock.patch.object(torch.cuda, "is_available", lambda: True), \
            mock.patch.object(torch.cuda, "device_count", lambda: 1):
        return _outcome(lambda: devices.resolve_device("cuda:3"))


def _graphed_losses():
    """Four steps and three evals of a tiny GraphedTrainer on the CPU, its graphs replayed by
    running the recorded steps again (the seam tests/runtime/test_runtime_step_graph.py replaces the same way)."""
    from pvlab import runtime
    from pvlab.runtime.data import LMBatch

    model = runtime.init_model(config=runtime.preset("tiny").replace(num_hidden_layers=1), weights="random",
                               seed=0, path="fast")
    generator = torch.Generator().manual_seed(0)
    with mock.patch.object(step_graph, "capture", lambda step, stream, pool: step), \
            mock.patch.object(step_graph, "graphs_available", lambda device: True):
        trainer = step_graph.GraphedTrainer(model, lr=3e-3, warmup_steps=1, total_steps=4, min_lr=3e-4,
                                            device="cpu", capture_after=1)
        for _ in range(4):
            trainer.train_batch(LMBatch.from_sequences(torch.randint(0, 64, (2, 9), generator=generator)))
        evals = [trainer.eval_batch(LMBatch.from_sequences(torch.randint(0, 64, (2, 9), generator=generator)))
                 for _ in range(3)]
    return trainer.last_loss, [float(p.detach().double().norm()) for p in model.parameters()][:3], evals


def probe_graph_learning_rate_frozen():
    # Inside the captured step the rate must be the device tensor, not a float.
    graphed = SimpleNamespace(_in_graph=True, _learning_rate=torch.tensor(1.0))
    return _outcome(lambda: type(step_graph.GraphedTrainer.current_lr(graphed)).__name__)


def probe_graph_replays_the_captured_batch():
    return _graphed_losses()


def probe_graph_eval_scores_the_captured_batch():
    return _graphed_losses()
