"""Model initialisation refuses half-specified or wrong-family inputs instead of guessing.

Each case calls the runtime's public entry points (runtime.init_model, runtime.load) with one
deliberately bad input; a case counts as rejected only if the runtime raises its own input
error (runtime.errors.RuntimeInputError) of the expected kind — silently succeeding, or
crashing with an unrelated exception (a TypeError, a torch error after weights were read),
counts as not rejected.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from . import fixtures
from ._util import torch_device


def _attempt(action, expected: tuple[type, ...]) -> tuple[bool, str]:
    try:
        action()
    except expected as error:
        return True, f"{type(error).__name__}: {error}"
    except Exception as error:  # noqa: BLE001 - the wrong kind of failure is not a clean rejection
        return False, f"unexpected {type(error).__name__}: {error}"
    return False, "accepted"


def unpaired_arguments_rejected(*, device: str, checkpoint: str = "tiny-trained") -> dict:
    """Cases: init_model(config=...) without weights; init_model(weights=file) without config;
    init_model() with neither; load(dir) whose config.json is missing (weights without an
    architecture); load(dir) whose weights are missing (an architecture without weights).

    Observations: cases, rejected_cases, accepted_cases (silently built a model),
    wrongly_failed_cases (failed, but not with the runtime's input error)."""
    from pvlab.runtime import checkpoint as runtime_checkpoint
    from pvlab.runtime.errors import CheckpointError, ConfigError, UnpairedArgumentsError

    torch_device(device)
    source = fixtures.checkpoint_dir(checkpoint)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="pv-unpaired-") as tmp:
        tmp_path = Path(tmp)
        weights_only = tmp_path / "weights-only"
        weights_only.mkdir()
        (weights_only / "model.safetensors").write_bytes((source / "model.safetensors").read_bytes())
        config_only = tmp_path / "config-only"
        config_only.mkdir()
        (config_only / "config.json").write_text((source / "config.json").read_text())
        unpaired = (UnpairedArgumentsError,)
        outcomes.append(_attempt(lambda: runtime_checkpoint.init_model(config="tiny", device=device), unpaired))
        outcomes.append(_attempt(lambda: runtime_checkpoint.init_model(
            weights=str(weights_only / "model.safetensors"), device=device), unpaired))
        outcomes.append(_attempt(lambda: runtime_checkpoint.init_model(device=device), unpaired))
        outcomes.append(_attempt(lambda: runtime_checkpoint.load(weights_only, device=device),
                                 (UnpairedArgumentsError, CheckpointError, ConfigError)))
        outcomes.append(_attempt(lambda: runtime_checkpoint.load(config_only, device=device),
                                 (UnpairedArgumentsError, CheckpointError)))
    rejected = sum(1 for ok, _ in outcomes if ok)
    accepted = sum(1 for ok, why in outcomes if not ok and why == "accepted")
    return {"cases": len(outcomes), "rejected_cases": rejected, "accepted_cases": accepted,
            "wrongly_failed_cases": len(outcomes) - rejected - accepted}


# Encoder (and encoder-decoder) configs as transformers writes them, trimmed to what matters.
ENCODERS = {
    "bert": {"architectures": ["BertForMaskedLM"], "model_type": "bert", "vocab_size": 512, "hidden_size": 64,
             "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 192,
             "max_position_embeddings": 256, "type_vocab_size": 2, "hidden_act": "gelu"},
    "roberta": {"architectures": ["RobertaModel"], "model_type": "roberta", "vocab_size": 512, "hidden_size": 64,
                "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 192,
                "max_position_embeddings": 258, "hidden_act": "gelu"},
    "t5": {"architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "vocab_size": 512, "d_model": 64,
           "num_layers": 2, "num_heads": 4, "d_ff": 192},
    # A decoder model_type whose architectures name an encoder: the architecture decides.
    "qwen2-labelled-bert": {"architectures": ["BertModel"], "model_type": "qwen2", "vocab_size": 512,
                            "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                            "num_key_value_heads": 2, "intermediate_size": 192, "max_position_embeddings": 256},
}
ENCODER_TENSORS = ("bert.embeddings.word_embeddings.weight", "bert.encoder.layer.0.attention.self.query.weight",
                   "bert.encoder.layer.0.attention.self.query.bias", "cls.predictions.bias")


def encoder_rejected(*, device: str) -> dict:
    """A checkpoint directory per encoder config, whose model.safetensors is deliberately corrupt
    (garbage bytes): a loader that rejects the architecture first raises
    UnsupportedArchitectureError; one that reads weights first fails on the file instead (not a
    rejection of the encoder). Also runtime.init_model(config=<encoder dict>, weights="random").

    Observations: cases (directories + dicts), rejected_cases (UnsupportedArchitectureError),
    weights_read_first (failed on the corrupt weights), accepted_cases."""
    from pvlab.runtime import checkpoint as runtime_checkpoint
    from pvlab.runtime.errors import CheckpointError, UnsupportedArchitectureError

    torch_device(device)
    outcomes = []
    weights_first = 0
    with tempfile.TemporaryDirectory(prefix="pv-encoder-") as tmp:
        for name, config in ENCODERS.items():
            directory = Path(tmp) / name
            directory.mkdir()
            (directory / "config.json").write_text(json.dumps(config))
            header = json.dumps({n: {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}
                                 for n in ENCODER_TENSORS}).encode()
            (directory / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\x00" * 7)
            ok, why = _attempt(lambda: runtime_checkpoint.load(directory, device=device),
                               (UnsupportedArchitectureError,))
            weights_first += int(why.startswith(f"unexpected {CheckpointError.__name__}"))
            outcomes.append((ok, why))
            outcomes.append(_attempt(lambda: runtime_checkpoint.init_model(config=dict(config), weights="random",
                                                                         device=device),
                                     (UnsupportedArchitectureError,)))
    rejected = sum(1 for ok, _ in outcomes if ok)
    return {"cases": len(outcomes), "rejected_cases": rejected, "weights_read_first": weights_first,
            "accepted_cases": sum(1 for ok, why in outcomes if not ok and why == "accepted")}
