"""Gates at the runtime's borders read what they are given faithfully: the parity gate judges
every probe position, and a config.json written by transformers is read as transformers reads it.

Oracles: the per-position cosine written in float64 in the check (the gate's documented
statistic, "cosine below PARITY_MIN_COSINE at any position"), and transformers' own config
objects (Qwen2Config / LlamaConfig saved with save_pretrained) for the config reader.
"""

from __future__ import annotations

import tempfile

import torch

from . import fixtures
from ._util import rtol_atol, torch_device


def parity_gate_judges_every_position(*, device: str, position: int = 7, tolerance: dict | None = None) -> dict:
    """parity.place on a copy of the trained tiny model, gated: once as it is (must be accepted)
    and once with the candidate's logits at one probe position replaced by their negation (one
    diverging position among 32: must be refused). The gate's reported min_cosine is compared
    with the float64 per-position minimum computed here from the same two logit tensors.

    Observations: clean_refused, perturbed_refused, min_cosine_abs_diff (perturbed run),
    oracle_min_cosine, cosine_atol (the contract's float32 atol)."""
    from pvlab.runtime import parity
    from pvlab.runtime.errors import ParityGateError

    dev = torch_device(device)
    seen = []

    def run(perturb: bool):
        model = fixtures.fresh_copy(fixtures.model("tiny-trained", "cpu", "reference"))
        calls = []

        def hook(module, inputs, output):
            calls.append(1)
            if perturb and len(calls) == 2:     # the first forward is the CPU reference, the second the candidate
                output = output.clone()
                output[:, position] = -output[:, position]
            seen.append(output.detach().to("cpu", torch.float64))
            return output

        model.lm_head.register_forward_hook(hook)
        try:
            placed = parity.place(model, dev, "fast", gate=True)
            return 0, placed.parity_report
        except ParityGateError:
            return 1, None

    clean_refused, _ = run(False)
    seen.clear()
    perturbed_refused, report = run(True)
    reference, candidate = seen[0].flatten(0, -2), seen[1].flatten(0, -2)
    oracle = float(((reference * candidate).sum(-1) / (reference.norm(dim=-1) * candidate.norm(dim=-1))).min())
    reported = report.min_cosine if report is not None else _reported_min_cosine(seen)
    return {"clean_refused": clean_refused, "perturbed_refused": perturbed_refused,
            "min_cosine_abs_diff": abs(reported - oracle), "oracle_min_cosine": oracle,
            "cosine_atol": rtol_atol(tolerance, "float32")[1]}


def _reported_min_cosine(seen) -> float:
    """A refused model has no report object: recompute what the gate saw through its own function."""
    from pvlab.runtime import parity

    return parity.compare_logits(seen[0].float(), seen[1].float(), device="probe", path="fast").min_cosine


def transformers_config_read_faithfully(*, device: str) -> dict:
    """Configs saved by transformers' save_pretrained (a Qwen2 with rope_theta 1e6 and eps 1e-5,
    a Llama with rope_theta 5e5, attention bias and an untied head) are read by
    runtime.config.ModelConfig.from_json_file; every field the forward depends on must equal
    transformers' own attribute (rope_theta through its rope_parameters).

    Observations: configs, field_mismatches, mismatched (the first few 'config.field' names)."""
    from transformers import LlamaConfig, Qwen2Config

    from pvlab.runtime.config import ModelConfig

    torch_device(device)
    built = [
        Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=256, rope_theta=1_000_000.0, rms_norm_eps=1e-5,
                    tie_word_embeddings=True),
        LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=1, max_position_embeddings=256, rope_theta=500_000.0, rms_norm_eps=1e-5,
                    attention_bias=True, tie_word_embeddings=False),
    ]
    mismatched = []
    for hf in built:
        with tempfile.TemporaryDirectory(prefix="pv-config-") as directory:
            hf.save_pretrained(directory)
            ours = ModelConfig.from_json_file(f"{directory}/config.json")
        theta = (getattr(hf, "rope_parameters", None) or {}).get("rope_theta", getattr(hf, "rope_theta", None))
        expected = {"rope_theta": theta, "rms_norm_eps": hf.rms_norm_eps, "num_key_value_heads": hf.num_key_value_heads,
                    "num_attention_heads": hf.num_attention_heads, "hidden_size": hf.hidden_size,
                    "intermediate_size": hf.intermediate_size, "tie_word_embeddings": hf.tie_word_embeddings,
                    "attention_head_dim": getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads,
                    "max_position_embeddings": hf.max_position_embeddings, "vocab_size": hf.vocab_size,
                    "qkv_bias": True if hf.model_type == "qwen2" else hf.attention_bias}
        mismatched += [f"{hf.model_type}.{field}" for field, value in expected.items() if getattr(ours, field) != value]
    return {"configs": len(built), "field_mismatches": len(mismatched), "mismatched": ",".join(mismatched[:5])}
