"""pv.dialect through `pv validate --dialect provable-contracts`: contracts written elsewhere, read
leniently (the shared corpus of public contracts included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pv_validate_ws import codes, line_of, parse_output


# --- the provable-contracts dialect ----------------------------------------------------------------

FOREIGN = """\
metadata:
  version: "1.0.0"
  description: "A kernel written for another toolchain"
  author: "someone"
equations:
  norm:
    formula: "y = x / √(Σ x² / n + ε)"
proof_obligations:
  - type: bound
    property: "output is finite"
    applies_to: all
falsification_tests:
  - id: FALSIFY-NORM-001
    rule: "finite"
    prediction: "norm(x) is finite for all finite x"
    test: "property test"
    if_fails: "division by zero"
  - id: FALSIFY-NORM-002
    rule: "bounded"
    prediction: "max_abs < 10"
    test: "direct"
    if_fails: "overflow"
kani_harnesses:
  - id: KANI-1
qa_gate:
  id: GATE-1
"""


def test_dialect_reads_foreign_contracts_leniently(vworkspace):
    vworkspace.write("corpus/norm-v1.yaml", FOREIGN)
    vworkspace.write("corpus/sub/broken-v1.yaml", "metadata: [\n")
    strict = vworkspace.run("corpus")
    assert strict.exit_code == 1 and "PV201" in codes(strict)
    result = vworkspace.run("--dialect", "provable-contracts", "corpus")
    assert result.exit_code == 1  # the broken file does not load: an error even in this dialect
    found = parse_output(result.output)
    assert {d.code for d in found if not d.warning} == {"PV101"}
    assert "PV201" not in codes(result)  # unknown sections and keys are read past
    [pred] = [d for d in found if d.code == "PV401"]
    assert pred.warning and pred.line == line_of(FOREIGN, "is finite for all")
    assert "YAML loads (mapping):            1 of 2" in result.output
    assert "predictions parse in pv:         1 of 2" in result.output
    assert "kani_harnesses (1)" in result.output and "metadata.author (1)" in result.output
    assert "prose" in result.output


def test_dialect_json_report(vworkspace):
    vworkspace.write("corpus/norm-v1.yaml", FOREIGN)
    result = vworkspace.run("--dialect", "provable-contracts", "--format", "json", "corpus")
    assert result.exit_code == 0
    report = json.loads(result.output)
    d = report["dialect"]
    assert (d["files"], d["loaded"], d["falsifiers"], d["predictions_parse"], d["formulas_parse"]) == (1, 1, 2, 1, 0)
    assert d["sections_ignored"] == {"kani_harnesses": 1, "qa_gate": 1}
    assert d["ids_missing"] == {"metadata.id": 1, "proof_obligations[].id": 1}


CORPUS = Path("/work/shared/corpus")


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the measurement corpus is not on this machine")
def test_dialect_on_the_shared_corpus(vworkspace):
    result = vworkspace.run("--dialect", "provable-contracts", "-q", str(CORPUS))
    assert result.exit_code == 0, result.output
    assert "YAML loads (mapping):            114 of 114" in result.output
