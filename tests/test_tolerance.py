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
    assert tolerance.merged({"source": "x", "float64": {"rtol": 1, "atol": 0}})["float64"] == {"rtol": 1.0, "atol": 0.0}
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
