"""The planted bugs at the transformers adapter's seams (pvlab/falsifiers/mutants/adapters.py)
are killed by the seed falsifiers that declare them — the same pack falsifiers that kill their
pvlab counterparts — and those falsifiers PASS on the unmutated adapter: each generated test
cell (cpu, tiny-trained, runtime transformers) run by pytest with pv's plugin, once clean and
once with `--pv-mutant`. (The cuda cells are for `pv strength` on a GPU machine; the other
seed-defect equivalents, declared next to their pvlab counterparts, are measured by `pv strength
--device cpu`, one process each, too slow to repeat here.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pv.codegen import test_name as node_name

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # one pytest process per cell (torch import + the tiny-trained subject)

# mutant -> (generated module, falsifier) declaring it; the transformers cell on cpu
DECLARED = {
    "hf_fast_path_drops_qkv_bias": ("test_apr_cpu_vs_gpu_output_parity.py", "FALSIFY-CPU-GPU-002"),
    "hf_fast_path_attention_scale_wrong": ("test_apr_cpu_vs_gpu_output_parity.py", "FALSIFY-CPU-GPU-002"),
    "hf_evaluate_averages_batch_means": ("test_apr_pretrain_eval_methodology.py",
                                         "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-006"),
    "hf_warmup_never_warms": ("test_lr_schedule.py", "FALSIFY-LR-SCHEDULE-001"),
}
BIAS_EFFECT = ("test_apr_pretrain_cuda_forward_parity.py", "FALSIFY-CUDA-FORWARD-PARITY-003")


def cell(module: str, falsifier: str) -> str:
    return f"generated_tests/{module}::{node_name(falsifier, 'cpu', 'tiny-trained', 'transformers')}"


def run_cells(nodes: list[str], mutant: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for key in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER"):
        env.pop(key, None)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "--pv-no-ledger",
            "--pv-device", "cpu", *nodes, *(["--pv-mutant", mutant] if mutant else [])]
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)


def test_the_declaring_falsifiers_pass_on_the_unmutated_transformers_adapter():
    nodes = sorted({cell(*where) for where in [*DECLARED.values(), BIAS_EFFECT]})
    done = run_cells(nodes)
    assert done.returncode == 0 and f"{len(nodes)} passed" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("mutant, where", [*DECLARED.items(), ("hf_fast_path_drops_qkv_bias", BIAS_EFFECT)])
def test_each_planted_bug_is_killed_by_its_falsifier(mutant, where):
    done = run_cells([cell(*where)], mutant)
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "1 failed" in output, output
    assert f"FALSIFIED {where[1]} on cpu with subject tiny-trained on runtime transformers" in output, output
