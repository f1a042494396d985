"""pv bisect on CPU: two backends op by op; a planted divergence is named exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from pv.commands.bisect import Backend, compare, least_precise  # noqa: E402
from pv.cli import main  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


def bisect(*args: str):
    result = CliRunner().invoke(main, ["bisect", "tiny-random", *args, "--format", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout)


def test_backend_spec_parsing():
    assert Backend.parse("cuda:fast") == Backend("cuda", "fast", None)
    assert Backend.parse("cpu:reference:float64") == Backend("cpu", "reference", "float64")
    for bad in ("cpu", "cpu::", "cpu:reference:int7"):
        with pytest.raises(Exception):
            Backend.parse(bad)


def test_tolerance_follows_the_less_precise_dtype():
    assert least_precise("float32", "bfloat16") == "bfloat16"
    assert least_precise("float64", "float32") == "float32"


def test_compare_flags_a_difference_beyond_the_bound():
    import torch

    a = torch.ones(4, 4, dtype=torch.float64)
    assert compare("x", a, a.clone(), rtol=1e-6, atol=0).within
    b = a.clone()
    b[0, 0] += 1e-3
    row = compare("x", a, b, rtol=1e-6, atol=0)
    assert not row.within and row.max_abs_diff == pytest.approx(1e-3)


@pytest.mark.parametrize("mutant, expected_op", [
    ("final_norm_skipped", "final_norm"),
    ("rope_wrong_theta", "layer0.attention"),  # RoPE acts after the q/k projections, inside attention
])
def test_a_planted_divergence_is_named_exactly(in_repo, mutant, expected_op):
    code, report = bisect("--a", "cpu:reference", "--b", "cpu:reference", "--mutant", mutant)
    assert code == 1
    assert report["first_divergence"] == expected_op
    ops = [row["op"] for row in report["ops"]]
    before = ops[: ops.index(expected_op)]
    assert before, "the planted op must not be the first op"
    assert all(row["within"] and row["max_abs_diff"] == 0 for row in report["ops"][: len(before)])


def test_identical_backends_agree_everywhere(in_repo):
    code, report = bisect("--a", "cpu:reference", "--b", "cpu:reference")
    assert code == 0 and report["first_divergence"] is None
    assert report["ops"][0]["op"] == "embedding" and report["ops"][-1]["op"] == "logits"
    assert {"layer0.q", "layer0.k", "layer0.v", "layer0.attention", "layer0.o", "layer0.mlp"} <= {
        r["op"] for r in report["ops"]}


def test_float64_and_float32_reference_agree_within_float32_tolerance(in_repo):
    code, report = bisect("--a", "cpu:reference:float64", "--b", "cpu:reference:float32")
    assert report["tolerance_dtype"] == "float32"
    assert code == 0, report


def test_unknown_mutant_is_a_usage_error(in_repo):
    result = CliRunner().invoke(main, ["bisect", "tiny-random", "--b", "cpu:fast", "--mutant", "no_such_bug"])
    assert result.exit_code == 2 and "no_such_bug" in result.output
