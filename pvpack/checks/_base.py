"""What every pack check shares: the `uses` declaration, loading a subject's model, float64 maths.

    @uses(LOGITS, EVALUATE)
    def my_check(*, runtime, device: str, subject: str, batches: int = 2) -> dict: ...

`uses` declares the capabilities a check drives (its docstring and the contract say which
architecture it assumes). The check receives `runtime` from pv's harness (the adapter that
`[tool.pv] runtimes` names for the falsifier's runtime) and sees it as the validating
`pvpack.protocol.Runtime`. An adapter that declares `capabilities` (a set of names) and lacks
one the check uses is skipped before any work, naming it; otherwise the first call of a missing
capability raises CapabilityMissing (SKIP) there.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import torch

from .. import registry
from ..protocol import CAPABILITIES, IGNORE_INDEX, RANDOM, REFERENCE, Batch, CapabilityMissing, Model, Runtime
from ..subjects import Subject, resolve


def uses(*capabilities: str) -> Callable[[Callable[..., dict]], Callable[..., dict]]:
    unknown = [c for c in capabilities if c not in CAPABILITIES]
    if unknown:
        raise ValueError(f"unknown capabilities {unknown}; known: {', '.join(CAPABILITIES)}")

    def decorate(function: Callable[..., dict]) -> Callable[..., dict]:
        @functools.wraps(function)
        def check(*, runtime: Any, **kwargs: Any) -> dict:
            facade = registry.runtime(runtime)
            declared = getattr(facade.adapter, "capabilities", None)
            if declared is not None:
                for capability in capabilities:
                    if capability not in declared:
                        raise CapabilityMissing(capability, facade.name, "not among the adapter's capabilities")
            return function(runtime=facade, **kwargs)

        check.capabilities = tuple(capabilities)  # type: ignore[attr-defined]
        return check

    return decorate


def torch_device(device: str) -> torch.device:
    """The torch.device of a falsifier device; DeviceUnavailable (SKIP) for an absent GPU."""
    if device == "cpu":
        return torch.device("cpu")
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            from pv.harness import DeviceUnavailable

            raise DeviceUnavailable(f"{device}: no CUDA GPU on this machine (torch {torch.__version__})")
        return torch.device(device)
    raise ValueError(f"unknown device {device!r} (expected cpu or cuda)")


def load(runtime: Runtime, subject: Subject, device: str, path: str = REFERENCE, **kwargs: Any) -> Model:
    """The subject's model on `device`/`path`: its weights, or (a random subject) the runtime's
    own initialisation of its architecture."""
    torch_device(device)
    if subject.is_random:
        kwargs.setdefault("init", RANDOM)
        kwargs.setdefault("seed", subject.seed)
    return runtime.load(subject.checkpoint, device=device, path=path, **kwargs)


def subject_of(subject: str) -> Subject:
    return resolve(subject)


def hf_weight_files(subject: Subject, check: str) -> list:
    """The checkpoint's model*.safetensors, which the checks that read tensors by their Hugging
    Face names open themselves; none is a clear error (a checkpoint in the runtime's own format
    is fine for every other check: they only hand its directory to the adapter's load)."""
    files = sorted(subject.checkpoint.glob("model*.safetensors"))
    if not files:
        raise RuntimeError(f"{check} reads the checkpoint's weights by Hugging Face tensor names from "
                           f"model*.safetensors, and {subject.checkpoint} has none (a checkpoint in your "
                           "runtime's own format): this check does not apply to it; drop the falsifier "
                           "(docs/adopting.md, 'Point pv's falsifiers at your runtime', step 5)")
    return files


def next_token_nll(logits: torch.Tensor, targets: torch.Tensor) -> tuple[float, int]:
    """(sum of -log softmax(logits)[target], scored tokens) in float64 over targets that are not
    IGNORE_INDEX — the definition, written here, independent of every runtime's loss code."""
    total, count = 0.0, 0
    for row in range(logits.shape[0]):   # one row at a time: float64 (T, V) stays small at large V
        keep = targets[row] != IGNORE_INDEX
        if not bool(keep.any()):
            continue
        rows = logits[row].to(torch.float64)[keep]
        chosen = targets[row][keep]
        total += float((torch.logsumexp(rows, dim=-1) - rows.gather(1, chosen[:, None]).squeeze(1)).sum())
        count += int(keep.sum())
    return total, count


def independent_loss(model: Model, batches: list[Batch]) -> float:
    """Token-weighted mean next-token NLL of `batches` from the model's logits, in float64."""
    total, count = 0.0, 0
    for batch in batches:
        t, c = next_token_nll(model.logits(batch.inputs), batch.targets)
        total, count = total + t, count + c
    if count == 0:
        raise ValueError("no scored target tokens in the batches")
    return total / count


def ln(value: float) -> float:
    return math.log(value)


def max_relative_diff(got: torch.Tensor, expected: torch.Tensor) -> float:
    """max |got - expected| over max |expected|: one scale for a whole logits tensor."""
    return float((got - expected).abs().max() / expected.abs().max())


def checkpoint_copy(source, out, *, tensors: dict | None = None, config: dict | None = None):
    """A copy of checkpoint directory `source` at `out` whose files are links to the originals,
    except the weights (one model.safetensors written from `tensors`) and config.json (written
    from `config`) where those are given: the checks that alter a checkpoint alter a copy."""
    import json

    from safetensors.torch import save_file

    out.mkdir()
    for item in source.iterdir():
        replaced = (config is not None and item.name == "config.json") or (tensors is not None and (
            item.name.endswith(".safetensors") or item.name == "model.safetensors.index.json"))
        if item.is_file() and not replaced:
            (out / item.name).symlink_to(item)
    if tensors is not None:
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"),
                  metadata={"format": "pt"})
    if config is not None:
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return out
