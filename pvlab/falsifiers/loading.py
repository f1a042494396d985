"""How weights, configs and builds enter and leave the runtime, read against what its docstrings
and docs publish. `pv mutate` over pvlab/runtime (docs/mutants.md, issue #26) found these
promises read by no falsifier: init_model's three weight sources and two config forms, the error
that names an unexpected tensor, atomic writes that fail, the transformers config a checkpoint
carries, what identifies a cached build, and the compile mode a user asks for.

Oracles, each outside the code under test: the source model's own logits (a loaded copy must
give them bit for bit on the CPU), safetensors' writer, transformers' own config classes and
Qwen/Qwen2-0.5B's published config.json, the recipe table of docs/gpu.md written out here, and
torch.nn.Module.compile observed through a stand-in that records its arguments. A crash counts
against the runtime (as a wrong outcome), never as an error of the check.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch

from ._util import generator

# Qwen/Qwen2-0.5B's config.json on the Hugging Face hub: the keys a transformers config written
# by the runtime for the qwen2-0.5b preset must carry with these values.
QWEN2_05B_PUBLISHED = {"model_type": "qwen2", "hidden_act": "silu", "use_cache": True, "use_sliding_window": False,
                       "tie_word_embeddings": True, "rms_norm_eps": 1e-06, "attention_dropout": 0.0,
                       "num_key_value_heads": 2, "rope_theta": 1000000.0}

# docs/gpu.md, "Production-scale subject": the stdlib subjects' recipe as published.
STDLIB_RECIPE_PUBLISHED = {"steps": 1000, "batch_size": 8, "seq_len": 1024, "lr": 6e-4, "min_lr": 6e-5,
                           "warmup_steps": 100, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "grad_clip": 1.0,
                           "tokenizer_vocab_size": 32000, "bias_init_std": 1.0, "corpus": "stdlib"}


def _small_config():
    from pvlab.runtime.config import ModelConfig

    return ModelConfig(model_type="qwen2", vocab_size=61, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32, rope_theta=10000.0,
                       rms_norm_eps=1e-6, tie_word_embeddings=False, qkv_bias=True, bos_token_id=0, eos_token_id=0,
                       initializer_range=0.3)


def weights_from_every_source(*, device: str, seed: int = 0) -> dict:
    """init_model gives the source model back, logits equal bit for bit, from each documented
    source: a {name: tensor} dict in float32 and in float64, a .safetensors file, with the config
    as a ModelConfig, a config.json path or the directory holding it. A dict with one tensor too
    many is refused with a CheckpointError naming that tensor; a model built from random weights
    has no tokenizer (its `tokenizer` attribute is None, as CausalLM documents).

    Observations: sources, wrong_loads (a source that raised or gave other logits),
    extra_tensor_named (1 when the refusal names the extra tensor), random_tokenizer_none."""
    from safetensors.torch import save_file

    from pvlab.runtime import checkpoint
    from pvlab.runtime.errors import CheckpointError

    config = _small_config()
    source = checkpoint.init_model(config=config, weights="random", seed=seed, device="cpu", parity_gate=False)
    ids = torch.randint(0, config.vocab_size, (1, 7), generator=generator(seed))
    with torch.no_grad():
        want = source(ids)
    tensors = checkpoint.model_tensors(source)
    wrong = 0
    with tempfile.TemporaryDirectory(prefix="pv-loading-") as tmp:
        directory = Path(tmp)
        save_file(tensors, str(directory / "weights.safetensors"))
        (directory / "config.json").write_text(json.dumps(config.to_hf_dict()))
        sources = [(config, tensors), (config, {k: v.double() for k, v in tensors.items()}),
                   (config, directory / "weights.safetensors"), (str(directory / "config.json"), tensors),
                   (directory, directory / "weights.safetensors")]
        for config_source, weights in sources:
            try:
                loaded = checkpoint.init_model(config=config_source, weights=weights, device="cpu", parity_gate=False)
                with torch.no_grad():
                    wrong += int(not torch.equal(loaded(ids), want))
            except Exception:  # noqa: BLE001 - a documented source that cannot load is a wrong load
                wrong += 1
    extra_named = 0
    try:
        checkpoint.init_model(config=config, weights={**tensors, "model.extra_probe.weight": torch.zeros(2)},
                              device="cpu", parity_gate=False)
    except CheckpointError as error:
        extra_named = int("model.extra_probe.weight" in str(error))
    except Exception:  # noqa: BLE001 - another error does not name the tensor
        pass
    return {"sources": len(sources), "wrong_loads": wrong, "extra_tensor_named": extra_named,
            "random_tokenizer_none": int(getattr(source, "tokenizer", "missing") is None)}


def atomic_writes_fail_cleanly(*, device: str) -> dict:
    """runtime.atomic: a write into directories that do not exist yet creates them; a writer that
    fails part-way raises its own error to the caller, leaves the file it was replacing as it was,
    and leaves no temporary file beside it.

    Observations: nested_written, error_raised, old_content_kept, leftovers."""
    from pvlab.runtime import atomic

    with tempfile.TemporaryDirectory(prefix="pv-atomic-") as tmp:
        root = Path(tmp)
        nested = root / "a" / "b" / "c.bin"
        try:
            atomic.write_bytes(nested, b"payload")
            nested_written = int(nested.read_bytes() == b"payload")
        except Exception:  # noqa: BLE001 - refusing a fresh directory is a failed write
            nested_written = 0
        target = root / "kept.txt"
        target.write_text("old")

        def failing_writer(temporary: Path) -> None:
            temporary.write_text("half of the new")
            raise ValueError("the writer failed part-way")

        error_raised = 0
        try:
            atomic.write_with(target, failing_writer)
        except ValueError:
            error_raised = 1
        except Exception:  # noqa: BLE001 - another error is not the writer's
            pass
        leftovers = sorted(p.name for p in root.iterdir() if p.name not in {"a", "kept.txt"})
        return {"nested_written": nested_written, "error_raised": error_raised,
                "old_content_kept": int(target.read_text() == "old"), "leftovers": len(leftovers)}


def transformers_config_as_published(*, device: str) -> dict:
    """The transformers config the runtime writes for the qwen2-0.5b preset carries Qwen/Qwen2-0.5B's
    published values (use_cache, the sliding-window switch, the activation...), and a transformers
    config that names no rope theta reads as transformers' own default for that architecture
    (LlamaConfig() and Qwen2Config(): 10000.0), not as a missing value.

    Observations: published_keys, mismatched_keys, default_theta_wrong."""
    from transformers import LlamaConfig, Qwen2Config

    from pvlab.runtime.config import PRESETS, ModelConfig

    try:
        written = PRESETS["qwen2-0.5b"].to_hf_dict()
    except Exception:  # noqa: BLE001 - a config that cannot be written carries none of the values
        written = {}
    mismatched = sum(written.get(key, "absent") != value for key, value in QWEN2_05B_PUBLISHED.items())
    wrong = 0
    for preset, defaults in (("llama-370m", LlamaConfig()), ("tiny", Qwen2Config())):
        expected = float(defaults.rope_parameters["rope_theta"])
        hf = {key: value for key, value in PRESETS[preset].to_hf_dict().items()
              if key not in {"rope_theta", "rope_parameters"}}
        try:
            theta = ModelConfig.from_hf_dict(hf, source="check").rope_theta
            wrong += int(not isinstance(theta, float) or theta != expected)
        except Exception:  # noqa: BLE001 - refusing a config transformers reads is wrong
            wrong += 1
    return {"published_keys": len(QWEN2_05B_PUBLISHED), "mismatched_keys": mismatched, "default_theta_wrong": wrong}


def build_identity_as_documented(*, device: str) -> dict:
    """What names a cached build: code_fingerprint ignores docstrings (a reworded docstring in the
    sources that shape a checkpoint keeps the fingerprint; a changed constant changes it), and the
    stdlib subjects' recipe is the one docs/gpu.md publishes (1,000 steps of 8 x 1,024 tokens, lr
    6e-4 with 100 warmup steps to 6e-5, BPE of 32,000, biases from N(0, 1), ...).

    Observations: docstring_changes_fingerprint, code_change_kept_fingerprint, recipe_mismatches."""
    import importlib

    from pvlab.runtime import subjects

    pretrain = importlib.import_module("pvlab.runtime.pretrain")  # the package re-exports the function
    sources = Path(pretrain.__file__).parent
    with tempfile.TemporaryDirectory(prefix="pv-fingerprint-") as tmp:
        copy = Path(tmp)
        for name in pretrain._SOURCES_THAT_SHAPE_A_CHECKPOINT:
            shutil.copy(sources / name, copy / name)
        original = pretrain.code_fingerprint(copy)
        text = (copy / "data.py").read_text(encoding="utf-8")
        first_quote = text.index('"""') + 3
        (copy / "data.py").write_text(text[:first_quote] + "Reworded. " + text[first_quote:], encoding="utf-8")
        after_docstring = pretrain.code_fingerprint(copy)
        (copy / "data.py").write_text(text + "\nCHANGED_CONSTANT = 1\n", encoding="utf-8")
        after_code = pretrain.code_fingerprint(copy)
    recipe = subjects.STDLIB_RECIPE
    mismatches = sum(getattr(recipe, key) != value for key, value in STDLIB_RECIPE_PUBLISHED.items())
    return {"docstring_changes_fingerprint": int(after_docstring != original),
            "code_change_kept_fingerprint": int(after_code == original), "recipe_mismatches": mismatches}


def compile_mode_reaches_torch(*, device: str) -> dict:
    """trainer.compile_module hands torch.compile the mode asked for: no mode for None (torch's
    default mode, with the runtime's inductor options), the name itself and nothing else for every
    other entry of COMPILE_MODES (torch.compile takes no options beside a mode). Observed with a
    stand-in for torch.nn.Module.compile on one module (nothing is compiled).

    Observations: modes, wrong_calls."""
    from pvlab.runtime import trainer

    calls: list[dict] = []

    class Recorded(torch.nn.Linear):
        def compile(self, *args, **kwargs):  # noqa: A003 - the method under observation
            calls.append(dict(kwargs, _positional=len(args)))

    module = Recorded(2, 2)
    wrong = 0
    for mode in trainer.COMPILE_MODES:
        calls.clear()
        try:
            trainer.compile_module(module, mode)
        except Exception:  # noqa: BLE001
            wrong += 1
            continue
        if mode is None:
            wrong += int(len(calls) != 1 or set(calls[0]) != {"_positional", "options"} or calls[0]["_positional"] != 0)
        else:
            wrong += int(calls != [{"_positional": 0, "mode": mode}])
    return {"modes": len(trainer.COMPILE_MODES), "wrong_calls": wrong}
