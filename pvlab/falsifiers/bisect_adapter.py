"""How `pv bisect` drives this repo's runtime: load a backend, encode a prompt, list the ops.

Named in pyproject.toml as `[tool.pv] bisect_adapter`. pv itself knows nothing of torch
modules; this adapter names the ops in execution order and where to read each activation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pvlab import runtime
from pvlab.runtime import errors

# Errors that mean "bad input" (a missing checkpoint, no GPU): pv prints them without a traceback.
INPUT_ERRORS = (errors.RuntimeInputError,)

_PATH_DTYPE = {"reference": "float32", "fast": "bfloat16"}


def resolve_checkpoint(checkpoint: str) -> Path:
    """A checkpoint directory, or the name of one the runtime's zoo builds (tiny-trained)."""
    from pvlab.runtime import zoo

    named = {"tiny-trained": zoo.tiny_trained, "tiny-random": zoo.tiny_random}
    if checkpoint in named:
        return Path(named[checkpoint]())
    return Path(checkpoint)


def load(checkpoint: str, *, device: str, path: str, dtype: str | None) -> Any:
    if dtype is not None and path != "reference":
        raise errors.ArgumentError(f"a dtype ({dtype}) can only be forced on the reference path; "
                                   f"the {path} path chooses its own")
    from pvlab.runtime.checkpoint import load as load_checkpoint

    model = load_checkpoint(resolve_checkpoint(checkpoint), device=device, path=path, parity_gate=False)
    if dtype is not None:
        model.to(getattr(torch, dtype))
    model.eval()
    return model


def encode(model: Any, prompt: str) -> torch.Tensor:
    if model.tokenizer is None:
        raise errors.CheckpointError(f"{model.checkpoint_dir}: no tokenizer.json; cannot encode the prompt")
    ids = model.tokenizer.encode(prompt).ids
    if not ids:
        raise errors.ArgumentError("the prompt encodes to no tokens")
    return torch.tensor([ids], dtype=torch.long, device=model.device)                    # (1, T)


def ops(model: Any) -> list[tuple[str, torch.nn.Module, str]]:
    """(op name, module, which side of the module holds the activation), in execution order."""
    named = [("embedding", model.model.embed_tokens, "output")]
    for i, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        named += [
            (f"layer{i}.input_norm", layer.input_layernorm, "output"),
            (f"layer{i}.q", attn.q_proj, "output"),
            (f"layer{i}.k", attn.k_proj, "output"),
            (f"layer{i}.v", attn.v_proj, "output"),
            (f"layer{i}.attention", attn.o_proj, "input"),  # softmax(QK^T)V, before the output projection
            (f"layer{i}.o", attn.o_proj, "output"),
            (f"layer{i}.post_norm", layer.post_attention_layernorm, "output"),
            (f"layer{i}.mlp", layer.mlp, "output"),
        ]
    named += [("final_norm", model.model.norm, "output"), ("logits", model.lm_head, "output")]
    return named


@torch.no_grad()
def run(model: Any, inputs: torch.Tensor) -> None:
    model(inputs)


def compute_dtype(path: str, dtype: str | None) -> str:
    return dtype or _PATH_DTYPE.get(path, "float32")
