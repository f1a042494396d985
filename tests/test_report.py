"""pv.report and `pv run --format json / --junitxml / --repeat`: one JSON document with every
outcome, JUnit XML for CI, and the spread of repeated runs."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from pv import report
from pv.outcome import Outcome
from pv_workspace import cli, falsifier, make_workspace


@pytest.fixture
def ws(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path)
    ws.add_contract("demo", [
        falsifier("FALSIFY-DEMO-001"),
        falsifier("FALSIFY-DEMO-002", prediction="val_loss < 1 and vocab_size > 10"),
        falsifier("FALSIFY-DEMO-003", prediction="x > 1", check="basic:boom"),
    ])
    return ws.enter(monkeypatch)


pv = cli("run")


def test_format_json_is_one_document_with_every_outcome(ws):
    result = pv("--contract", "demo", "--device", "cpu", "--format", "json", "--no-ledger")
    assert result.exit_code == 1  # a FAIL and an ERROR
    doc = json.loads(result.stdout)  # stdout holds the document and nothing else
    assert doc["format"] == "pv-run" and doc["ok"] is False
    assert doc["counts"] == {"PASS": 1, "FAIL": 1, "ERROR": 1, "SKIP": 0}
    by_id = {o["falsifier"]: o for o in doc["outcomes"]}
    ok, fail, err = by_id["FALSIFY-DEMO-001"], by_id["FALSIFY-DEMO-002"], by_id["FALSIFY-DEMO-003"]
    assert ok["verdict"] == "PASS" and ok["explanation"] == "" and ok["margin"] > 0
    assert ok["observations"] == {"val_loss": 2.0, "vocab_size": 1024} and ok["contract"] == "demo"
    assert fail["verdict"] == "FAIL" and fail["margin"] == pytest.approx(-1.0)
    assert fail["explanation"] == "`val_loss < 1` is false: 2 < 1"  # the held clause is not blamed
    assert err["verdict"] == "ERROR" and "ZeroDivisionError" in err["explanation"]
    assert "[1/3]" in result.stderr  # progress still shown, on stderr


def test_junitxml_lists_each_outcome(ws, tmp_path):
    path = tmp_path / "out" / "pv.xml"
    result = pv("--contract", "demo", "--device", "cpu", "--junitxml", str(path), "--no-ledger")
    assert result.exit_code == 1
    suite = ET.parse(path).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {"FALSIFY-DEMO-001[cpu]", "FALSIFY-DEMO-002[cpu]", "FALSIFY-DEMO-003[cpu]"}
    assert cases["FALSIFY-DEMO-001[cpu]"].find("failure") is None
    failure = cases["FALSIFY-DEMO-002[cpu]"].find("failure")
    assert failure.get("message") == "`val_loss < 1` is false: 2 < 1" and "FALSIFIED" in failure.text
    assert cases["FALSIFY-DEMO-003[cpu]"].find("error") is not None
    assert cases["FALSIFY-DEMO-001[cpu]"].get("classname") == "demo"


def test_junitxml_on_an_unwritable_path_says_so_and_exits_1(ws, tmp_path):
    (tmp_path / "afile").write_text("x")
    result = pv("FALSIFY-DEMO-001", "--device", "cpu", "--junitxml", str(tmp_path / "afile" / "pv.xml"),
                "--no-ledger")
    assert result.exit_code == 1 and "cannot write it" in result.stderr and "Traceback" not in result.output


def test_repeat_reports_the_spread(ws):
    result = pv("FALSIFY-DEMO-001", "--device", "cpu", "--repeat", "2", "--no-ledger", "--format", "json")
    assert result.exit_code == 0, result.output
    [cell] = json.loads(result.stdout)["spread"]
    assert cell["verdicts"] == {"PASS": 2}
    assert cell["observations"]["val_loss"] == {"n": 2, "min": 2.0, "max": 2.0, "mean": 2.0, "range": 0.0}
    assert cell["margin"]["n"] == 2
    text = pv("FALSIFY-DEMO-001", "--device", "cpu", "--repeat", "2", "--no-ledger")
    assert "spread over the repetitions" in text.output and "val_loss: 2 .. 2, mean 2" in text.output


def test_spreads_take_min_max_mean_per_cell():
    outcomes = [Outcome("F-1", "cpu", "x < 1", "PASS", {"x": x, "ok": True}, margin=1 - x) for x in (0.1, 0.5, 0.3)]
    outcomes.append(Outcome("F-1", "cpu", "x < 1", "FAIL", {"x": 2.0}, margin=-1.0))
    [cell] = report.spreads(outcomes)
    assert cell.verdicts == {"PASS": 3, "FAIL": 1}
    stats = cell.observations["x"].as_dict()
    assert (stats["min"], stats["max"]) == (0.1, 2.0) and stats["mean"] == pytest.approx(0.725)
    assert "ok" not in cell.observations  # booleans have no spread
    assert cell.margin.as_dict()["min"] == -1.0
