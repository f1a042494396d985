"""pvpack.protocol: an adapter that breaks the protocol is an ERROR naming the adapter and the
capability; a runtime that lacks a capability is a SKIP naming it — through pv's harness, as a
generated test runs a pack check."""

from __future__ import annotations

import pytest
import torch

from pv import harness, runtimes
from pvpack.adapters.transformers import TransformersAdapter, TransformersModel
from pvpack.checks import forward
from pvpack.protocol import (LOGITS, AdapterError, Batch, CapabilityMissing, Runtime, RuntimeAdapter, RuntimeModel)

import pack_tiny


class _Wrapped(RuntimeAdapter):
    """The transformers adapter with one thing broken (set per test through `model_class`)."""

    model_class: type = TransformersModel

    def load(self, checkpoint, **kwargs):
        real = TransformersAdapter().load(checkpoint, **kwargs)
        model = self.model_class.__new__(self.model_class)
        model.__dict__.update(real.__dict__)
        return model


class WrongShape(TransformersModel):
    def logits(self, inputs):
        return super().logits(inputs)[:, :-1]          # one position short


class WrongDtype(TransformersModel):
    def logits(self, inputs):
        return super().logits(inputs).argmax(-1)       # token ids, not logits


class Raises(TransformersModel):
    def logits(self, inputs):
        raise RuntimeError("kernel exploded")


class Lacks(RuntimeModel):
    """Inherits logits from RuntimeModel: the runtime lacks the capability (CapabilityMissing)."""


class NoMethod:
    """Claims nothing, has no logits method at all: a broken adapter, not a missing capability."""


def _adapter(model_class):
    return type(f"Adapter{model_class.__name__}", (_Wrapped,), {"model_class": model_class})


@pytest.fixture
def subject_dir(tmp_path):
    return pack_tiny.subject(tmp_path)


@pytest.fixture
def registered(monkeypatch):
    """Register adapters under names, as [tool.pv] runtimes would."""
    table = {}

    def register(name, factory):
        table[name] = f"{__name__}:{factory}"
        runtimes.configure(table)
        return name

    yield register
    runtimes.configure(None)


def _run(runtime_name, subject_dir):
    harness.reset()
    try:
        harness.falsify(forward.forward_sanity, params={"batches": 1}, prediction="nonfinite_logits == 0",
                        device="cpu", falsifier="FALSIFY-T-001", subject=str(subject_dir), runtime=runtime_name)
    except BaseException:  # noqa: BLE001 - the outcome says which
        pass
    return harness.take_outcome()


AdapterWrongShape = _adapter(WrongShape)
AdapterWrongDtype = _adapter(WrongDtype)
AdapterRaises = _adapter(Raises)
AdapterLacks = _adapter(Lacks)
AdapterNoMethod = _adapter(NoMethod)


@pytest.mark.parametrize("factory, problem", [
    ("AdapterWrongShape", "expected (B, T, V)"),
    ("AdapterWrongDtype", "not a floating tensor"),
    ("AdapterRaises", "raised RuntimeError: kernel exploded"),
    ("AdapterNoMethod", "has no method logits()"),
])
def test_a_broken_adapter_is_an_error_naming_the_adapter_and_the_capability(factory, problem, registered,
                                                                            subject_dir):
    name = registered("broken", factory)
    outcome = _run(name, subject_dir)
    assert outcome.verdict == "ERROR"
    assert "adapter 'broken'" in outcome.message and "capability 'logits'" in outcome.message
    assert problem in outcome.message
    assert outcome.runtime == "broken"


def test_a_missing_capability_is_a_skip_naming_it(registered, subject_dir):
    outcome = _run(registered("lacking", "AdapterLacks"), subject_dir)
    assert outcome.verdict == "SKIP"
    assert "capability missing" in outcome.message and "'logits'" in outcome.message and "lacking" in outcome.message


def test_declared_capabilities_skip_before_any_work(registered, subject_dir):
    class Declares(TransformersAdapter):
        capabilities = frozenset({"load"})

    globals()["AdapterDeclaresLoadOnly"] = Declares
    outcome = _run(registered("declares", "AdapterDeclaresLoadOnly"), subject_dir)
    assert outcome.verdict == "SKIP" and "'logits'" in outcome.message


def test_a_sound_adapter_passes_and_its_record_names_runtime_and_version(registered, subject_dir):
    globals()["AdapterSound"] = TransformersAdapter
    outcome = _run(registered("hf", "AdapterSound"), subject_dir)
    assert outcome.verdict == "PASS", outcome.message
    assert outcome.runtime == "hf" and outcome.runtime_version.startswith("transformers ")
    record = outcome.to_record(time_utc="2026-11-24T00:00:00Z")
    assert record.runtime == "hf" and record.runtime_version == outcome.runtime_version


def test_an_unknown_runtime_is_an_error(registered, subject_dir):
    registered("known", "AdapterLacks")
    outcome = _run("unknown", subject_dir)
    assert outcome.verdict == "ERROR" and "unknown runtime 'unknown'" in outcome.message


def test_the_facade_checks_every_answer():
    class Model(RuntimeModel):
        def loss(self, batch):
            return "low"

        def generate(self, prompt, max_new_tokens):
            return list(range(max_new_tokens + 1))

        def state(self):
            return {"w": [1.0]}

    class Adapter(RuntimeAdapter):
        def load(self, checkpoint, **kwargs):
            return Model()

    model = Runtime(Adapter(), "toy").load("x", device="cpu")
    batch = Batch(torch.zeros(1, 2, dtype=torch.int64), torch.zeros(1, 2, dtype=torch.int64))
    for call, capability in ((lambda: model.loss(batch), "loss"), (lambda: model.generate([1], 2), "generate"),
                             (model.state, "state")):
        with pytest.raises(AdapterError, match=f"adapter 'toy', capability '{capability}'"):
            call()
    with pytest.raises(CapabilityMissing, match="'logits'"):
        model.logits(batch.inputs)
    with pytest.raises(CapabilityMissing, match="fast_path"):
        Runtime(Adapter(), "toy").load("x", device="cpu", path="fast")
    assert LOGITS in forward.forward_sanity.capabilities


def test_a_batch_refuses_what_is_not_token_ids():
    with pytest.raises(ValueError, match="int64"):
        Batch(torch.zeros(1, 2), torch.zeros(1, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="differ in shape"):
        Batch(torch.zeros(1, 2, dtype=torch.int64), torch.zeros(1, 3, dtype=torch.int64))


def test_save_accepts_a_checkpoint_in_the_runtimes_own_format(tmp_path):
    """A runtime's own format (a torch.save file) is a checkpoint the facade accepts; what it
    refuses, naming the fix, is a save without the config.json the pack reads, or without weights."""
    class Model(RuntimeModel):
        files: dict = {"config.json": '{"vocab_size": 8}', "weights.pt": "x"}

        def save(self, directory):
            directory.mkdir(parents=True)
            for name, text in self.files.items():
                (directory / name).write_text(text)

    class NoConfig(Model):
        files = {"weights.pt": "x"}

    class OnlyConfig(Model):
        files = {"config.json": '{"vocab_size": 8}'}

    def adapter(model_class):
        return type("Adapter", (RuntimeAdapter,), {"load": lambda self, checkpoint, **kwargs: model_class()})()

    assert Runtime(adapter(Model), "own").load("x", device="cpu").save(tmp_path / "a") == tmp_path / "a"
    with pytest.raises(AdapterError, match="capability 'save': .* wrote no config.json: write one beside"):
        Runtime(adapter(NoConfig), "own").load("x", device="cpu").save(tmp_path / "b")
    with pytest.raises(AdapterError, match="capability 'save': .* wrote only config.json, no weights"):
        Runtime(adapter(OnlyConfig), "own").load("x", device="cpu").save(tmp_path / "c")
