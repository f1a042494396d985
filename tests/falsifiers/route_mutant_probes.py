"""Probes of the planted bugs of mutants/routes.py (contract fast-routes), for test_mutants.py:
each is a cheap direct call whose result changes while its mutant is active, and is the same on
every clean call, on a machine with or without a GPU."""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

import torch
from behaviour_mutant_probes import _outcome

from pvlab.runtime import devices, kernels
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
