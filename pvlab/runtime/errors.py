"""Errors the runtime raises for bad input, as opposed to bugs in the runtime itself.

Every error a user can cause — a corrupt file, an unknown architecture, an empty corpus, a prompt
that does not fit — is a `RuntimeInputError`. The CLI catches exactly this class, prints the
message (which names the offending file, tensor or argument) and exits non-zero without a
traceback. Anything else escaping is a defect in the runtime and keeps its traceback.
"""

from __future__ import annotations


class RuntimeInputError(Exception):
    """Base class: the input to the runtime is wrong, and the message says which input."""


class CheckpointError(RuntimeInputError):
    """A checkpoint directory or weight file is missing, unreadable, corrupt, or does not match
    its config (missing, extra or mis-shaped tensors)."""


class ConfigError(RuntimeInputError):
    """A model config is malformed, internally inconsistent, or describes an unknown model_type."""


class UnsupportedArchitectureError(ConfigError):
    """The config describes a real architecture that this runtime does not implement
    (an encoder such as BERT, a sliding-window variant, a scaled RoPE, ...)."""


class ArgumentError(RuntimeInputError):
    """An argument has a value the runtime cannot use (unknown execution path, negative
    temperature, ...)."""


class UnpairedArgumentsError(ArgumentError):
    """An architecture was given without weights, or weights without an architecture."""


class DataError(RuntimeInputError):
    """The corpus or a batch cannot be used: no documents, sequences too short, overlapping splits."""


class GenerationError(RuntimeInputError):
    """A generation request cannot be served (empty prompt, bad temperature, ...)."""


class PromptTooLongError(GenerationError):
    """The prompt (plus the requested new tokens) does not fit in the model's context window."""


class DeviceError(RuntimeInputError):
    """The requested device is not available (for example --device cuda on a machine without a GPU)."""


class ParityGateError(RuntimeInputError):
    """The model, as placed on the requested device and execution path, disagrees with the fp32
    CPU reference on a probe input. The input that is refused is the (weights, device, path)
    combination the caller asked for: running it would produce silently wrong results."""


__all__ = [
    "RuntimeInputError",
    "CheckpointError",
    "ConfigError",
    "UnsupportedArchitectureError",
    "ArgumentError",
    "UnpairedArgumentsError",
    "DataError",
    "GenerationError",
    "PromptTooLongError",
    "DeviceError",
    "ParityGateError",
]
