"""`python -m pvlab.runtime`: each command end to end, and every bad input as one clear `error:` line
with a non-zero exit status and no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from pvlab.runtime.cli import main

REPO_ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output
    return result


def python_m_runtime(*args: str, env_overrides=None, prelude: str = "") -> subprocess.CompletedProcess:
    """The real command in a fresh interpreter (exit status and stderr exactly as a user sees them)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env_overrides or {})}
    code = prelude + "import runpy; runpy.run_module('pvlab.runtime', run_name='__main__', alter_sys=True)"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env,
                          cwd=REPO_ROOT, timeout=300)


def assert_clean_failure(result, *fragments: str) -> None:
    output = result.output if hasattr(result, "output") else result.stderr
    code = result.exit_code if hasattr(result, "exit_code") else result.returncode
    assert code != 0, output
    assert "Traceback" not in output
    assert "error:" in output
    for fragment in fragments:
        assert fragment in output, output


# ---- commands --------------------------------------------------------------------------------

def test_inspect_shows_config_parameters_and_coverage(small_checkpoint):
    result = cli("inspect", small_checkpoint)
    assert result.exit_code == 0, result.output
    assert "Qwen2ForCausalLM" in result.output and "coverage:     26/26 tensors" in result.output
    assert "131,648" in result.output
    info = json.loads(cli("inspect", small_checkpoint, "--json").output)
    assert info["coverage"]["tensors_populated"] == info["coverage"]["tensors_expected"] == 26


def test_eval_reports_held_out_loss_as_json(small_checkpoint):
    result = cli("eval", small_checkpoint, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["heldout_documents"] > 0 and report["tokens"] > 0
    assert 0 < report["val_loss"] < 1.5 * report["ln_vocab"]
    assert report["path"] == "reference" and report["device"] == "cpu"


def test_eval_on_a_corpus_directory(small_checkpoint, tmp_path):
    (tmp_path / "code.py").write_text("def fib(n):\n    return n\n" * 40)
    report = json.loads(cli("eval", small_checkpoint, "--json", "--corpus", tmp_path).output)
    assert report["corpus"] == str(tmp_path) and report["val_loss"] > 0


def test_pretrain_writes_a_checkpoint_and_prints_losses_at_each_eval(tmp_path):
    out = tmp_path / "trained"
    result = cli("pretrain", "--config", "tiny", "--steps", 4, "--device", "cpu", "--out", out, "--batch-size", 4,
                 "--seq-len", 32, "--eval-every", 2, "--documents", 200)
    assert result.exit_code == 0, result.output
    assert result.output.count("train_loss") >= 3 and "val_loss" in result.output
    assert {"config.json", "model.safetensors", "tokenizer.json", "runtime.json"} <= {p.name for p in out.iterdir()}
    meta = json.loads((out / "runtime.json").read_text())
    assert meta["recipe"]["steps"] == 4 and [h["step"] for h in meta["results"]["history"]] == [0, 2, 4]


def test_pretrain_from_init_starts_at_the_checkpoint_loss(small_checkpoint, tmp_path):
    result = cli("pretrain", "--init", small_checkpoint, "--steps", 3, "--out", tmp_path / "ft", "--eval-every", 1,
                 "--lr", 1e-2, "--quiet")
    assert result.exit_code == 0, result.output
    history = json.loads((tmp_path / "ft" / "runtime.json").read_text())["results"]["history"]
    original = json.loads(cli("eval", small_checkpoint, "--json").output)
    assert history[0]["val_loss"] == original["val_loss"]  # same weights, same held-out batches
    assert history[-1]["val_loss"] < history[0]["val_loss"]


def test_run_no_gpu_never_touches_torch_cuda(small_checkpoint):
    tripwire = (
        "import torch, torch.cuda\n"
        "def _touched(*a, **k):\n"
        "    raise SystemExit('torch.cuda was touched despite --no-gpu')\n"
        "for _name in ('is_available', 'device_count', 'init', '_lazy_init', 'current_device', 'set_device',\n"
        "              'manual_seed', 'manual_seed_all', 'synchronize', 'get_device_name'):\n"
        "    setattr(torch.cuda, _name, _touched)\n"
        "class _Tripwire:\n"
        "    def __getattr__(self, name):\n"
        "        _touched()\n"
        "torch.cuda = _Tripwire()\n"
    )
    result = python_m_runtime("run", small_checkpoint, "--prompt", "def fib(n):", "--max-tokens", 8, "--no-gpu",
                              prelude=tripwire)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("def fib(n):")


# ---- bad input -------------------------------------------------------------------------------

def test_missing_checkpoint_directory(tmp_path):
    assert_clean_failure(cli("eval", tmp_path / "nowhere"), "nowhere", "does not exist")
    assert_clean_failure(cli("inspect", tmp_path / "nowhere"), "does not exist")


def test_corrupt_weights_file_in_a_real_subprocess(small_checkpoint, copy_checkpoint):
    directory = copy_checkpoint(small_checkpoint)
    (directory / "model.safetensors").write_bytes(b"\x00" * 16)
    result = python_m_runtime("eval", directory)
    assert result.returncode == 1
    assert_clean_failure(result, "model.safetensors")
    assert result.stderr.count("\n") <= 3  # a message, not a dump


def test_truncated_weights_file(small_checkpoint, copy_checkpoint):
    directory = copy_checkpoint(small_checkpoint)
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    assert_clean_failure(cli("run", directory, "--prompt", "x", "--no-gpu"), "model.safetensors", "truncated")


def test_unknown_model_type(small_checkpoint, copy_checkpoint):
    directory = copy_checkpoint(small_checkpoint)
    config = json.loads((directory / "config.json").read_text())
    config["model_type"] = "mamba"
    (directory / "config.json").write_text(json.dumps(config))
    assert_clean_failure(cli("inspect", directory), "config.json", "unknown model_type 'mamba'")


def test_prompt_longer_than_the_context(small_checkpoint):
    assert_clean_failure(cli("run", small_checkpoint, "--prompt", "x = 1\n" * 300, "--max-tokens", 1, "--no-gpu"),
                         "longer than the model's context of 256")


def test_device_cuda_without_a_gpu():
    result = python_m_runtime("pretrain", "--steps", 1, "--device", "cuda", "--out", "/nonexistent/never-written",
                              env_overrides={"CUDA_VISIBLE_DEVICES": ""})
    assert_clean_failure(result, "--device 'cuda'", "no CUDA GPU is available")
    assert not Path("/nonexistent/never-written").exists()


def test_no_gpu_conflicts_with_device_cuda(small_checkpoint):
    assert_clean_failure(cli("run", small_checkpoint, "--prompt", "x", "--no-gpu", "--device", "cuda"),
                         "conflicts with --no-gpu")


def test_empty_corpus_directory_writes_nothing(tmp_path):
    (tmp_path / "corpus").mkdir()
    out = tmp_path / "out"
    assert_clean_failure(cli("pretrain", "--steps", 1, "--corpus", tmp_path / "corpus", "--out", out),
                         str(tmp_path / "corpus"), "no non-empty")
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["corpus"]


def test_unknown_preset():
    assert_clean_failure(cli("pretrain", "--config", "gpt5", "--out", "/tmp/never"), "unknown preset 'gpt5'")


def test_checkpoint_without_recipe_needs_a_corpus(hf_qwen2_dir):
    assert_clean_failure(cli("eval", hf_qwen2_dir), "--corpus")


def test_malformed_command_line_is_a_usage_error():
    result = cli("run")
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_pretrain_from_a_checkpoint_without_tokenizer_is_refused(hf_qwen2_dir, tmp_path):
    assert_clean_failure(cli("pretrain", "--init", hf_qwen2_dir, "--steps", 1, "--out", tmp_path / "ft"),
                         "no tokenizer.json")
    assert not (tmp_path / "ft").exists()


def test_inspect_of_an_incomplete_checkpoint_lists_the_problem_and_fails(small_checkpoint, copy_checkpoint):
    from safetensors.torch import load_file, save_file
    directory = copy_checkpoint(small_checkpoint)
    tensors = load_file(str(directory / "model.safetensors"))
    del tensors["model.layers.0.self_attn.q_proj.bias"]
    save_file(tensors, str(directory / "model.safetensors"))
    result = cli("inspect", directory)
    assert_clean_failure(result, "25/26 tensors (1 missing)", "missing  model.layers.0.self_attn.q_proj.bias")


def test_pretrain_refuses_both_compile_scopes(tmp_path):
    result = cli("pretrain", "--compile", "--compile-model", "--steps", "1", "--out", tmp_path / "out", "--quiet")
    assert_clean_failure(result, "--compile-model", "not both")
    assert not (tmp_path / "out").exists()
