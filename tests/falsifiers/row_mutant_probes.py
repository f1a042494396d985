"""Probes of the independent-rows bugs (contract independent-rows): rms_norm_statistic_over_rows
in mutants/kernels.py and fast_attention_joins_rows_into_one_sequence in mutants/model.py. Each
probe returns what the runtime computes for a batch of several rows; the planted bug changes the
rows after the first (a batch of one would show nothing)."""

from __future__ import annotations

import torch
from oracle_mutant_probes import tiny_model

from pvlab.runtime import kernels
from pvlab.runtime.config import preset


def _rows(batch: int = 3, length: int = 12) -> torch.Tensor:
    return torch.randint(0, preset("tiny").vocab_size, (batch, length), generator=torch.Generator().manual_seed(11))


def probe_rms_norm_statistic_over_rows():
    x = torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(5)) * torch.tensor([0.5, 1.0, 4.0])[:, None, None]
    return kernels.rms_norm(x, torch.linspace(0.5, 2.0, 32), 1e-6)


def probe_fast_attention_joins_rows_into_one_sequence():
    with torch.no_grad():
        return tiny_model(path="fast")(_rows())
