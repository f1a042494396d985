"""Executed-code binding on real code, end to end through pv's pytest plugin: pvlab's own CPU
falsifiers (a tmp copy of the repository's workspace), an adopter's package (examples/welford)
and the ranks of a real data-parallel launch.

Each test records evidence in a subprocess (a fresh interpreter imports the copy, not this
checkout), then edits the copy as a user would and asks pv.lifecycle's question -- why is this
record's code not the tree's? -- through `TreeDigests.record_changes`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pv import ledger, lifecycle
from pv.codebind import TreeDigests

REPO_ROOT = Path(__file__).resolve().parents[1]
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


def _pytest(root: Path, *args: str, extra_path: tuple[Path, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (root, *extra_path, REPO_ROOT))}
    for key in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PV_EXECUTION", "COVERAGE_PROCESS_CONFIG"):
        env.pop(key, None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                           "--pv-device", "cpu", "--pv-ledger", str(root / "ledger.jsonl"), *args],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return done


def _records(root: Path) -> dict[str, ledger.LedgerRecord]:
    contents = ledger.read(root / "ledger.jsonl")
    assert not contents.problems
    return {r.falsifier: r for r in contents.records}


def _changes(root: Path, record: ledger.LedgerRecord) -> tuple[str, ...]:
    return lifecycle.code_changes(record, TreeDigests(root))  # a fresh tree: nothing cached


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


@pytest.fixture
def pvlab_copy(tmp_path: Path) -> Path:
    """pvlab's workspace as it is here: its [tool.pv], contracts and runtime, two generated tests."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(REPO_ROOT / "pyproject.toml", root)
    for directory in ("pvlab", "contracts"):
        shutil.copytree(REPO_ROOT / directory, root / directory, ignore=_IGNORE)
    (root / "generated_tests").mkdir()
    for test in ("test_softmax_kernel.py", "test_rmsnorm_kernel.py", "test_distributed_training.py"):
        shutil.copy(REPO_ROOT / "generated_tests" / test, root / "generated_tests")
    return root


def test_pvlab_kernel_records_bind_the_functions_they_ran(pvlab_copy: Path):
    root = pvlab_copy
    _pytest(root, "generated_tests", "-k", "softmax_001 or rmsnorm_001")
    records = _records(root)
    softmax, rmsnorm = records["FALSIFY-SOFTMAX-001"], records["FALSIFY-RMSNORM-001"]
    assert (softmax.verdict, rmsnorm.verdict) == ("PASS", "PASS")
    assert not softmax.binding_problems and not rmsnorm.binding_problems
    kernels = "pvlab.runtime.kernels"
    assert "softmax_reference" in softmax.executed_code[kernels]
    assert "rms_norm" not in softmax.executed_code[kernels]
    assert "rms_norm" in rmsnorm.executed_code[kernels]
    assert "softmax_reference" not in rmsnorm.executed_code[kernels]
    assert softmax.code_origins[kernels] == "pvlab/runtime/kernels.py"
    assert _changes(root, softmax) == _changes(root, rmsnorm) == ()

    kernels_py = root / "pvlab" / "runtime" / "kernels.py"
    with kernels_py.open("a") as file:  # an unused function and a comment: nothing is stale
        file.write("\n\n# a helper nobody calls yet\ndef unused_helper(x):\n    return x * 2\n")
    assert _changes(root, softmax) == _changes(root, rmsnorm) == ()

    # an edit of a function the softmax check executed: that record, and only it, is stale
    _edit(kernels_py, "    row_max = scores.amax(dim=-1, keepdim=True)\n",
          "    row_max = scores.amax(dim=-1, keepdim=True).detach()\n")
    assert _changes(root, softmax) == (f"{kernels}:softmax_reference",)
    assert _changes(root, rmsnorm) == ()


def test_the_code_a_data_parallel_falsifiers_ranks_ran_is_bound(pvlab_copy: Path):
    """Two gloo ranks started as torchrun starts them (pvlab.falsifiers.launch): the functions
    only the ranks run are in the record, and an edit to one stales it."""
    root = pvlab_copy
    _pytest(root, "generated_tests/test_distributed_training.py", "-k", "SHARD_001 or shard_001")
    [record] = _records(root).values()
    assert record.verdict == "PASS" and not record.binding_problems, record.binding_problems
    ran = record.executed_code
    assert "_rank_main" in ran["pvlab.falsifiers.launch"]  # run only in a rank (python -m ...launch)
    assert "_shard_rank" in ran["pvlab.falsifiers.data_parallel"]
    assert {"init", "shard_indices"} <= set(ran["pvlab.runtime.distributed"])
    assert _changes(root, record) == ()
    _edit(root / "pvlab" / "falsifiers" / "data_parallel.py", "    ctx = distributed.init(device)\n    shards",
          "    ctx = distributed.init(device)\n    assert ctx.world_size > 0\n    shards")
    assert _changes(root, record) == ("pvlab.falsifiers.data_parallel:_shard_rank",)


def _pv(root: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-m", "pv.cli", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"pv {' '.join(args)}: {done.stdout}{done.stderr}"


def test_an_adopters_records_bind_the_functions_they_ran(tmp_path: Path):
    """examples/welford adopted as docs/adopting.md says: pv init, its contract and check."""
    root = tmp_path / "welford"
    shutil.copytree(REPO_ROOT / "examples" / "welford", root, ignore=_IGNORE)
    _pv(root, "init")
    shutil.copytree(root / "adoption", root, dirs_exist_ok=True)
    shutil.rmtree(root / "adoption")
    for demo in ("contracts/demo-softmax-v1.yaml", "welford_checks/softmax.py", "welford_checks/checks.py"):
        (root / demo).unlink()
    _pv(root, "generate")
    _pytest(root, "generated_tests")
    [record] = _records(root).values()
    assert record.verdict == "PASS" and not record.binding_problems
    assert set(record.executed_code["welford"]) == {"<module>", "mean_and_variance", "RunningStats.push",
                                                    "RunningStats.variance"}
    assert "variance_far_from_zero" in record.executed_code["welford_checks.variance"]
    assert _changes(root, record) == ()

    library = root / "welford" / "__init__.py"
    with library.open("a") as file:  # an unused function and a comment
        file.write("\n\n# not used by any check yet\ndef standard_deviation(values):\n"
                   "    return mean_and_variance(values)[1] ** 0.5\n")
    _edit(library, '"""Sample variance (divides by n - 1)."""', '"""Sample variance, divided by n - 1."""')
    assert _changes(root, record) == ()

    _edit(library, "self.m2 += delta * (x - self.mean)", "self.m2 += delta * (x - self.mean) + 0.0")
    assert _changes(root, record) == ("welford:RunningStats.push",)
