"""pv.tolerance: torch.testing's per-dtype defaults as plain data, merged with YAML overrides."""

from __future__ import annotations

import sys

import pytest

from pv import tolerance
from pv.schema import Tolerance


def test_defaults_are_torch_testings_table():
    assert tolerance.DEFAULTS == {
        "float16": {"rtol": 1e-3, "atol": 1e-5},
        "bfloat16": {"rtol": 1.6e-2, "atol": 1e-5},
        "float32": {"rtol": 1.3e-6, "atol": 1e-5},
        "float64": {"rtol": 1e-7, "atol": 1e-7},
    }


def test_defaults_match_torch_when_torch_is_already_loaded():
    torch = sys.modules.get("torch")
    if torch is None:
        pytest.skip("torch not imported in this process; importing it here would cost seconds")
    from torch.testing._comparison import default_tolerances

    for name, entry in tolerance.DEFAULTS.items():
        rtol, atol = default_tolerances(getattr(torch, name))
        assert (rtol, atol) == (entry["rtol"], entry["atol"])


def test_override_replaces_single_dtypes_and_drops_source():
    override = Tolerance(source="measured over 100 seeds", bfloat16={"rtol": 0.05, "atol": 0.001})
    table = tolerance.merged(override)
    assert table["bfloat16"] == {"rtol": 0.05, "atol": 0.001}
    assert table["float32"] == tolerance.DEFAULTS["float32"]
    assert "source" not in table
    assert tolerance.merged({"source": "x", "float64": {"rtol": 1e-4, "atol": 0}})["float64"] == {"rtol": 1e-4, "atol": 0.0}
    table["float32"]["rtol"] = 99
    assert tolerance.DEFAULTS["float32"]["rtol"] == 1.3e-6  # merged() never aliases the defaults


@pytest.mark.parametrize("override, message", [
    ({"float8": {"rtol": 0, "atol": 0}}, "unknown dtype 'float8'"),
    ({"float32": {"rtol": 0}}, "exactly rtol and atol"),
    ({"float32": {"rtol": -1, "atol": 0}}, "must be a finite number >= 0"),
    ({"float32": {"rtol": True, "atol": 0}}, "must be a finite number >= 0"),
    # the attacker's disarmed gate: an infinite or NaN tolerance passes every comparison
    ({"float32": {"rtol": float("inf"), "atol": 0}}, "must be a finite number >= 0, got inf"),
    ({"bfloat16": {"rtol": 0, "atol": float("nan")}}, "must be a finite number >= 0, got nan"),
    ([1, 2], "must be a mapping"),
])
def test_bad_overrides_are_rejected(override, message):
    with pytest.raises(tolerance.ToleranceError, match=message):
        tolerance.merged(override)


def test_for_dtype_accepts_names_and_torch_spellings():
    table = tolerance.merged(None)
    assert tolerance.for_dtype(table, "float32") == (1.3e-6, 1e-5)
    assert tolerance.for_dtype(table, "torch.bfloat16") == (1.6e-2, 1e-5)
    with pytest.raises(tolerance.ToleranceError, match="no tolerance for dtype 'int8'"):
        tolerance.for_dtype(table, "torch.int8")


def test_wants_tolerance_needs_a_named_parameter():
    assert tolerance.wants_tolerance(lambda *, device, tolerance: None)
    assert tolerance.wants_tolerance(lambda device, tolerance=None: None)
    assert not tolerance.wants_tolerance(lambda *, device, **kwargs: None)
    assert not tolerance.wants_tolerance(lambda *, device: None)
    assert not tolerance.wants_tolerance(len)  # builtins without a signature


@pytest.mark.parametrize("dtype, name, value", [("float32", "rtol", 1e300), ("float64", "atol", 1.0),
                                                ("bfloat16", "rtol", 0.5), ("float16", "atol", 0.2)])
def test_an_override_over_the_dtype_cap_is_refused_naming_dtype_and_cap(dtype, name, value):
    other = "atol" if name == "rtol" else "rtol"
    with pytest.raises(tolerance.ToleranceError) as info:
        tolerance.merged({"source": "x", dtype: {name: value, other: 0.0}})
    cap = tolerance.CAPS[dtype][name]
    assert f"{dtype} cap of {cap:g}" in str(info.value) and f"{value:g}" in str(info.value)
    assert tolerance.caps_exceeded({dtype: {name: value, other: 0.0}}) == [(dtype, name, value)]


def test_the_caps_are_torch_defaults_times_the_factor_and_take_the_loosest_honest_override():
    for dtype, default in tolerance.DEFAULTS.items():
        cap = tolerance.CAPS[dtype]
        assert cap["atol"] == tolerance.CAP_FACTOR * default["atol"]
        assert cap["rtol"] == min(tolerance.CAP_FACTOR * default["rtol"], tolerance.RTOL_CEILING)
    # at the cap is accepted, just past it is not
    at = {"float32": {"rtol": tolerance.CAPS["float32"]["rtol"], "atol": 0.0}}
    assert tolerance.merged(at)["float32"]["rtol"] == tolerance.CAPS["float32"]["rtol"]
    assert tolerance.caps_exceeded({"float32": {"rtol": 6e-3, "atol": 1e-5}}) == []  # rope-kernel's bound
    assert tolerance.caps_exceeded({"float32": {"rtol": 0.0131, "atol": 0}, "bogus": 1, "source": "s"}) != []


def test_every_dtype_of_an_override_is_checked_against_its_cap_whatever_comes_first():
    override = {"source": "measured", "float16": "not a mapping", "float32": {"rtol": 1e-5, "atol": 1e-5},
                "float64": {"rtol": 1.0, "atol": 1.0}}
    assert tolerance.caps_exceeded(override) == [("float64", "rtol", 1.0), ("float64", "atol", 1.0)]
    assert tolerance.caps_exceeded(None) == [] and tolerance.caps_exceeded({"float64": {"rtol": True}}) == []


def test_a_number_exactly_at_its_cap_is_accepted_and_not_reported():
    at_cap = {dtype: dict(tolerance.CAPS[dtype]) for dtype in tolerance.DTYPES}
    assert tolerance.caps_exceeded(at_cap) == []
    assert tolerance.merged({"source": "at the caps", **at_cap}) == {d: dict(tolerance.CAPS[d]) for d in tolerance.DTYPES}


def test_a_check_without_a_readable_signature_does_not_want_a_tolerance():
    assert tolerance.wants_tolerance(42) is False  # not callable: inspect.signature raises TypeError
