"""The checks bound to the seed contracts: every falsifier is bound, every check returns the
observations its prediction names and holds on the runtime as it is (on the CPU), CUDA-only
claims skip visibly here, and each check FAILS under a planted bug of the kind it claims to see.

These use the cached trained tiny checkpoint (runtime.zoo; built once into .pv-cache/).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from pv.harness import DeviceUnavailable
from pvlab.runtime import checkpoint, config as runtime_config, data, kernels, model as runtime_model, parity, trainer

from falsifier_helpers import all_falsifiers, observe
from pvlab.falsifiers import fixtures

pytestmark = pytest.mark.slow

KERNEL_CONTRACTS = ("rmsnorm-kernel", "rope-kernel", "softmax-kernel", "cross-entropy-kernel",
                    "gqa-attention-kernel", "adamw-kernel", "kv-cache-kernel")
SEED = [(c, f) for c, f in all_falsifiers() if c not in KERNEL_CONTRACTS]
SEED_CPU = [(c, f.id) for c, f in SEED if "cpu" in f.devices]


@pytest.fixture(scope="module", autouse=True)
def _checkpoint_built_before_any_patch():
    """The zoo's on-disk cache must never be built while a test has broken the runtime."""
    fixtures.checkpoint_dir("tiny-trained")


@pytest.fixture(autouse=True)
def _fresh_models():
    """Planted bugs on the loading path must not leak into (or out of) cached models; the
    tokenised corpus is the same under every planted bug here and stays cached."""
    fixtures.clear(models_only=True)
    yield
    fixtures.clear(models_only=True)


def test_every_falsifier_of_every_contract_is_bound():
    unbound = [f.id for _, f in all_falsifiers() if not f.check]
    assert not unbound


def test_cuda_claims_require_cuda():
    by_id = {f.id: f for _, f in all_falsifiers()}
    assert by_id["FALSIFY-CPU-GPU-004"].devices == ["cuda"]
    for falsifier in ("FALSIFY-CUDA-FORWARD-PARITY-001", "FALSIFY-CUDA-FORWARD-PARITY-002",
                      "FALSIFY-CUDA-FORWARD-PARITY-003", "FALSIFY-CPU-GPU-001", "FALSIFY-CPU-GPU-002"):
        assert "cuda" in by_id[falsifier].devices


@pytest.mark.parametrize("contract_id,falsifier_id", SEED_CPU, ids=[f for _, f in SEED_CPU])
def test_seed_falsifier_holds_on_cpu(contract_id, falsifier_id):
    observations, judgement = observe(contract_id, falsifier_id)
    assert set(judgement.observed) == set(judgement.observed) & set(observations)
    assert all(isinstance(v, (int, float, bool)) for v in observations.values()), observations
    assert judgement.holds, judgement.describe()


ALL_CUDA = [(c, f.id) for c, f in all_falsifiers() if "cuda" in f.devices]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")
@pytest.mark.parametrize("contract_id,falsifier_id", ALL_CUDA, ids=[f for _, f in ALL_CUDA])
def test_cuda_checks_raise_device_unavailable_without_a_gpu(contract_id, falsifier_id):
    with pytest.raises(DeviceUnavailable):
        observe(contract_id, falsifier_id, device="cuda")


def _fails(contract_id, falsifier_id, **overrides):
    observations, judgement = observe(contract_id, falsifier_id, **overrides)
    assert not judgement.holds, f"{falsifier_id} survived the planted bug: {judgement.describe()}"
    return observations


# ---- forward sanity / populate -----------------------------------------------------------------

def test_constant_logits_are_caught(monkeypatch):
    monkeypatch.setattr(runtime_model, "apply_final_norm", lambda norm, hidden: hidden * 0)
    _fails("apr-cpu-forward-sanity", "FALSIFY-CPU-FORWARD-SANITY-002")
    _fails("apr-cpu-forward-sanity", "FALSIFY-CPU-FORWARD-SANITY-003")


def test_nan_logits_are_caught(monkeypatch):
    original = kernels.rms_norm
    monkeypatch.setattr(kernels, "rms_norm", lambda x, w, eps: original(x, w, eps) / 0.0 * 0.0)
    observations = _fails("apr-cpu-forward-sanity", "FALSIFY-CPU-FORWARD-SANITY-001")
    assert observations["nonfinite_logits"] > 0


def test_untied_uninitialised_head_is_caught(monkeypatch):
    original_populate = checkpoint.populate

    def untie(model, tensors, plan):
        report = original_populate(model, tensors, plan)
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight) * 0.02)
        return report
    monkeypatch.setattr(checkpoint, "populate", untie)
    # peak_to_mean > 1.5 (the seed threshold, from a real Qwen2 at V = 151936) does NOT see this on
    # the tiny model: a N(0, 0.02) head over unit-RMS hidden states still peaks at ~1.7. The loss
    # bound and the fine-tune's independent load do.
    observations, judgement = observe("apr-cpu-forward-sanity", "FALSIFY-CPU-FORWARD-SANITY-003")
    assert observations["peak_to_mean"] < 5
    _fails("apr-pretrain-cuda-forward-parity", "FALSIFY-CUDA-FORWARD-PARITY-001")
    _fails("apr-pretrain-init-finetune", "FALSIFY-APR-PRETRAIN-INIT-FINETUNE-001")


def test_loader_dropping_biases_is_caught(monkeypatch):
    original = checkpoint.copy_tensor
    names = {}

    def populate_without_biases(model, tensors, plan):
        for name, parameter in model.named_parameters():
            names[id(parameter)] = name
        return original_populate(model, tensors, plan)

    def copy_unless_bias(parameter, tensor):
        if names.get(id(parameter), "").endswith(".bias"):
            with torch.no_grad():
                parameter.zero_()
            return
        original(parameter, tensor)
    original_populate = checkpoint.populate
    monkeypatch.setattr(checkpoint, "populate", populate_without_biases)
    monkeypatch.setattr(checkpoint, "copy_tensor", copy_unless_bias)
    _fails("apr-cpu-forward-sanity", "FALSIFY-CPU-FORWARD-SANITY-005")
    observations = _fails("apr-pretrain-cuda-forward-parity", "FALSIFY-CUDA-FORWARD-PARITY-002")
    assert observations["qkv_bias_on_device"] == 0


# ---- bias on the fast path / device parity ------------------------------------------------------

def test_fast_path_dropping_biases_is_caught(monkeypatch):
    monkeypatch.setattr(kernels, "linear_fast", lambda x, weight, bias: F.linear(x, weight, None))
    observations = _fails("apr-pretrain-cuda-forward-parity", "FALSIFY-CUDA-FORWARD-PARITY-003")
    assert observations["bias_effect_max_abs"] == 0
    _fails("apr-cpu-vs-gpu-output-parity", "FALSIFY-CPU-GPU-002")


def test_sampling_where_greedy_was_asked_is_caught(monkeypatch):
    generator = torch.Generator().manual_seed(0)
    monkeypatch.setattr(kernels, "pick_next_token",
                        lambda logits, temperature, gen, top_k=None: kernels.sample_pick(logits, 1.0, generator))
    _fails("apr-cpu-vs-gpu-output-parity", "FALSIFY-CPU-GPU-001")


def test_gate_comparing_the_device_with_itself_is_caught(monkeypatch):
    original = parity.compare_logits
    monkeypatch.setattr(parity, "compare_logits",
                        lambda reference, candidate, **kw: original(candidate, candidate, **kw))
    observations = _fails("apr-cpu-vs-gpu-output-parity", "FALSIFY-CPU-GPU-003")
    assert observations["gate_refused_diverging"] == 0


def test_gate_refusing_everything_is_caught(monkeypatch):
    monkeypatch.setattr(parity, "PARITY_MIN_COSINE", 1.01)
    original = parity.place
    monkeypatch.setattr(parity, "place", lambda model, device, path, gate=None, min_cosine=1.01:
                        original(model, device, path, gate=gate, min_cosine=1.01))
    _fails("apr-cpu-vs-gpu-output-parity", "FALSIFY-CPU-GPU-003")


# ---- eval methodology ---------------------------------------------------------------------------

def test_eval_scoring_the_inputs_is_caught(monkeypatch):
    monkeypatch.setattr(trainer, "eval_targets", lambda batch: batch.inputs)
    observations = _fails("apr-pretrain-eval-methodology", "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-003")
    assert observations["label_mismatches"] > 0


def test_mis_normalised_eval_loss_is_caught(monkeypatch):
    original = kernels.cross_entropy_reference
    monkeypatch.setattr(kernels, "cross_entropy_reference",
                        lambda logits, targets: original(logits, targets) * (targets != -100).sum())
    _fails("apr-pretrain-eval-methodology", "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-001")


def test_stale_eval_after_training_is_caught(monkeypatch):
    original_train, original_eval = trainer.Trainer.train_batch, trainer.Trainer.eval_batch

    def train(self, batch):
        self._stale = original_train(self, batch)
        return self._stale

    def stale_eval(self, batch):  # after a step, eval reports a per-token buffer training wrote
        fresh = original_eval(self, batch)
        return self._stale / 1000 if getattr(self, "_stale", None) is not None else fresh
    monkeypatch.setattr(trainer.Trainer, "train_batch", train)
    monkeypatch.setattr(trainer.Trainer, "eval_batch", stale_eval)
    observations = _fails("apr-pretrain-eval-methodology", "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-002")
    assert observations["after_vs_recomputed"] > 0.5


def test_leaky_split_is_caught(monkeypatch):
    original = data.split_documents

    def leaky(documents, *, val_fraction, seed):
        train, held_out = original(documents, val_fraction=val_fraction, seed=seed)
        return train, held_out + train[:3]
    monkeypatch.setattr(data, "split_documents", leaky)
    _fails("apr-pretrain-eval-methodology", "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-004")


def test_eval_computing_another_quantity_is_caught(monkeypatch):
    original = trainer.Trainer.eval_batch
    monkeypatch.setattr(trainer.Trainer, "eval_batch", lambda self, batch: original(self, batch) / 1500)
    _fails("apr-pretrain-eval-methodology", "FALSIFY-APR-PRETRAIN-EVAL-METHODOLOGY-005")


# ---- init ---------------------------------------------------------------------------------------

def test_silent_random_fallback_is_caught(monkeypatch):
    original = checkpoint.init_model

    def lenient(*, config=None, weights=None, **kwargs):
        return original(config=config or "tiny", weights=weights or "random", **kwargs)
    monkeypatch.setattr(checkpoint, "init_model", lenient)
    observations = _fails("apr-pretrain-init", "FALSIFY-APR-PRETRAIN-INIT-CUDA-002")
    assert observations["accepted_cases"] >= 2


def test_encoders_mapped_by_name_are_caught(monkeypatch):
    monkeypatch.setattr(runtime_config, "ENCODER_MODEL_TYPES", frozenset())
    monkeypatch.setattr(runtime_config, "_is_encoder_architecture", lambda architecture: False)
    _fails("apr-pretrain-init", "FALSIFY-APR-PRETRAIN-INIT-CUDA-003")


# ---- training backend ---------------------------------------------------------------------------

def test_changed_preset_is_caught(monkeypatch):
    presets = dict(runtime_config.PRESETS)
    presets["llama-370m"] = presets["llama-370m"].replace(tie_word_embeddings=True)
    monkeypatch.setattr(runtime_config, "PRESETS", presets)
    _fails("gpu-training-backend", "FALSIFY-INV-ARCH-370M-001")


def test_overflowing_training_loss_is_caught(monkeypatch):
    original = kernels.rms_norm
    monkeypatch.setattr(kernels, "rms_norm", lambda x, w, eps: original(x, w, eps) * float("inf"))
    _fails("gpu-training-backend", "FALSIFY-INV-TRAIN-007")


def test_post_clip_grad_norm_is_caught(monkeypatch):
    original = trainer.global_grad_norm

    def after_clipping(gradients):
        norm = original(gradients)
        return torch.clamp(norm, max=0.5)
    monkeypatch.setattr(trainer, "global_grad_norm", after_clipping)
    _fails("gpu-training-backend", "FALSIFY-INV-TRAIN-008")


def test_per_tensor_grad_norm_is_caught(monkeypatch):
    monkeypatch.setattr(trainer, "global_grad_norm",
                        lambda gradients: torch.stack([torch.linalg.vector_norm(g.float()) for g in gradients]).max())
    _fails("gpu-training-backend", "FALSIFY-INV-TRAIN-008")


def test_unseeded_initialisation_is_caught(monkeypatch):
    import os

    original = runtime_model.init_weights
    monkeypatch.setattr(checkpoint, "init_weights",
                        lambda model, seed: original(model, int.from_bytes(os.urandom(4), "little")))
    _fails("gpu-training-backend", "FALSIFY-INV-TRAIN-003")


# ---- fine-tuning from a checkpoint ---------------------------------------------------------------

def test_finetune_starting_from_random_init_is_caught(monkeypatch):
    original = checkpoint.load

    def forgets_weights(directory, **kwargs):
        model = original(directory, **kwargs)
        runtime_model.init_weights(model, 0)
        return model
    monkeypatch.setattr(checkpoint, "load", forgets_weights)
    observations = _fails("apr-pretrain-init-finetune", "FALSIFY-APR-PRETRAIN-INIT-FINETUNE-001")
    assert observations["first_val_loss"] > 0.9 * math.log(512)


def test_finetune_with_frozen_weights_is_caught(monkeypatch):
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda self, closure=None: None)
    _fails("apr-pretrain-init-finetune", "FALSIFY-APR-PRETRAIN-INIT-FINETUNE-002")


# ---- resume (checked, not yet bound by a contract) ------------------------------------------------

def test_checkpoint_resume_round_trip_is_exact():
    from pvlab.falsifiers.training import checkpoint_resume

    observations = checkpoint_resume(device="cpu")
    assert observations["max_param_diff"] == 0 and observations["digest_equal"] == 1
    assert observations["step_after_resume"] == observations["steps_before"]


def test_checkpoint_resume_losing_optimizer_state_is_seen(monkeypatch):
    from pvlab.falsifiers.training import checkpoint_resume

    monkeypatch.setattr(trainer.Trainer, "_load_optimizer_state", lambda self, file: None)
    observations = checkpoint_resume(device="cpu")
    assert observations["max_param_diff"] > 0 and observations["digest_equal"] == 0
