"""pvpack.checks._controls: the dtype and tolerance a check judges by, torch's generators held
fixed, and the one seeded step whose loss and gradients checks read."""

import pytest
import torch

from pvpack.checks._controls import path_dtype, seeded, stepped, tolerance_of
from pvpack.protocol import Batch

FALLBACK = {"float32": (1e-5, 1e-7), "bfloat16": (3e-2, 1e-5)}


def test_the_falsifiers_tolerance_wins_for_its_dtype():
    tolerance = {"float32": {"rtol": "2e-4", "atol": 3e-6}}
    assert tolerance_of(tolerance, "float32", FALLBACK) == (2e-4, 3e-6)


def test_the_checks_own_tolerance_where_the_falsifier_names_none_for_the_dtype():
    assert tolerance_of({"float32": {"rtol": 1.0, "atol": 1.0}}, "bfloat16", FALLBACK) == (3e-2, 1e-5)
    assert tolerance_of(None, "float32", FALLBACK) == (1e-5, 1e-7)
    assert tolerance_of({}, "float32", FALLBACK) == (1e-5, 1e-7)


def test_seeded_draws_what_a_fresh_seed_draws_and_leaves_the_outer_stream_alone():
    torch.manual_seed(1234)
    expected_outer = torch.rand(4)
    torch.manual_seed(7)
    expected_inner = torch.rand(4)

    torch.manual_seed(1234)
    with seeded(7):
        inner = torch.rand(4)
    outer = torch.rand(4)
    assert torch.equal(inner, expected_inner)
    assert torch.equal(outer, expected_outer)   # the draw inside moved nothing outside


def test_seeded_restores_the_state_when_the_body_raises():
    torch.manual_seed(99)
    before = torch.random.get_rng_state()
    try:
        with seeded(3):
            torch.rand(10)
            raise RuntimeError("step failed")
    except RuntimeError:
        pass
    assert torch.equal(torch.random.get_rng_state(), before)


def test_the_reference_path_is_judged_in_float32_every_other_path_in_bfloat16():
    assert path_dtype("reference") == "float32"
    assert path_dtype("fast") == "bfloat16"
    assert path_dtype("compiled") == "bfloat16"


class _Model:
    """A model whose step draws one random number into its loss and its gradient."""

    def __init__(self, fail: bool = False):
        self.fail, self.closed, self.grad = fail, False, None

    def train_step(self, batch):
        if self.fail:
            raise RuntimeError("step failed")
        drawn = torch.rand(()).item()
        self.grad = torch.full((2,), drawn, dtype=torch.bfloat16)
        return drawn

    def gradients(self):
        return {"w": self.grad}

    def close(self):
        self.closed = True


def test_stepped_reads_the_seeded_steps_loss_and_gradients_in_float64_then_closes_the_model():
    batch = Batch(torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long))
    model = _Model()
    loss, gradients = stepped(model, batch, rng_seed=5)
    with seeded(5):
        expected = torch.rand(()).item()
    assert loss == expected and model.closed
    assert gradients["w"].dtype == torch.float64 and gradients["w"].device.type == "cpu"
    assert torch.equal(gradients["w"], torch.full((2,), expected, dtype=torch.bfloat16).to(torch.float64))
    assert stepped(_Model(), batch, rng_seed=6)[0] != loss        # another seed, another draw


def test_stepped_closes_the_model_when_its_step_raises():
    model = _Model(fail=True)
    with pytest.raises(RuntimeError, match="step failed"):
        stepped(model, Batch(torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long)), rng_seed=0)
    assert model.closed
