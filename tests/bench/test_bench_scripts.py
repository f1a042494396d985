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


# These tests read what the scripts print, not how steady this machine is: microsecond steps on a
# loaded CI machine vary by 100x, so the stability gate is lifted ("inf"); the gate itself is
# tested with a fake clock in tests/falsifiers/test_throughput.py.
def test_bench_loss_prints_every_variant_against_the_reference():
    result = run("bench_loss.py", "--tokens", "64", "--hidden", "16", "--vocab", "128", "--device", "cpu",
                 "--chunks", "16,64", "--compile", "off", "--min-window-s", "0.05", "--max-spread", "inf")
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("| train") or line.startswith("| eval")]
    assert len(rows) == 2 * 3                       # reference + two chunk sizes, train and eval
    assert all(line.rstrip().endswith("x |") for line in rows)


def test_bench_vs_hf_refuses_an_unknown_configuration():
    result = run("bench_vs_hf.py", "--device", "cpu", "--runtime", "model+turbo")
    assert result.returncode == 2 and "unknown option" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_profile_step_refuses_without_a_gpu():
    result = run("profile_step.py")
    assert result.returncode == 2
    assert "needs a CUDA device" in result.stderr
    assert "Traceback" not in result.stderr


def test_bench_validate_generates_a_clean_set(tmp_path, monkeypatch):
    """The figure measures a clean run: the generated contracts have no findings (exit 0)."""
    sys.path.insert(0, str(BENCH))
    try:
        import bench_validate
    finally:
        sys.path.remove(str(BENCH))
    root = bench_validate.make_workspace(tmp_path, 12)
    result = subprocess.run(bench_validate.PV, cwd=root, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "12 contracts" in result.stdout and "0 errors, 0 warnings" in result.stdout


SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-speed.sh"
TINY = ["--device", "cpu", "--config", "tiny", "--batch", "2", "--seq", "16", "--window-s", "0.05", "--max-spread", "inf"]


def test_gpu_speed_script_names_every_step_of_both_phases():
    result = subprocess.run(["bash", str(SCRIPT), "--out", "unused", "--dry-run", *TINY],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    steps = [line for line in result.stdout.splitlines() if line.startswith("== ")]
    assert "bench/bench_vs_hf.py" in steps[0] and "--peers eager,compile,liger" in steps[0]
    assert "model+fused+graph+chunk=4096" in steps[0]
    assert "profile_step.py" in steps[1]
    assert any("-m pv.cli run --contract runtime-vs-transformers" in s for s in steps)
    assert any("-m pv.cli strength --contract runtime-vs-transformers" in s and "loss_chunk_steps_eager" in s for s in steps)
    assert any("FALSIFY-PERF-DECODE-001" in s for s in steps)
    assert any("generate_decodes_eagerly" in s for s in steps)


def test_gpu_speed_script_bench_phase_runs_at_tiny_size_on_the_cpu(tmp_path):
    """The bench phase end to end (bench/bench_vs_hf.py inside it): every peer and runtime
    configuration gets a row — measured, or 'not available' with why (Liger on a CPU), never
    silently left out —, ratios against the strongest peer, the JSON, and the profile left out
    (no CUDA) and said so."""
    out = tmp_path / "out"
    result = subprocess.run(["bash", str(SCRIPT), "--out", str(out), "--phase", "bench", *TINY, "--peers", "eager,liger",
                             "--runtime", "eager,eager+fused"], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "profile_step.py --runtime eager" in result.stdout and "left out" in result.stdout
    table = (out / "bench.md").read_text()
    assert "| transformers, eager | " in table
    assert "| transformers + Liger kernels | not available: " in table
    assert "| runtime, eager | " in table and "| runtime, eager, fused projections | " in table
    assert "runtime, eager, fused projections / strongest transformers: train" in table
    data = json.loads((out / "bench.json").read_text())
    assert set(data["peers"]) == {"eager", "liger"} and set(data["runtime"]) == {"eager", "eager+fused"}
    assert data["strongest"]["train"] == "eager"
    assert "torch" in (out / "machine.txt").read_text()


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


def test_bench_binding_side_by_side_times_each_configuration_on_its_own(tmp_path):
    out = tmp_path / "binding.json"
    result = run("bench_binding.py", "--repeat", "1", "--side-by-side", "--tests",
                 "generated_tests/test_softmax_kernel.py", "-k", "softmax_001", "--json", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(out.read_text())
    assert figures["pytest"].startswith("1 passed")
    # each CPU time is one pytest process tree's, torch's import at least
    cpu = {mode: figures["runs"][mode]["cpu"][0] for mode in ("off", "on")}
    assert all(t > 1.0 for t in cpu.values()) and all(figures["runs"][m]["wall"][0] > 0 for m in cpu)


def test_bench_vacuity_prints_what_one_prediction_costs_the_solver():
    from pv import vacuity

    result = run("bench_vacuity.py", "--prediction", "x*x >= 0")  # a tautology only z3 proves
    assert result.returncode == 0, result.stderr
    assert "1 solver calls" in result.stdout, result.stdout
    assert f"resource units (budget {vacuity.SOLVER_BUDGET:,})" in result.stdout, result.stdout
    assert "holds for every value" in result.stdout, result.stdout


def test_bench_optimizer_tail_uses_the_models_own_parameter_shapes_and_prints_each_form():
    sys.path.insert(0, str(BENCH))
    try:
        import bench_optimizer_tail
    finally:
        sys.path.remove(str(BENCH))
    from pvlab import runtime
    for preset in ("tiny", "qwen2-0.5b"):
        model = runtime.init_model(config=runtime.preset(preset), weights="random", seed=0, parity_gate=False) \
            if preset == "tiny" else None
        shapes = sorted(bench_optimizer_tail.parameter_shapes(preset))
        if model is not None:
            assert shapes == sorted(tuple(p.shape) for p in model.parameters())
        else:   # Qwen2-0.5B: 494.0M parameters with the head tied to the embedding
            assert round(sum(torch.Size(s).numel() for s in shapes) / 1e6, 1) == 494.0
    result = run("bench_optimizer_tail.py", "--preset", "tiny", "--device", "cpu", "--steps", "2",
                 "--only", "torch,fused,norm,scale")
    assert result.returncode == 0, result.stderr
    rows = [line.split(" | ")[0] for line in result.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows == ["| form", "| torch", "| fused", "| norm", "| scale"]
