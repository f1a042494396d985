"""A tied checkpoint's stored output head: tolerated when redundant, refused when it conflicts.

docs/runtime.md ("runtime.load") documents what a checkpoint with tie_word_embeddings=true may
hold besides its tensors: "an lm_head.weight in a tied checkpoint if it is byte-identical to the
embedding" is tolerated and listed as `ignored`; "otherwise refused". A loader that treats every
tolerated name as ignorable without checking that it is redundant loads such a file without a
word and answers with the embedding as its head — not with the head the file was trained with.

Oracle, independent of the runtime's writer, its tensor list and its config writer: the
checkpoint directories are written here, config.json as a plain dict in transformers' keys and
model.safetensors with safetensors.torch.save_file under HF names spelled out here, each tensor
drawn from a seed; the expected head is the tensor the check wrote, compared bit for bit.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from ._util import generator, torch_device

VOCAB, HIDDEN, INNER, HEADS, KV_HEADS = 64, 16, 24, 2, 1
HEAD_DIM = HIDDEN // HEADS


def _hf_config(tied: bool) -> dict:
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": VOCAB,
            "hidden_size": HIDDEN, "intermediate_size": INNER, "num_hidden_layers": 1,
            "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "max_position_embeddings": 32,
            "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": tied,
            "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32"}


def _body(seed: int) -> dict[str, torch.Tensor]:
    """Every tensor of a 1-layer Qwen2 (Q/K/V biases) but the head, under its HF name."""
    g = generator(seed)
    kv = KV_HEADS * HEAD_DIM
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN),
              "model.layers.0.input_layernorm.weight": (HIDDEN,),
              "model.layers.0.self_attn.q_proj.weight": (HIDDEN, HIDDEN),
              "model.layers.0.self_attn.q_proj.bias": (HIDDEN,),
              "model.layers.0.self_attn.k_proj.weight": (kv, HIDDEN),
              "model.layers.0.self_attn.k_proj.bias": (kv,),
              "model.layers.0.self_attn.v_proj.weight": (kv, HIDDEN),
              "model.layers.0.self_attn.v_proj.bias": (kv,),
              "model.layers.0.self_attn.o_proj.weight": (HIDDEN, HIDDEN),
              "model.layers.0.post_attention_layernorm.weight": (HIDDEN,),
              "model.layers.0.mlp.gate_proj.weight": (INNER, HIDDEN),
              "model.layers.0.mlp.up_proj.weight": (INNER, HIDDEN),
              "model.layers.0.mlp.down_proj.weight": (HIDDEN, INNER),
              "model.norm.weight": (HIDDEN,)}
    return {name: torch.randn(shape, generator=g) * 0.2 for name, shape in shapes.items()}


def _one_ulp_up(t: torch.Tensor) -> torch.Tensor:
    """t with its element [3, 5] moved to the adjacent representable value of t's dtype (its bit
    pattern plus one: one ulp further from zero)."""
    bits = {torch.float32: torch.int32, torch.bfloat16: torch.int16}[t.dtype]
    moved = t.clone().view(bits)
    moved[3, 5] += 1
    return moved.view(t.dtype)


# (head stored in the file, tied, file dtype, expected outcome): 'embedding' (accepted; the head is
# the embedding), 'own head' (accepted; the head is the file's lm_head.weight) or 'refused' (a
# CheckpointError naming lm_head.weight).
CASES = (("none", True, "float32", "embedding"),
         ("copy", True, "float32", "embedding"),
         ("copy", True, "bfloat16", "embedding"),
         ("independent", True, "float32", "refused"),
         ("one ulp", True, "float32", "refused"),
         ("one ulp", True, "bfloat16", "refused"),
         ("independent", False, "float32", "own head"))


def tied_checkpoint_head_as_documented(*, device: str, seed: int = 0) -> dict:
    """runtime.load of 7 checkpoints written here (1-layer Qwen2, reference path, no gate):
    tied without lm_head.weight; tied with an exact copy of the embedding (float32 and bfloat16
    files): accepted, `populate_report.ignored` lists lm_head.weight exactly when the file holds
    one, and the head is the embedding Parameter holding the file's embedding bit for bit; tied
    with an independent head, or one whose single element is one ulp away from the embedding
    (float32 and bfloat16): refused with CheckpointError naming lm_head.weight; untied with its
    own head: accepted, the head is the file's lm_head.weight and a tensor of its own.

    Observations: cases, wrong_outcomes, conflicting_accepted (refusals expected, the file
    loaded), tolerated_refused (a redundant or absent head refused), wrong_heads (accepted, but
    the head or the ignored list is not the documented one), unnamed_refusals (refused with
    another error type, or without naming lm_head.weight)."""
    from safetensors.torch import save_file

    from pvlab.runtime import checkpoint
    from pvlab.runtime.errors import CheckpointError

    torch_device(device)  # the loader's decision is made on the CPU whatever the device
    conflicting_accepted = tolerated_refused = wrong_heads = unnamed_refusals = 0
    with tempfile.TemporaryDirectory(prefix="pv-tied-head-") as tmp:
        for number, (stored, tied, dtype_name, expected) in enumerate(CASES):
            dtype = getattr(torch, dtype_name)
            tensors = {name: t.to(dtype) for name, t in _body(seed + 100 * number).items()}
            embedding = tensors["model.embed_tokens.weight"]
            if stored == "copy":
                tensors["lm_head.weight"] = embedding.clone()
            elif stored == "independent":
                tensors["lm_head.weight"] = (torch.randn(embedding.shape, generator=generator(seed + 7)) * 0.2).to(dtype)
            elif stored == "one ulp":
                tensors["lm_head.weight"] = _one_ulp_up(embedding)
            directory = Path(tmp) / f"case{number}"
            directory.mkdir()
            (directory / "config.json").write_text(json.dumps(_hf_config(tied)), encoding="utf-8")
            save_file({k: v.contiguous() for k, v in tensors.items()}, str(directory / "model.safetensors"),
                      metadata={"format": "pt"})
            try:
                model = checkpoint.load(directory, device="cpu", path="reference", parity_gate=False)
            except CheckpointError as error:
                if expected != "refused":
                    tolerated_refused += 1
                elif "lm_head.weight" not in str(error):
                    unnamed_refusals += 1
                continue
            except Exception:  # noqa: BLE001 - another error type is not the documented refusal
                if expected == "refused":
                    unnamed_refusals += 1
                else:
                    tolerated_refused += 1
                continue
            if expected == "refused":
                conflicting_accepted += 1
                continue
            head = model.lm_head.weight.detach().cpu()
            same_parameter = model.lm_head.weight is model.model.embed_tokens.weight
            ignored = tuple(model.populate_report.ignored) if model.populate_report is not None else None
            if expected == "embedding":
                good = (same_parameter and torch.equal(head, embedding.float())
                        and ignored == (("lm_head.weight",) if stored != "none" else ()))
            else:
                good = (not same_parameter and torch.equal(head, tensors["lm_head.weight"].float())
                        and torch.equal(model.model.embed_tokens.weight.detach().cpu(), embedding.float()))
            wrong_heads += int(not good)
    wrong = conflicting_accepted + tolerated_refused + wrong_heads + unnamed_refusals
    return {"cases": len(CASES), "wrong_outcomes": wrong, "conflicting_accepted": conflicting_accepted,
            "tolerated_refused": tolerated_refused, "wrong_heads": wrong_heads, "unnamed_refusals": unnamed_refusals}
