"""pvpack.checks._controls: the tolerance a check judges by, and torch's generators held fixed."""

import torch

from pvpack.checks._controls import seeded, tolerance_of

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
