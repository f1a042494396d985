"""CLI flags of the equivalence features: pretrain --micro-batch-size / --pack-documents /
--attention-backend, run with several --prompt (one left-padded batch)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pvlab.runtime.cli import main


def cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


@pytest.mark.slow
def test_pretrain_accumulates_packs_and_run_decodes_a_batch(tmp_path):
    out = tmp_path / "ckpt"
    result = cli("pretrain", "--steps", 2, "--batch-size", 4, "--seq-len", 32, "--documents", 200, "--eval-every", 2,
                 "--micro-batch-size", 3, "--pack-documents", "--path", "fast", "--attention-backend", "flash",
                 "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    recipe = json.loads((out / "runtime.json").read_text())["recipe"]
    assert recipe["micro_batch_size"] == 3 and recipe["pack_documents"] is True
    result = cli("run", out, "--prompt", "def fib(n):", "--prompt", "x", "--max-tokens", 4)
    assert result.exit_code == 0, result.output
    assert result.output.count("--- prompt") == 2
    assert "def fib(n):" in result.output


def test_a_backend_this_machine_lacks_is_a_clean_error(small_checkpoint):
    import torch

    if torch.cuda.is_available():
        pytest.skip("the CUDA backends exist here")
    result = cli("run", small_checkpoint, "--prompt", "x", "--max-tokens", 2, "--path", "fast",
                 "--attention-backend", "efficient")
    assert result.exit_code == 1 and "error:" in result.output and "not available" in result.output
    result = cli("run", small_checkpoint, "--prompt", "x", "--max-tokens", 2, "--attention-backend", "flash")
    assert result.exit_code == 1 and "fast path" in result.output          # the reference path has no SDPA
    result = cli("run", small_checkpoint, "--prompt", "x", "--attention-backend", "xformers")
    assert result.exit_code == 2                                           # not a choice: usage error
