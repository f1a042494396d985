"""pv.schema_errors: a pydantic error becomes a PV2xx diagnostic at the key's or value's line:col."""

from __future__ import annotations

from pv.loader import load_contract
from pv.schema_errors import _dotted
from test_safe_yaml import write


def test_schema_error_positions(tmp_path):
    text = ("metadata:\n  id: x\n  version: one\n  kind: pattern\n  status: DRAFT\n  description: d\n"
            "falsification_tests: []\nextra_key: 1\n")
    loaded, problems = load_contract(write(tmp_path, text), "c.yaml")
    [version] = [p for p in problems if "version" in p.message]
    assert (version.code, version.line, version.col) == ("PV204", 3, 12) and "semantic version" in version.message
    [extra] = [p for p in problems if p.code == "PV201"]
    assert (extra.line, extra.col) == (8, 1)
    [empty] = [p for p in problems if "falsification_tests" in p.message]
    assert empty.line == 7
    assert loaded.contract is None


def test_dotted_names_indices_and_keys():
    assert _dotted(("falsification_tests", 2, "params", "seed")) == "falsification_tests[2].params.seed"
    assert _dotted(("metadata", True)) == "metadata.True"  # a boolean key (`on:`) is a key, not an index
