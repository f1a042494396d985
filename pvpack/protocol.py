"""The runtime protocol: what the falsifier pack asks of a training runtime, and nothing more.

A runtime is driven through two objects:

- an **adapter** (`RuntimeAdapter`), one per runtime, built by the factory that `[tool.pv]
  runtimes` names (`pvpack.registry`). It loads a model for a checkpoint on a device and an
  execution path, and may tell the documents its own data pipeline splits into train/held-out;
- a **model** (`RuntimeModel`) it returns: logits, a batch's loss, one training step, the
  runtime's own eval loop, the learning rate at a step, named tensors and gradients, saving a
  checkpoint, greedy generation.

Everything crossing the protocol is plain data: token ids and values as CPU torch tensors,
numbers, lists of ints, checkpoint *directories* (the runtime's own format, which its load()
reads, plus a config.json with the `vocab_size` the pack reads). No method hands a module, an
optimizer or a device tensor across, so an adapter may run its runtime in another process (or
language) and ship tensors as safetensors files;
`Batch.save` / `Batch.load` are that format.

**Capabilities.** Each method is one capability (`CAPABILITIES`). An adapter implements those its
runtime has; the base classes raise `CapabilityMissing` for the rest, and so may an adapter for a
combination it cannot do (e.g. `train_step` with `micro_batches > 1` -> GRADIENT_ACCUMULATION).
A check declares what it uses (`pvpack.checks._base.uses`); a missing capability is a visible
SKIP naming it (pv.harness.CapabilityMissing), never a pass.

**Validation.** Checks never call an adapter directly: they call the `Runtime` / `Model`
facades here, which check every answer (type, shape, dtype, finiteness where the protocol
promises it) and turn an adapter's exception into `AdapterError` naming the adapter and the
capability (an ERROR, never a pass, never a bare traceback from deep inside a runtime).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

try:  # the SKIP signal pv's harness knows; a plain named exception without pv
    from pv.harness import CapabilityMissing as _SkipBase
except ImportError:  # pragma: no cover - pv is a dependency; keep the protocol importable alone
    class _SkipBase(Exception):  # type: ignore[no-redef]
        pass

IGNORE_INDEX = -100          # targets with this value are not scored (the field's convention)
REFERENCE, FAST = "reference", "fast"   # execution paths: fp32 explicit math / the runtime's fast one
TRAINED, RANDOM = "trained", "random"   # what load() puts in the weights

# --- capability names (a check's `uses`, a SKIP's message) ------------------------------------
LOAD = "load"
FAST_PATH = "fast_path"                  # load(path=FAST): a second execution path of the same weights
RANDOM_INIT = "random_init"              # load(init=RANDOM): the runtime's own initialisation
LOGITS = "logits"
LOSS = "loss"
TRAIN_STEP = "train_step"
GRADIENT_ACCUMULATION = "gradient_accumulation"   # train_step with TrainSettings.micro_batches > 1
EVALUATE = "evaluate"
LEARNING_RATE = "learning_rate"
STATE = "state"
GRADIENTS = "gradients"
SAVE = "save"
GENERATE = "generate"
DATA_SPLIT = "data_split"
CAPABILITIES = (LOAD, FAST_PATH, RANDOM_INIT, LOGITS, LOSS, TRAIN_STEP, GRADIENT_ACCUMULATION, EVALUATE,
                LEARNING_RATE, STATE, GRADIENTS, SAVE, GENERATE, DATA_SPLIT)


class CapabilityMissing(_SkipBase):
    """The runtime under test lacks a capability the check needs: a SKIP naming it."""

    def __init__(self, capability: str, adapter: str = "", detail: str = ""):
        self.capability, self.adapter = capability, adapter
        who = f"runtime {adapter!r}" if adapter else "the runtime"
        super().__init__(f"{who} lacks capability {capability!r}" + (f": {detail}" if detail else ""))


class AdapterError(RuntimeError):
    """An adapter broke the protocol (raised, or answered with the wrong type/shape/dtype): ERROR."""

    def __init__(self, adapter: str, capability: str, problem: str):
        self.adapter, self.capability = adapter, capability
        super().__init__(f"adapter {adapter!r}, capability {capability!r}: {problem}")


# --- the data that crosses ---------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Batch:
    """A next-token batch: inputs (B, T) int64 token ids; targets (B, T) int64, targets[b, t] the
    token that follows inputs[b, t], IGNORE_INDEX where nothing is scored (padding)."""

    inputs: torch.Tensor
    targets: torch.Tensor

    def __post_init__(self):
        for name in ("inputs", "targets"):
            value = getattr(self, name)
            if not isinstance(value, torch.Tensor) or value.dtype != torch.int64 or value.dim() != 2:
                raise ValueError(f"Batch.{name} must be a (B, T) int64 tensor, got "
                                 f"{_describe(value)}")
        if self.inputs.shape != self.targets.shape:
            raise ValueError(f"Batch: inputs {tuple(self.inputs.shape)} and targets "
                             f"{tuple(self.targets.shape)} differ in shape")

    @property
    def target_tokens(self) -> int:
        return int((self.targets != IGNORE_INDEX).sum())

    def save(self, file: Path) -> None:
        """The batch as a safetensors file (the format a batch crosses a process boundary in)."""
        from safetensors.torch import save_file

        save_file({"inputs": self.inputs.contiguous(), "targets": self.targets.contiguous()}, str(file))

    @classmethod
    def load(cls, file: Path) -> "Batch":
        from safetensors.torch import load_file

        tensors = load_file(str(file))
        return cls(tensors["inputs"], tensors["targets"])


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """How load() prepares a model for training (the runtime's optimizer: AdamW with decoupled
    weight decay; its schedule: linear warmup over `warmup_steps` to `lr`, then cosine decay to
    `min_lr` at `total_steps` — constant `lr` without total_steps). grad_clip <= 0 disables
    clipping. micro_batches > 1: each train_step splits its batch into that many micro-batches
    whose gradients accumulate into one update (GRADIENT_ACCUMULATION). An adapter that cannot
    honour a setting raises CapabilityMissing naming it, never ignores it."""

    lr: float = 1e-3
    warmup_steps: int = 0
    total_steps: int | None = None
    min_lr: float | None = None
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    grad_clip: float = 0.0
    seed: int = 0
    micro_batches: int = 1

    @property
    def floor_lr(self) -> float:
        return self.lr if self.min_lr is None else self.min_lr


# --- what an adapter implements ----------------------------------------------------------------

class RuntimeModel:
    """One loaded model of a runtime. Override the capabilities the runtime has; each default
    raises CapabilityMissing. Tensors returned may live on the model's device; the facade copies
    them to the CPU."""

    def logits(self, inputs: torch.Tensor) -> torch.Tensor:
        """(B, T) int64 token ids -> (B, T, V) floating logits, no gradient, eval mode."""
        raise CapabilityMissing(LOGITS)

    def loss(self, batch: Batch) -> float:
        """The runtime's training loss of `batch` at the current weights, no update: mean
        next-token cross-entropy over the batch's scored targets."""
        raise CapabilityMissing(LOSS)

    def train_step(self, batch: Batch) -> float:
        """One optimizer step on `batch` (TrainSettings given to load); returns the loss the step
        computed (before its update). Requires load(train=...)."""
        raise CapabilityMissing(TRAIN_STEP)

    def evaluate(self, batches: Sequence[Batch]) -> float:
        """The runtime's own eval loop over `batches`: the held-out loss it would report."""
        raise CapabilityMissing(EVALUATE)

    def learning_rate(self, step: int) -> float:
        """The learning rate the runtime's schedule applies at optimizer step `step` (0-based)."""
        raise CapabilityMissing(LEARNING_RATE)

    def state(self) -> Mapping[str, torch.Tensor]:
        """Every tensor the model holds (parameters and persistent buffers), by the name its
        checkpoint gives it (Hugging Face names for a Hugging Face checkpoint, your own names for
        your own format; gradients() must use the same names), as held (device and dtype as the
        runtime keeps them). A copy or the live tensor: checks copy what they keep."""
        raise CapabilityMissing(STATE)

    def gradients(self) -> Mapping[str, torch.Tensor]:
        """By checkpoint name: the gradient of each trainable parameter that the last train_step
        applied (after clipping, when clipping is on)."""
        raise CapabilityMissing(GRADIENTS)

    def save(self, directory: Path) -> None:
        """Write the model's current weights as a checkpoint directory that this runtime's load()
        reads back: its own format (a torch.save file, safetensors under its own names, a Hugging
        Face checkpoint), plus a config.json holding `vocab_size` (the one key the pack reads)."""
        raise CapabilityMissing(SAVE)

    def generate(self, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
        """Greedy decoding through the runtime's own decode loop (its KV cache if it has one):
        the new token ids only, at most max_new_tokens (fewer only at an end-of-sequence token)."""
        raise CapabilityMissing(GENERATE)

    def close(self) -> None:
        """Release what the model holds (GPU memory, a child process). Optional."""


class RuntimeAdapter:
    """A runtime as the pack sees it. `load` is required; `data_split` optional.

    Optional declarations (class attributes an adapter may set):

    - `paths`: the execution paths load() accepts (REFERENCE; a runtime with a fast path lists
      FAST too);
    - `capabilities`: the set of capability names it has (a check needing another is a SKIP
      before any work);
    - `undecayed_matrices`: names (as state() gives them) of the matrices (tensors of two or
      more dimensions) its optimizer leaves undecayed by design, an input embedding say; every
      other matrix is decayed when TrainSettings.weight_decay > 0 (not set: none). Which vectors
      (norm gains, biases) decay is not declared: the runtime's own policy, recorded by the
      AdamW checks, not judged. Read through Runtime.undecayed_matrices().
    """

    #: execution paths load() accepts; a runtime with a fast path lists FAST too
    paths: tuple[str, ...] = (REFERENCE,)

    def version(self) -> str:
        """`<distribution> <version>` of the runtime this adapter drives (records name it)."""
        return "unknown"

    def load(self, checkpoint: Path, *, device: str, path: str = REFERENCE, init: str = TRAINED, seed: int = 0,
             train: TrainSettings | None = None) -> RuntimeModel:
        """A model of the checkpoint's architecture on `device` (cpu, cuda) running `path`, with
        the checkpoint's weights (init=TRAINED) or the runtime's own initialisation seeded by
        `seed` (init=RANDOM), ready to train with `train` (None: inference only)."""
        raise CapabilityMissing(LOAD)

    def data_split(self, subject_data: Path) -> tuple[Sequence[str], Sequence[str]]:
        """(train documents, held-out documents) exactly as the runtime's data pipeline splits the
        corpus that the subject names. `subject_data` is the subject *directory*: read its
        subject.json's "data" entry (what your subject provider passed as
        pvpack.subjects.write(data=...)). Documents are strings; a corpus of token ids joins each
        document's ids into one string (equal documents must give equal strings)."""
        raise CapabilityMissing(DATA_SPLIT)


# --- the validating facades checks call ---------------------------------------------------------

def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {tuple(value.shape)} {str(value.dtype).removeprefix('torch.')} tensor"
    return f"{type(value).__name__} {value!r}"[:200]


class Runtime:
    """An adapter under validation. `name` is the name [tool.pv] runtimes gives it."""

    def __init__(self, adapter: Any, name: str, declared: Any = None):
        self.adapter, self.name = adapter, name
        # the capabilities the adapter declares it has (None: it declares nothing)
        self.declared = getattr(adapter, "capabilities", None) if declared is None else declared

    def _call(self, capability: str, method: str, *args, **kwargs):
        function = getattr(self.adapter, method, None)
        if function is None or not callable(function):
            if self.declared is not None and capability not in self.declared:
                raise CapabilityMissing(capability, self.name, "not among the adapter's capabilities")
            raise AdapterError(self.name, capability, f"the adapter has no method {method}() (an adapter that "
                                                      "lacks the capability says so: its `capabilities` leave it "
                                                      "out, or the method raises CapabilityMissing)")
        try:
            return function(*args, **kwargs)
        except CapabilityMissing as missing:
            raise CapabilityMissing(missing.capability, self.name, str(missing).partition(": ")[2]) from None
        except AdapterError:
            raise
        except Exception as error:  # noqa: BLE001 - any adapter failure is an ERROR naming it
            raise AdapterError(self.name, capability, f"raised {type(error).__name__}: {error}") from error

    def version(self) -> str:
        value = self._call(LOAD, "version") if callable(getattr(self.adapter, "version", None)) else "unknown"
        if not isinstance(value, str):
            raise AdapterError(self.name, "version", f"returned {_describe(value)}, not a string")
        return value

    def undecayed_matrices(self) -> frozenset[str]:
        """The adapter's declared `undecayed_matrices` (none when it declares nothing)."""
        declared = getattr(self.adapter, "undecayed_matrices", ())
        if isinstance(declared, str) or not isinstance(declared, (tuple, list, set, frozenset)) \
                or not all(isinstance(name, str) for name in declared):
            raise AdapterError(self.name, "undecayed_matrices", f"is {_describe(declared)}, not a tuple of "
                                                                "parameter names as state() gives them")
        return frozenset(declared)

    def supports_path(self, path: str) -> bool:
        return path in tuple(getattr(self.adapter, "paths", (REFERENCE,)))

    def load(self, checkpoint: Path, *, device: str, path: str = REFERENCE, init: str = TRAINED, seed: int = 0,
             train: TrainSettings | None = None) -> "Model":
        if path not in (REFERENCE, FAST):
            raise ValueError(f"unknown execution path {path!r} (expected {REFERENCE} or {FAST})")
        if path == FAST and not self.supports_path(FAST):
            raise CapabilityMissing(FAST_PATH, self.name, "the adapter lists no fast path")
        capability = RANDOM_INIT if init == RANDOM else LOAD
        model = self._call(capability, "load", Path(checkpoint), device=device, path=path, init=init, seed=seed,
                           train=train)
        if model is None:
            raise AdapterError(self.name, capability, "load() returned None, not a model")
        return Model(model, self.name, device=device, train=train, declared=self.declared)

    def data_split(self, subject_data: Path) -> tuple[list[str], list[str]]:
        answer = self._call(DATA_SPLIT, "data_split", Path(subject_data))
        if (not isinstance(answer, (tuple, list)) or len(answer) != 2
                or not all(isinstance(side, (list, tuple)) and all(isinstance(d, str) for d in side)
                           for side in answer)):
            raise AdapterError(self.name, DATA_SPLIT, f"returned {_describe(answer)}, not (train documents, "
                                                      "held-out documents) as two lists of strings")
        return list(answer[0]), list(answer[1])


class Model:
    """A loaded model under validation; every answer is checked, tensors come back on the CPU."""

    def __init__(self, model: Any, adapter: str, *, device: str, train: TrainSettings | None, declared: Any = None):
        self.model, self.adapter, self.device, self.train_settings = model, adapter, device, train
        self.declared = declared

    def _call(self, capability: str, method: str, *args, **kwargs):
        return Runtime(self.model, self.adapter, self.declared)._call(capability, method, *args, **kwargs)

    def _number(self, capability: str, value: Any) -> float:
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise AdapterError(self.adapter, capability, f"returned {_describe(value)}, not a number")
        return float(value)

    def logits(self, inputs: torch.Tensor) -> torch.Tensor:
        """(B, T, V) logits on the CPU in their own floating dtype."""
        answer = self._call(LOGITS, "logits", inputs)
        if not isinstance(answer, torch.Tensor) or not answer.is_floating_point():
            raise AdapterError(self.adapter, LOGITS, f"returned {_describe(answer)}, not a floating tensor")
        if answer.dim() != 3 or tuple(answer.shape[:2]) != tuple(inputs.shape):
            raise AdapterError(self.adapter, LOGITS, f"returned {_describe(answer)} for inputs of shape "
                                                     f"{tuple(inputs.shape)}; expected (B, T, V) = "
                                                     f"({inputs.shape[0]}, {inputs.shape[1]}, V)")
        return answer.detach().to("cpu")

    def loss(self, batch: Batch) -> float:
        return self._number(LOSS, self._call(LOSS, "loss", batch))

    def train_step(self, batch: Batch) -> float:
        if self.train_settings is None:
            raise ValueError("train_step on a model loaded without TrainSettings (pass train= to load)")
        if self.train_settings.micro_batches > 1 and self.train_settings.micro_batches > batch.inputs.shape[0]:
            raise ValueError(f"{self.train_settings.micro_batches} micro-batches of a {batch.inputs.shape[0]}-row batch")
        return self._number(TRAIN_STEP, self._call(TRAIN_STEP, "train_step", batch))

    def evaluate(self, batches: Sequence[Batch]) -> float:
        return self._number(EVALUATE, self._call(EVALUATE, "evaluate", list(batches)))

    def learning_rate(self, step: int) -> float:
        return self._number(LEARNING_RATE, self._call(LEARNING_RATE, "learning_rate", step))

    def _tensors(self, capability: str, method: str) -> dict[str, torch.Tensor]:
        answer = self._call(capability, method)
        if not isinstance(answer, Mapping) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                                      for k, v in answer.items()):
            raise AdapterError(self.adapter, capability, f"returned {_describe(answer)}, not a mapping of "
                                                         "checkpoint names to tensors")
        return dict(answer)

    def state(self) -> dict[str, torch.Tensor]:
        """As held (device included): populate coverage looks at where they are."""
        return self._tensors(STATE, "state")

    def gradients(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().to("cpu") for k, v in self._tensors(GRADIENTS, "gradients").items()}

    def save(self, directory: Path) -> Path:
        directory = Path(directory)
        self._call(SAVE, "save", directory)
        # The checkpoint format is the runtime's own (its load reads it back); the pack reads only
        # config.json's vocab_size, so that is all a save must write besides its weights.
        if not (directory / "config.json").is_file():
            raise AdapterError(self.adapter, SAVE, f"save({directory}) wrote no config.json: write one beside your "
                                                   "checkpoint file(s), with the vocab_size the pack reads")
        if not any(item.name != "config.json" for item in directory.iterdir()):
            raise AdapterError(self.adapter, SAVE, f"save({directory}) wrote only config.json, no weights")
        return directory

    def generate(self, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
        answer = self._call(GENERATE, "generate", list(prompt), max_new_tokens)
        if isinstance(answer, torch.Tensor):
            answer = answer.reshape(-1).tolist()
        if not isinstance(answer, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool)
                                                           for t in answer):
            raise AdapterError(self.adapter, GENERATE, f"returned {_describe(answer)}, not a list of token ids")
        if len(answer) > max_new_tokens:
            raise AdapterError(self.adapter, GENERATE, f"returned {len(answer)} tokens for max_new_tokens="
                                                       f"{max_new_tokens} (the new tokens only, please)")
        return list(answer)

    def close(self) -> None:
        close: Callable[[], None] | None = getattr(self.model, "close", None)
        if callable(close):
            close()


def finite(value: float) -> bool:
    return isinstance(value, float) and math.isfinite(value)
