"""Probes of the planted bugs of mutants/behaviour.py (contracts fast-path-on-cpu and
documented-behaviour), for test_mutants.py: each is a cheap direct call whose result changes while
its mutant is active, and is the same on every clean call. Imported by test_mutants.py (which
collects every `probe_<mutant name>`)."""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import torch

from pvlab.falsifiers import fast_path_cpu, loading
from pvlab.runtime import atomic, checkpoint, data, kernels, parity
from pvlab.runtime.config import preset


def _outcome(call):
    try:
        return call()
    except Exception as error:  # noqa: BLE001 - the probe reports what the runtime did
        return f"raised {type(error).__name__}"


def probe_gqa_flag_from_sequence_length():
    q, k = torch.ones(1, 4, 2, 8), torch.ones(1, 2, 2, 8)   # T == the number of KV heads
    return _outcome(lambda: kernels.attention_fast(q, k, k))


def probe_fast_path_runs_reference_attention():
    return fast_path_cpu.paths_take_their_kernels(device="cpu")["fast_sdpa_calls"]


def probe_pinned_backend_error_unwrapped():
    return fast_path_cpu.cpu_refuses_gpu_only_requests(device="cpu")["wrong_outcomes"]


def probe_parity_probe_counts_rows():
    logits = torch.zeros(2, 5, 11)
    return parity.compare_logits(logits, logits, device="cpu", path="fast").probe_tokens


def probe_float64_state_dict_refused():
    return checkpoint._safetensors_dtype(torch.zeros(1, dtype=torch.float64))


def probe_atomic_write_swallows_writer_error():
    def writer(temporary: Path) -> None:
        raise ValueError("failed")

    with tempfile.TemporaryDirectory() as tmp:
        return _outcome(lambda: atomic.write_with(Path(tmp) / "f", writer))


def probe_hf_config_without_cache():
    return preset("tiny").to_hf_dict()["use_cache"]


def probe_fingerprint_counts_docstrings():
    return importlib.import_module("pvlab.runtime.pretrain").code_fingerprint()


def probe_compile_mode_dropped():
    return loading.compile_mode_reaches_torch(device="cpu")["wrong_calls"]


def probe_packer_opens_row_when_full():
    return data.pack_documents([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10], list(range(11, 18))], seq_len=14)


def probe_pretokenizer_split_dropped():
    tokenizer = data.train_tokenizer(["hello world 123"] * 3, 300)
    return tokenizer.pre_tokenizer.pre_tokenize_str("hello world 123")


def probe_sampling_unseeded_below_one():
    generation = importlib.import_module("pvlab.runtime.generate")
    model = checkpoint.init_model(config=preset("tiny").replace(initializer_range=0.002), weights="random", seed=0,
                                  device="cpu", parity_gate=False)
    return generation.generate(model, [1, 2, 3], max_new_tokens=8, temperature=0.7, seed=5).new_ids


def probe_head_only_gradient_dropped():
    hidden = torch.ones(1, 3, 4)
    weight = torch.ones(6, 4, requires_grad=True)
    loss = kernels.chunked_linear_cross_entropy(hidden, weight, torch.tensor([[1, 2, 3]]), compute_dtype=torch.float32)
    return loss.requires_grad   # the head's gradient is on its way, or it is not
