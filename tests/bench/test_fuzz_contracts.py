"""bench/fuzz_contracts.py on a small seeded sample: no traceback, no hang, no false accept or
refusal; and its oracle is not blind (it finds the failing value of a prediction that can fail
and none for one that cannot)."""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import fuzz_contracts as fuzz  # noqa: E402

from pv import expr  # noqa: E402


def test_a_small_seeded_sample_is_clean(tmp_path):
    stats, examples, _ = fuzz.run(seed=3, cases=40, cli_every=0, corpus=fuzz.REPO.parent / "shared" / "corpus",
                                  timeout=60.0)
    assert stats["cases"] == 40
    assert stats["contract: valid"] + stats["contract: refused"] == 20  # every other case is a contract
    for bad in ("TRACEBACK", "HANG", "FALSE ACCEPT", "FALSE REFUSAL"):
        assert stats[bad] == 0, examples


def test_the_oracle_finds_what_it_should_and_nothing_more():
    rng = random.Random(0)
    fails_at, passes_at = fuzz.oracle(expr.parse("x < x + 1"), rng)
    assert fails_at is not None and passes_at is not None and expr.judge("x < x + 1", fails_at).holds is False
    assert fuzz.oracle(expr.parse("x <= inf"), rng)[0] is None  # cannot fail, so nothing is found
    assert fuzz.oracle(expr.parse("x != x"), rng)[1] is None    # cannot pass


def test_a_false_accept_would_be_counted(monkeypatch):
    # a vacuity that accepts everything: the tautology templates must show up as false accepts
    from pv import vacuity

    monkeypatch.setattr(fuzz.vacuity, "decide", lambda parsed: vacuity.Decision())
    stats: Counter = Counter()
    examples: dict = {}
    rng = random.Random(1)
    monkeypatch.setattr(fuzz, "random_prediction", lambda rng: "x*x >= 0")
    fuzz.prediction_case(rng, stats, examples)
    assert stats["FALSE ACCEPT"] == 1 and examples["false accept"][0][0] == "x*x >= 0"


def test_a_corpus_folder_that_is_not_there_is_refused_not_skipped(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit) as exit_info:
        fuzz.main(["--cases", "1", "--corpus", str(tmp_path / "absent")])
    assert exit_info.value.code == 2 and "no *.yaml under it" in capsys.readouterr().err
    out = tmp_path / "summary.json"
    import json
    import subprocess

    done = subprocess.run([sys.executable, str(BENCH / "fuzz_contracts.py"), "--cases", "2", "--cli", "0",
                           "--corpus", "none", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr

    summary = json.loads(out.read_text())
    assert summary["corpus"] is None and summary["sources"] == len(list((fuzz.REPO / "contracts").glob("*.yaml")))
