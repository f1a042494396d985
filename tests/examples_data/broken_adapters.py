"""Adapters an adopter might get wrong, each around nanotrainer's own (tests/test_examples.py
puts this file into the adopted project as nanotrainer_checks/broken_adapters.py). pv must
answer each with a visible ERROR naming the adapter and the capability, never a pass and never
a traceback."""

from __future__ import annotations

import torch

from nanotrainer_checks.adapter import NanoTrainerAdapter
from pvpack.protocol import LOAD, LOGITS


class _Wrapped:
    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):
        return getattr(self.model, name)


class _NoLogits:
    """A model object written from scratch that never implemented logits()."""

    def __init__(self, model):
        self.evaluate = model.evaluate


class NoLogitsAdapter(NanoTrainerAdapter):
    def load(self, checkpoint, **kwargs):
        return _NoLogits(super().load(checkpoint, **kwargs))


class ClaimsLogitsAdapter(NoLogitsAdapter):
    """Declares the capability it does not implement."""

    capabilities = frozenset({LOAD, LOGITS})


class _WrongShape(_Wrapped):
    def logits(self, inputs):
        return self.model.logits(inputs)[:, -1]          # (B, V): only the last position


class WrongShapeAdapter(NanoTrainerAdapter):
    def load(self, checkpoint, **kwargs):
        return _WrongShape(super().load(checkpoint, **kwargs))


class _WrongDtype(_Wrapped):
    def logits(self, inputs):
        return self.model.logits(inputs).argmax(-1, keepdim=True).expand(-1, -1, 64)   # int64 ids


class WrongDtypeAdapter(NanoTrainerAdapter):
    def load(self, checkpoint, **kwargs):
        return _WrongDtype(super().load(checkpoint, **kwargs))


class RaisingAdapter(NanoTrainerAdapter):
    def load(self, checkpoint, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


class NoLoadAdapter:
    """Not derived from RuntimeAdapter, and no load() at all."""

    paths = ("reference",)
