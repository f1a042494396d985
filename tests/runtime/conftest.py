"""Fixtures for the runtime's tests: tiny Hugging Face checkpoints written by transformers (the
independent reference), a small checkpoint written by the runtime's own pretraining, and the
zoo's trained tiny checkpoint (built once per cache; see runtime.zoo)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from pvlab import runtime
from pvlab.runtime.pretrain import pretrain
from runtime_helpers import SMALL_RECIPE, hf_llama_config, hf_qwen2_config, write_hf_checkpoint

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two xdist workers on two cores: one intra-op thread each, or OpenMP threads spin against
    # each other and everything runs several times slower.
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def hf_qwen2_dir(tmp_path_factory) -> Path:
    return write_hf_checkpoint(tmp_path_factory.mktemp("hf") / "qwen2", hf_qwen2_config())


@pytest.fixture(scope="session")
def hf_llama_dir(tmp_path_factory) -> Path:
    return write_hf_checkpoint(tmp_path_factory.mktemp("hf") / "llama", hf_llama_config())


@pytest.fixture(scope="session")
def small_checkpoint(tmp_path_factory) -> Path:
    """A checkpoint produced by runtime.pretrain (tokenizer, runtime.json, optimizer state)."""
    out = tmp_path_factory.mktemp("runtime") / "small"
    pretrain(SMALL_RECIPE, out, device="cpu", path="reference", progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_trained_dir() -> Path:
    """The zoo's trained tiny checkpoint, from the shared cache (built here if absent)."""
    return runtime.zoo.tiny_trained()


@pytest.fixture
def copy_checkpoint(tmp_path):
    """Copy a checkpoint directory so a test can damage it."""
    import shutil

    def copy(source: Path) -> Path:
        target = tmp_path / source.name
        shutil.copytree(source, target)
        return target
    return copy
