"""The CUDA device: the fast path (its default) against the fp32 CPU reference. These tests need a
GPU and are reported as skipped — never as passed — on machines without one."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from runtime_helpers import randomise, tiny_config

from pvlab import runtime
from pvlab.runtime.data import LMBatch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
REPO_ROOT = Path(__file__).resolve().parents[2]


def test_cuda_defaults_to_the_fast_path_behind_the_parity_gate(hf_qwen2_dir):
    model = runtime.load(hf_qwen2_dir, device="cuda")
    assert model.path == "fast" and model.device.type == "cuda"
    assert model.parity_report.min_cosine > 0.99
    assert all(p.device.type == "cuda" for p in model.parameters())
    assert model.model.layers[0].self_attn.q_proj.bias.device.type == "cuda"


@pytest.mark.parametrize("path", ["reference", "fast"])
def test_cuda_logits_match_the_cpu_reference(hf_qwen2_dir, path):
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = runtime.load(hf_qwen2_dir)(ids)
        actual = runtime.load(hf_qwen2_dir, device="cuda", path=path)(ids.cuda()).cpu()
    tolerance = 1e-3 if path == "reference" else 0.05 * expected.abs().max().item()
    assert (actual - expected).abs().max().item() < tolerance


def test_cuda_greedy_decoding_agrees_with_the_cpu(tiny_trained_dir):
    cpu = runtime.load(tiny_trained_dir)
    gpu = runtime.load(tiny_trained_dir, device="cuda")
    prompt = cpu.tokenizer.encode("def fib(n):").ids
    assert runtime.generate(gpu, prompt, max_new_tokens=32).new_ids == runtime.generate(cpu, prompt,
                                                                                         max_new_tokens=32).new_ids


def test_cuda_fast_training_step_uses_fused_adamw_and_tracks_the_cpu(tmp_path):
    ids = torch.randint(0, 512, (8, 65), generator=torch.Generator().manual_seed(0))
    batch = LMBatch.from_sequences(ids)
    losses = {}
    for device in ("cpu", "cuda"):
        model = runtime.init_model(config="tiny", weights="random", seed=0, device=device)
        trainer = runtime.Trainer(model, lr=1e-2, path="fast")
        assert trainer.optimizer.defaults["fused"] is True
        losses[device] = [trainer.train_batch(batch) for _ in range(5)]
    assert losses["cuda"][-1] < math.log(512) - 0.2
    assert abs(losses["cuda"][-1] - losses["cpu"][-1]) < 0.05 * losses["cpu"][-1]


def test_cuda_resume_continues_the_run(tmp_path):
    batches = [LMBatch.from_sequences(torch.randint(0, 512, (4, 33), generator=torch.Generator().manual_seed(i)))
               for i in range(4)]
    trainer = runtime.Trainer(runtime.init_model(config="tiny", weights="random", seed=0, device="cuda"))
    for batch in batches[:2]:
        trainer.train_batch(batch)
    trainer.save(tmp_path / "ckpt")
    expected = [trainer.train_batch(batch) for batch in batches[2:]]
    resumed = runtime.Trainer.resume(tmp_path / "ckpt", device="cuda")
    actual = [resumed.train_batch(batch) for batch in batches[2:]]
    assert actual == pytest.approx(expected, rel=1e-5)


def test_run_no_gpu_creates_no_cuda_context(small_checkpoint):
    code = ("import runpy, sys, torch\n"
            "sys.argv = ['runtime', 'run', sys.argv[1], '--prompt', 'def f(x):', '--max-tokens', '4', '--no-gpu']\n"
            "try:\n"
            "    runpy.run_module('pvlab.runtime', run_name='__main__', alter_sys=True)\n"
            "except SystemExit as exit:\n"
            "    assert not exit.code, exit.code\n"
            "print('CUDA_INITIALISED', torch.cuda.is_initialized())\n")
    result = subprocess.run([sys.executable, "-c", code, str(small_checkpoint)], capture_output=True, text=True,
                            cwd=REPO_ROOT, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "CUDA_INITIALISED False" in result.stdout


def test_fast_path_bias_drop_is_refused_by_the_parity_gate_on_cuda(hf_qwen2_dir):
    from pvlab.falsifiers.mutants import registry

    with registry()["fast_path_drops_qkv_bias"]():  # the planted bug: the fast path forgets the biases
        with pytest.raises(runtime.errors.ParityGateError):
            runtime.load(hf_qwen2_dir, device="cuda")


def test_generation_on_cuda_equals_full_forward():
    model = runtime.init_model(config=tiny_config(vocab_size=200), weights="random", seed=0)
    randomise(model, seed=1)
    model = runtime.parity.place(model, torch.device("cuda"), "fast")
    ids = torch.randint(0, 200, (1, 16), generator=torch.Generator().manual_seed(0)).cuda()
    with torch.no_grad():
        full = model(ids)
        cache = runtime.KVCache(model.config.num_hidden_layers)
        steps = [model(ids[:, :5], cache)] + [model(ids[:, i:i + 1], cache) for i in range(5, 16)]
    assert (torch.cat(steps, dim=1) - full).abs().max().item() < 0.05 * full.abs().max().item()
