"""bench/: the speed scripts run end to end on the CPU (tiny sizes) and refuse what they cannot measure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=600)


def test_bench_loss_prints_every_variant_against_the_reference():
    result = run("bench_loss.py", "--tokens", "64", "--hidden", "16", "--vocab", "128", "--device", "cpu",
                 "--chunks", "16,64", "--compile", "off", "--min-window-s", "0.05", "--max-spread", "100")
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| train") or line.startswith("| eval")]
    assert len(rows) == 2 * 3                       # reference + two chunk sizes, train and eval
    assert all(line.rstrip().endswith("x |") for line in rows)


def test_bench_vs_hf_smoke_run_on_the_cpu(tmp_path):
    out = tmp_path / "bench.json"
    result = run("bench_vs_hf.py", "--config", "tiny", "--batch", "2", "--seq", "16", "--device", "cpu",
                 "--min-window-s", "0.05", "--max-spread", "100", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "runtime fast path / transformers: train" in result.stdout
    assert out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_profile_step_refuses_without_a_gpu():
    result = run("profile_step.py")
    assert result.returncode == 2
    assert "needs a CUDA device" in result.stderr
    assert "Traceback" not in result.stderr


def test_bench_binding_prints_both_ratios_of_one_run(tmp_path):
    out = tmp_path / "binding.json"
    result = run("bench_binding.py", "--repeat", "1", "--tests", "generated_tests/test_softmax_kernel.py",
                 "-k", "softmax_001", "--json", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "overhead of recording the executed code, cpu time:" in result.stdout
    assert "overhead of recording the executed code, wall time:" in result.stdout
    figures = json.loads(out.read_text())
    assert figures["pytest"].startswith("1 passed")  # the same one test ran in both configurations
    assert all(t > 0 for mode in ("off", "on") for kind in ("cpu", "wall") for t in figures["runs"][mode][kind])
