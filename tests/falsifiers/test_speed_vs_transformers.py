"""pvlab.falsifiers.speed_vs_transformers: the runtime against transformers, measured side by side.
(Its GPU-name gate is tested with the other GPU claims in test_performance.py.)"""

from __future__ import annotations

import pytest
import torch

from pvlab.falsifiers import speed_vs_transformers


def test_both_sides_step_the_same_batches_from_the_same_weights_and_return_their_losses(tmp_path):
    """The comparison is only fair when both sides compute the same thing: same weights (one
    directory), same batches, same recipe. Their first training losses agree (bf16 autocast on
    both sides, so not bit for bit), and every step hands a float loss to the host."""
    from pvlab import runtime

    config = runtime.preset("tiny")
    runtime.save_checkpoint(runtime.init_model(config=config, weights="random", seed=0, device="cpu"), tmp_path)
    batches = speed_vs_transformers.make_batches(config.vocab_size, 2, 16, count=2)
    device = torch.device("cpu")
    hf_train, hf_eval, hf_owner = speed_vs_transformers.transformers_steps(tmp_path, device, batches)
    rt_train, rt_eval, rt_owner = speed_vs_transformers.runtime_steps(tmp_path, device, batches, "none")
    hf_loss, rt_loss = hf_eval(), rt_eval()          # batch 0 on both sides, before any update
    assert isinstance(hf_loss, float) and isinstance(rt_loss, float)
    assert abs(hf_loss - rt_loss) <= 0.02 * hf_loss, (hf_loss, rt_loss)
    hf_first, rt_first = hf_train(), rt_train()      # batch 1, first update on each side
    assert abs(hf_first - rt_first) <= 0.02 * hf_first, (hf_first, rt_first)


def test_the_ratios_are_the_runtime_over_transformers(monkeypatch):
    """On the CPU with the GPU-name gate lifted (a tiny model, short windows): the observations
    are each side's figures and their quotients, not figures from anywhere else."""
    monkeypatch.setattr(speed_vs_transformers, "_gpu_named", lambda device, gpu: "cpu")
    observed = speed_vs_transformers.training_and_eval_vs_transformers(
        device="cpu", gpu="any", config="tiny", batch=2, seq=16, compile="none", min_window_s=0.05, max_spread=100.0)
    assert observed["train_ratio"] == pytest.approx(observed["runtime_train_tok_s"] / observed["transformers_train_tok_s"])
    assert observed["eval_ratio"] == pytest.approx(observed["runtime_eval_tok_s"] / observed["transformers_eval_tok_s"])
    assert observed["runtime_train_tok_s"] > 0 and observed["transformers_eval_tok_s"] > 0
