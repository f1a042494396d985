"""pvpack.checks.optimizer: each step replayed as the textbook AdamW in float64, on pvlab's
runtime and on transformers (tiny-trained, CPU), and defects of the class reported on
transformers' own optimizer (pvpack.adapters.transformers builds torch.optim.AdamW)."""

from __future__ import annotations

import pytest
import torch

from pvpack.checks import optimizer

CALL = dict(device="cpu", subject="tiny-trained", steps=3, lr=1e-3, min_lr=1e-4, warmup_steps=2, total_steps=10,
            weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8, rtol=2e-3)


def holds(seen: dict) -> bool:
    """FALSIFY-ADAMW-UPDATE-001's prediction."""
    return (seen["update_max_abs_diff"] <= seen["tol"] and seen["mismatched_parameters"] == 0
            and seen["matrices_decayed"] == seen["matrices"] and seen["matrices"] >= 1 and seen["steps"] == 3)


def test_pvlab_decays_matrices_only_and_is_adamw():
    seen = optimizer.adamw_update_matches_textbook(runtime="pvlab", **CALL)
    assert holds(seen), seen
    assert seen["vectors"] > 0 and seen["vectors_decayed"] == 0 and seen["vectors_kept"] > 0   # its policy, found
    assert seen["first_lr"] == pytest.approx(5e-4) and seen["last_lr"] == pytest.approx(1e-3)


def test_transformers_decays_every_parameter_and_is_adamw():
    seen = optimizer.adamw_update_matches_textbook(runtime="transformers", **CALL)
    assert holds(seen), seen
    assert seen["vectors_kept"] == 0 and seen["vectors_decayed"] > 0


def _hf_optimizer(monkeypatch, build):
    """Replace torch.optim.AdamW where the transformers adapter builds its optimizer."""
    from pvpack.adapters import transformers as adapter

    monkeypatch.setattr(adapter.torch.optim, "AdamW", build)


def test_coupled_weight_decay_is_reported(monkeypatch):
    """Adam with L2 (the decay added to the gradient) instead of AdamW: no matrix is found decayed,
    and from the second step the moments of g + wd p explain nothing."""
    _hf_optimizer(monkeypatch, lambda params, **kw: torch.optim.Adam(params, **kw))
    seen = optimizer.adamw_update_matches_textbook(runtime="transformers", **CALL)
    assert not holds(seen) and seen["matrices_decayed"] < seen["matrices"]


def test_eps_inside_the_square_root_is_reported(monkeypatch):
    """A second moment of another shape: eps 1e-3 instead of the documented 1e-8."""
    original = torch.optim.AdamW
    _hf_optimizer(monkeypatch, lambda params, **kw: original(params, **{**kw, "eps": 1e-3}))
    seen = optimizer.adamw_update_matches_textbook(runtime="transformers", **CALL)
    assert not holds(seen) and seen["mismatched_parameters"] > 0


def test_a_learning_rate_off_the_schedule_is_reported(monkeypatch):
    """The warmup ignored: every step at the peak rate (the first step is twice its size)."""
    from pvpack.adapters import transformers as adapter

    monkeypatch.setattr(adapter, "schedule", lambda step, settings: settings.lr)
    seen = optimizer.adamw_update_matches_textbook(runtime="transformers", **CALL)
    assert not holds(seen) and seen["update_max_abs_diff_step"] >= 1


# ---- a declared decay policy (RuntimeAdapter.undecayed_matrices), on a runtime in its own format ----

import own_format_runtime  # noqa: E402

from pvpack.protocol import AdapterError, Runtime  # noqa: E402

# own_format_runtime trains at a constant rate: the documented schedule with no warmup and a decay
# far beyond the three steps is that constant rate
CONSTANT = dict(device="cpu", steps=3, lr=1e-3, min_lr=1e-3, warmup_steps=0, total_steps=10**6, weight_decay=0.1,
                beta1=0.9, beta2=0.95, eps=1e-8, rtol=2e-3)


class ExemptsEmbedding(own_format_runtime.ByteModel):
    """AdamW with the input embedding in a group of its own without weight decay."""

    def __init__(self, net, settings):
        super().__init__(net, settings)
        if settings is not None:
            rest = [p for name, p in net.named_parameters() if name != "tok.weight"]
            self.optimizer = torch.optim.AdamW(
                [{"params": rest}, {"params": [net.tok.weight], "weight_decay": 0.0}], lr=settings.lr,
                betas=tuple(settings.betas), eps=settings.eps, weight_decay=settings.weight_decay)


def _adapter(model_class=own_format_runtime.ByteModel, undecayed=()):
    return type("Adapter", (own_format_runtime.ByteAdapter,),
                {"model_class": model_class, "undecayed_matrices": undecayed})()


@pytest.fixture(scope="module")
def byte_subject(tmp_path_factory):
    return str(own_format_runtime.subject(tmp_path_factory.mktemp("bytelm-adamw")))


def declared_holds(seen: dict) -> bool:
    return (seen["update_max_abs_diff"] <= seen["tol"] and seen["mismatched_parameters"] == 0
            and seen["matrices_policy_mismatch"] == 0 and seen["declared_unknown"] == 0 and seen["matrices"] >= 1)


def test_a_runtime_that_exempts_its_embedding_by_design_holds_its_declaration(byte_subject):
    """The textbook check's `matrices_decayed == matrices` is a false FAIL on it; the declared one holds."""
    exempt = optimizer.adamw_update_matches_declared_decay(
        runtime=_adapter(ExemptsEmbedding, ("tok.weight",)), subject=byte_subject, **CONSTANT)
    assert declared_holds(exempt), exempt
    assert exempt["matrices_decayed"] == exempt["matrices"] - 1 and exempt["matrices_declared_undecayed"] == 1
    assert declared_holds(optimizer.adamw_update_matches_declared_decay(
        runtime=_adapter(), subject=byte_subject, **CONSTANT))   # decays every matrix, declares nothing


@pytest.mark.parametrize("model_class, undecayed, unknown", [
    (ExemptsEmbedding, (), 0),                                       # exempts, declares nothing
    (own_format_runtime.ByteModel, ("tok.weight",), 0),              # declares an exemption it does not make
    (ExemptsEmbedding, ("tok.weights",), 1),                         # a typo exempts nothing
])
def test_a_policy_other_than_the_declared_one_is_reported(byte_subject, model_class, undecayed, unknown):
    seen = optimizer.adamw_update_matches_declared_decay(runtime=_adapter(model_class, undecayed),
                                                         subject=byte_subject, **CONSTANT)
    assert not declared_holds(seen) and seen["mismatched_parameters"] == 0, seen
    assert seen["matrices_policy_mismatch"] == 1 and seen["declared_unknown"] == unknown


def test_a_declaration_that_is_not_names_is_an_error_naming_it():
    with pytest.raises(AdapterError, match="capability 'undecayed_matrices': is str 'tok.weight', not a tuple"):
        Runtime(_adapter(undecayed="tok.weight"), "bytelm").undecayed_matrices()
