"""pvlab.falsifiers.reported_perplexity: `eval` reports e ** val_loss as the perplexity, in its
JSON and text forms; the planted bits/nats confusion and an exp of the wrong figure are reported."""

from __future__ import annotations

import math

from pvlab.falsifiers import reported_perplexity
from pvlab.falsifiers.mutants import registry


def holds(seen: dict) -> bool:
    """FALSIFY-REPORTED-RESULTS-003's prediction."""
    return (seen["json_rel_error"] <= 1e-9 and seen["text_rel_error"] <= 5e-4 and seen["val_loss"] >= 0.5
            and seen["failed_commands"] == 0)


def test_eval_reports_the_perplexity_of_its_loss():
    seen = reported_perplexity.eval_perplexity_is_exp_of_loss(device="cpu")
    assert holds(seen), seen


def test_two_to_the_loss_is_reported():
    with registry()["perplexity_reported_as_two_to_the_loss"]():
        seen = reported_perplexity.eval_perplexity_is_exp_of_loss(device="cpu")
    assert not holds(seen) and seen["json_rel_error"] > 0.1


def test_a_perplexity_rounded_through_float32_is_within_the_text_bound_only(monkeypatch):
    """A second defect of the class, a perplexity computed from a float32-rounded loss: off by
    ~1e-7, far under the text form's 4 decimals and far over the JSON's exactness."""
    import types

    import torch

    from pvlab.runtime import cli

    shim = types.SimpleNamespace(**{n: getattr(math, n) for n in dir(math) if not n.startswith("_")})
    shim.exp = lambda value: float(torch.tensor(value, dtype=torch.float32).exp())
    monkeypatch.setattr(cli, "math", shim)
    seen = reported_perplexity.eval_perplexity_is_exp_of_loss(device="cpu")
    assert not holds(seen) and 1e-9 < seen["json_rel_error"] < 1e-5
