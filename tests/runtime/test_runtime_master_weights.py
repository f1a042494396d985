"""MasterWeightTrainer (pvlab/runtime/master_weights.py): what the falsifiers of contract
master-weights do not already pin down on their own."""

from __future__ import annotations

import pytest
import torch

from pvlab.runtime import adamw_update, checkpoint, data, master_weights
from pvlab.runtime.errors import ArgumentError
from pvlab.runtime.config import preset
from pvlab.runtime.master_weights import MasterWeightTrainer
from pvlab.runtime.trainer import Trainer


def test_save_writes_on_the_cpu_and_both_trainers_resume_it(tmp_path):
    """Every parameter's optimizer "step" is the one step_count tensor (and the moments views of
    flat buffers): written as they are, safetensors refused them as shared memory on the CPU."""
    model = checkpoint.init_model(config=preset("tiny"), weights="random", seed=0, device="cpu", path="fast",
                                  parity_gate=False)
    run = MasterWeightTrainer(model, lr=1e-2)
    batch = data.LMBatch.from_sequences(torch.randint(0, 512, (2, 9), generator=torch.Generator().manual_seed(1)))
    run.train_batch(batch)
    run.save(tmp_path / "ckpt")
    for cls in (Trainer, MasterWeightTrainer):
        resumed = cls.resume(tmp_path / "ckpt", path="fast")
        assert resumed.step == 1 and resumed.optimizer_digest() == run.optimizer_digest()


# ---- what the trainer refuses, and what it holds -----------------------------------------------

def _model(path="fast"):
    return checkpoint.init_model(config=preset("tiny"), weights="random", seed=0, device="cpu", path=path,
                                 parity_gate=False)


def _batch(seed=1):
    return data.LMBatch.from_sequences(torch.randint(0, 512, (2, 9), generator=torch.Generator().manual_seed(seed)))


def test_the_reference_path_and_micro_batches_are_refused_with_what_to_use_instead():
    with pytest.raises(ArgumentError, match="fast path"):
        MasterWeightTrainer(_model(path="reference"))
    with pytest.raises(ArgumentError, match="gradient accumulation"):
        MasterWeightTrainer(_model(), micro_batch_size=1)
    run = MasterWeightTrainer(_model())
    with pytest.raises(ArgumentError, match="one batch a step"):
        run.train_step([_batch(1), _batch(2)])


def test_only_the_decoder_matrices_become_bf16_and_the_bf16_weights_are_their_masters_rounded():
    model = _model()
    names = master_weights.master_parameter_names(model)
    assert names and all(".layers." in n and n.endswith("_proj.weight") for n in names)
    run = MasterWeightTrainer(model, lr=1e-2)
    for _ in range(3):
        run.train_batch(_batch())
    dtypes = {n: p.dtype for n, p in model.named_parameters()}
    assert {n for n, d in dtypes.items() if d == torch.bfloat16} == names
    with run.masters_in_model():
        masters = {n: p.detach().clone() for n, p in model.named_parameters() if n in names}
        assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(torch.equal(dict(model.named_parameters())[n].detach(), m.to(torch.bfloat16)) for n, m in masters.items())
    assert all(dict(model.named_parameters())[n].dtype == torch.bfloat16 for n in names)   # swapped back


def test_the_first_step_gives_the_fast_trainer_s_gradients_bit_for_bit():
    """Autocast's weight gradient is a bf16 product widened to fp32; the master path's is that product."""
    plain, master = Trainer(_model(), lr=1e-2, grad_clip=0.0), MasterWeightTrainer(_model(), lr=1e-2, grad_clip=0.0)
    assert plain.train_batch(_batch()) == master.train_batch(_batch())
    grads = {n: p.grad for n, p in master.named_parameters}
    for name, parameter in plain.named_parameters:
        assert torch.equal(parameter.grad, grads[name].float()), name


def test_state_layout_aligns_every_tensor_and_unaligned_addresses_are_refused():
    offsets, total = adamw_update.state_layout([3, 64, 65, 1])
    assert offsets == [0, 64, 128, 256] and total == 320
    assert all(o % adamw_update.STATE_ALIGNMENT == 0 for o in offsets)
    flat = torch.zeros(17, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="multiple of 16 bytes"):
        adamw_update._check_aligned([flat[1:9]], "gradient")
    adamw_update._check_aligned([flat[8:16]], "gradient")   # 16 bytes in: aligned


def test_a_skipped_update_changes_nothing_and_a_finite_one_changes_everything():
    weights = [torch.randn(4, 8).to(torch.bfloat16)]
    grads = [torch.randn(4, 8).to(torch.bfloat16)]
    masters = [weights[0].float() + 1e-4]
    m, v = [torch.full((4, 8), 1e-3)], [torch.full((4, 8), 1e-6)]
    before = [t.clone() for t in (weights[0], masters[0], m[0], v[0])]
    scalars = adamw_update.UpdateScalars(torch.tensor(1e-2), torch.tensor(3.0), torch.tensor(0.5), torch.tensor(1.0),
                                         0.9, 0.95, 1e-8)
    adamw_update.update_reference(weights, grads, masters, m, v, [0.1], scalars)
    assert all(torch.equal(a, b) for a, b in zip((weights[0], masters[0], m[0], v[0]), before))
    scalars.skip = torch.tensor(0.0)
    adamw_update.update_reference(weights, grads, masters, m, v, [0.1], scalars)
    assert all(not torch.equal(a, b) for a, b in zip((masters[0], m[0], v[0]), before[1:]))
    assert torch.equal(weights[0], masters[0].to(torch.bfloat16))


def test_the_optimizer_state_is_torch_s_shape_only_after_a_step():
    run = MasterWeightTrainer(_model(), lr=1e-2)
    assert run.optimizer.state == {} and run.optimizer.state_dict()["state"] == {}
    run.train_batch(_batch())
    state = run.optimizer.state
    assert len(state) == len(run.named_parameters)
    assert all(set(s) == {"step", "exp_avg", "exp_avg_sq"} and float(s["step"]) == 1.0 for s in state.values())
    assert all(s["exp_avg"].dtype == torch.float32 and s["exp_avg"].shape == p.shape for p, s in state.items())
