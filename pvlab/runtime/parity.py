"""Placing a model on its device and path, behind a parity gate.

Before a model runs anywhere but the fp32 CPU reference, the gate feeds a fixed probe input
through both — the reference on the CPU, then the requested device and path — and refuses the
model if the logits point elsewhere (cosine below PARITY_MIN_COSINE at any position). This is
the check that would have stopped the seed bug where GPU decode printed gibberish while the CPU
answered correctly: nothing compared the two.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from .errors import ParityGateError
from .model import CausalLM

PARITY_MIN_COSINE = 0.99
PROBE_LENGTH = 32


@dataclass(frozen=True)
class ParityReport:
    device: str
    path: str
    probe_tokens: int
    min_cosine: float
    max_abs_diff: float
    argmax_agreement: float  # fraction of probe positions whose top token agrees

    def as_dict(self) -> dict:
        return asdict(self)


def probe_ids(vocab_size: int, max_positions: int, length: int = PROBE_LENGTH) -> torch.Tensor:
    """A fixed pseudo-random token sequence (1, T), the same on every machine."""
    generator = torch.Generator(device="cpu").manual_seed(20261122)
    return torch.randint(0, vocab_size, (1, min(length, max_positions)), generator=generator)


def compare_logits(reference: torch.Tensor, candidate: torch.Tensor, *, device: str, path: str) -> ParityReport:
    """Per-position cosine similarity and agreement of two (B, T, V) logit tensors."""
    reference, candidate = reference.float().flatten(0, -2), candidate.float().flatten(0, -2)  # (B*T, V)
    cosine = torch.nn.functional.cosine_similarity(reference, candidate, dim=-1)               # (B*T,)
    agreement = (reference.argmax(-1) == candidate.argmax(-1)).float().mean()
    return ParityReport(device=device, path=path, probe_tokens=reference.shape[0],
                        min_cosine=float(cosine.min()), max_abs_diff=float((reference - candidate).abs().max()),
                        argmax_agreement=float(agreement))


def place(model: CausalLM, device: torch.device, path: str, *, gate: bool | None = None,
          min_cosine: float = PARITY_MIN_COSINE) -> CausalLM:
    """Move a CPU model to `device`, select `path`, and (gate) refuse it if it diverges from the
    CPU reference. Returns the model in eval mode with `parity_report` set (None if ungated)."""
    model.set_path(path)  # validates the name before any work
    if gate is None:
        gate = device.type != "cpu" or path != "reference"
    model.eval()
    probe = reference_logits = None
    if gate:
        probe = probe_ids(model.config.vocab_size, model.config.max_position_embeddings)
        model.set_path("reference")
        with torch.no_grad():
            reference_logits = model(probe)                  # fp32, CPU: the reference
    model.to(device)
    model.set_path(path)
    model.parity_report = None
    if gate:
        with torch.no_grad():
            candidate = model(probe.to(device)).cpu()
        report = compare_logits(reference_logits, candidate, device=str(device), path=path)
        model.parity_report = report
        if report.min_cosine < min_cosine:
            raise ParityGateError(
                f"parity gate: the model on {device} ({path} path) disagrees with the CPU reference: "
                f"min logits cosine {report.min_cosine:.4f} < {min_cosine} over {report.probe_tokens} probe "
                f"positions (top-token agreement {report.argmax_agreement:.0%}); refusing to run it")
    return model
