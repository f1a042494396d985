"""`pv measure` (pv.measure): a falsifier's check swept over seeds finds the bound that held
at seed 0 only by luck; a check that raises is reported and nothing is written."""

from __future__ import annotations

import json

import pytest

from pv import measure
from pv_workspace import cli, falsifier, make_workspace

LUCKY = '''\
import random

from pv.testing import sweep_seed


def lucky(*, device, seed=0):
    """observations: error (|a standard normal draw|: 0.94 at seed 0, 2.34 at seed 2)"""
    return {"error": abs(random.Random(seed).gauss(0.0, 1.0)), "finite": True}


def lucky_without_seed(*, device):
    return {"error": abs(random.Random(sweep_seed()).gauss(0.0, 1.0))}


def deaf(*, device):
    return {"error": 0.5}


def raises_at_three(*, device, seed=0):
    if seed == 3:
        raise RuntimeError("diverged at step 7")
    return {"error": 0.1}
'''


@pytest.fixture
def ws(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path)
    (ws.root / ws.package / "lucky.py").write_text(LUCKY)
    ws.add_contract("lucky", [
        falsifier("FALSIFY-LUCKY-001", prediction="error < 1.0 and finite", check="lucky:lucky", params={"seed": 0}),
        falsifier("FALSIFY-LUCKY-002", prediction="error < 1.0", check="lucky:lucky_without_seed"),
        falsifier("FALSIFY-LUCKY-003", prediction="error < 1.0", check="lucky:deaf"),
        falsifier("FALSIFY-LUCKY-004", prediction="error < 1.0", check="lucky:raises_at_three"),
    ])
    return ws.enter(monkeypatch)


pv = cli("measure")
run = cli("run")


def test_measure_finds_the_seed_lucky_bound(ws, tmp_path):
    # the committed falsifier passes: at seed 0 the bound holds
    assert run("FALSIFY-LUCKY-001", "--device", "cpu", "--no-ledger").exit_code == 0
    out = tmp_path / "sweep.json"
    result = pv("FALSIFY-LUCKY-001", "--seeds", "11", "--out", str(out))
    assert result.exit_code == 1, result.output  # false at some seed: seed-lucky
    assert "SEED-LUCKY: the prediction is false at seed(s) 1, 2, 5 of 11" in result.output
    assert "worst seed: 2 (FAIL, margin -1.33817): `error < 1.0` is false: 2.33817 < 1" in result.output
    assert "bound `error < 1.0`: worst error = 2.33817 (seed 2), BREAKS; suggested: error < 4.68" in result.output
    assert "seed through the check's `seed` parameter" in result.output
    sweep = json.loads(out.read_text())
    assert sweep["failing_seeds"] == [1, 2, 5] and sweep["worst"]["seed"] == 2
    assert sweep["observations"]["error"]["min"] == pytest.approx(0.0408559, rel=1e-5)
    assert sweep["observations"]["error"]["max"] == pytest.approx(2.338167, rel=1e-5)
    assert sweep["bounds"][0]["suggested"] == pytest.approx(2 * 2.338167, rel=1e-5)
    assert not ws.ledger.exists()  # a sweep records nothing


def test_a_bound_that_holds_at_every_seed_exits_zero(ws):
    result = pv("FALSIFY-LUCKY-001", "--seeds", "2", "--first-seed", "3")  # 0.095, 0.041
    assert result.exit_code == 0, result.output
    assert "the prediction holds at all 2 seeds" in result.output and "worst seed: 3" in result.output


def test_a_check_without_a_seed_parameter_reads_sweep_seed(ws):
    result = pv("FALSIFY-LUCKY-002", "--seeds", "3")
    assert "seed through pv.testing.sweep_seed()" in result.output
    assert "false at seed(s) 1, 2 of 3" in result.output and "does not reach" not in result.output


def test_a_check_the_seed_cannot_reach_is_called_out(ws):
    result = pv("FALSIFY-LUCKY-003", "--seeds", "3")
    assert result.exit_code == 0 and "the seed does not reach this check" in result.output


def test_a_check_that_raises_is_a_clear_error_and_nothing_is_written(ws, tmp_path):
    out = tmp_path / "sweep.json"
    result = pv("FALSIFY-LUCKY-004", "--seeds", "5", "--out", str(out))
    assert result.exit_code == 1
    assert "cannot measure FALSIFY-LUCKY-004: seed 3:" in result.stderr
    assert "check raised RuntimeError: diverged at step 7" in result.stderr
    assert "Traceback" not in result.output and not out.exists()


def test_usage_errors(ws):
    result = pv("FALSIFY-LUCKY-01")
    assert result.exit_code == 2 and "did you mean FALSIFY-LUCKY-001" in result.output
    assert pv("FALSIFY-LUCKY-001", "--device", "cuda").exit_code == 2


def test_suggestions_for_lower_bounds():
    sweep = measure.Sweep("F", "cpu", None, "accuracy > 0.5", "x", headroom=2.0)
    sweep.results = [measure.SeedResult(s, "PASS", {"accuracy": a}, a - 0.5) for s, a in ((0, 0.9), (1, 0.8))]
    [s] = sweep.suggestions()
    assert (s.direction, s.worst, s.worst_seed, s.suggested, s.holds) == ("lower", 0.8, 1, 0.4, True)
