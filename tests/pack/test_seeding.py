"""pvpack.checks.seeding: one seed, one initialisation and one step, on pvlab's runtime and on
transformers (tiny-trained, CPU); defects of the class reported on transformers' own code."""

from __future__ import annotations

import pytest
import torch

from pvpack.checks import seeding

CALL = dict(device="cpu", subject="tiny-trained", path="reference", seed=0, lr=1e-3, step_rtol=1e-3)


def holds(seen: dict) -> bool:
    """FALSIFY-SEEDED-INIT-001's prediction."""
    return (seen["same_seed_max_abs_diff"] == 0 and seen["same_seed_step_max_abs_diff"] <= seen["step_tol"]
            and seen["drawn_tensors"] >= 1 and seen["matrices_constant"] == 0 and seen["shape_mismatches"] == 0
            and seen["tensors"] >= 1)


@pytest.mark.parametrize("runtime", ["pvlab", "transformers"])
def test_a_seeded_runtime_passes(runtime):
    seen = seeding.random_init_is_seeded(runtime=runtime, **CALL)
    assert holds(seen) and seen["constant_tensors"] > 0, seen     # norms start at one whatever the seed


def test_an_unseeded_initialisation_is_reported(monkeypatch):
    """The transformers adapter's random init seeded from the clock, not from its seed."""
    import time

    from pvpack.adapters import transformers as adapter

    original = adapter.TransformersAdapter.load

    def load(self, checkpoint, **kwargs):
        if kwargs.get("seed") is not None:
            kwargs["seed"] = time.perf_counter_ns() % 2**31
        return original(self, checkpoint, **kwargs)

    monkeypatch.setattr(adapter.TransformersAdapter, "load", load)
    seen = seeding.random_init_is_seeded(runtime="transformers", **CALL)
    assert not holds(seen) and seen["same_seed_max_abs_diff"] > 0


def test_dropout_from_torchs_generators_is_drawn_alike_and_passes(monkeypatch):
    """Dropout in the step, drawn from torch's generator: two runs seeded alike draw alike (as two
    processes seeded alike do), so it is no defect of seeding."""
    from pvpack.adapters import transformers as adapter

    original = adapter.TransformersModel._forward

    def forward(self, inputs):
        out = original(self, inputs)
        return torch.nn.functional.dropout(out, 0.1, training=self.model.training)

    monkeypatch.setattr(adapter.TransformersModel, "_forward", forward)
    assert holds(seeding.random_init_is_seeded(runtime="transformers", **CALL))


def test_randomness_from_outside_torchs_generators_is_reported(monkeypatch):
    """Dropout from a generator of the step's own, seeded from the operating system: two runs
    seeded alike part after one step."""
    import os

    from pvpack.adapters import transformers as adapter

    original = adapter.TransformersModel._forward

    def forward(self, inputs):
        out = original(self, inputs)
        if not self.model.training:
            return out
        own = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
        keep = (torch.rand(out.shape, generator=own) > 0.1).to(out.dtype)
        return out * keep / 0.9

    monkeypatch.setattr(adapter.TransformersModel, "_forward", forward)
    seen = seeding.random_init_is_seeded(runtime="transformers", **CALL)
    assert not holds(seen) and seen["same_seed_step_max_abs_diff"] > seen["step_tol"]


def test_a_matrix_every_seed_starts_alike_is_reported(monkeypatch):
    """A projection zeroed at init (layer 0's MLP down projection): the same under every seed."""
    from pvpack.adapters import transformers as adapter

    original = adapter.TransformersAdapter.load

    def load(self, checkpoint, **kwargs):
        model = original(self, checkpoint, **kwargs)
        if kwargs.get("init") == "random":
            with torch.no_grad():
                model.model.model.layers[0].mlp.down_proj.weight.zero_()
        return model

    monkeypatch.setattr(adapter.TransformersAdapter, "load", load)
    seen = seeding.random_init_is_seeded(runtime="transformers", **CALL)
    assert not holds(seen) and seen["matrices_constant"] == 1
