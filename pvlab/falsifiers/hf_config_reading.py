"""A Hugging Face config.json is read as transformers reads it, and its end-of-sequence id stops
generation.

The runtime turns a checkpoint's config.json into a ModelConfig (runtime.config.ModelConfig
.from_hf_dict / from_json_file). A field read wrongly (a default used where the file says
otherwise, an id dropped) gives a model that loads and runs but computes or stops differently
from the checkpoint it was trained as. docs/runtime.md ("Model") documents the one
place where the runtime deliberately reads a field differently from transformers: a config whose
eos_token_id is a list (Llama 3: [128001, 128009]; some Qwen2 Instruct configs) is held as its
*first* listed id, and generation stops there, while transformers keeps the whole list.

Oracle, independent of the runtime's config reader: transformers' own config class for the
model_type (what AutoConfig dispatches to, PretrainedConfig.from_dict) reading the same dict, and
for the bias flags the transformers attention and MLP modules built from that config on the meta
device (whether their q/k/v, o_proj and MLP projections carry a bias). The dicts are written here
in transformers' keys. For the eos behaviour end to end, the oracle is the runtime's own greedy
run without any eos id, read as a plain token list (which token comes at step k): a config whose
eos id is that token must stop exactly there.
"""

from __future__ import annotations

import importlib
import json
import tempfile
from pathlib import Path

from ._util import torch_device

# Realistic config.json dicts, as the checkpoints write them (sizes included; no model is built).
QWEN2_05B = {  # Qwen/Qwen2-0.5B: one eos id, tied head, Q/K/V biases implied by the model type
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
    "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 131072,
    "max_window_layers": 24, "num_attention_heads": 14, "num_hidden_layers": 24,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936}
QWEN2_7B_INSTRUCT = {  # a Qwen2-7B-Instruct-like config listing two eos ids, untied head
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "bos_token_id": 151643,
    "eos_token_id": [151645, 151643], "hidden_act": "silu", "hidden_size": 3584,
    "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 32768,
    "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 152064}
LLAMA3_8B_INSTRUCT = {  # Meta-Llama-3-8B-Instruct-like: eos as a list, untied, no biases
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": [128001, 128009],
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 8192, "mlp_bias": False, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": None, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 128256}
LLAMA_NULL_IDS = {  # no bos/eos (null), attention and MLP biases, explicit head_dim, rope_parameters,
    # tie_word_embeddings / rms_norm_eps / num_key_value_heads absent (the defaults decide)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": True,
    "mlp_bias": True, "bos_token_id": None, "eos_token_id": None, "hidden_size": 768,
    "head_dim": 128, "initializer_range": 0.01, "intermediate_size": 2048,
    "max_position_embeddings": 4096, "num_attention_heads": 8, "num_hidden_layers": 12,
    "rope_parameters": {"rope_type": "default", "rope_theta": 250000.0}, "vocab_size": 32000}

# Tiny configs that are built and run: same keys, a vocabulary of 96. Their eos field is filled
# in by the check from the model's own greedy tokens: 'single' (one id), 'list' (that id first,
# then one the model never produces), 'null' (no eos: decoding runs to max_new_tokens).
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 96,
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 64, "rope_theta": 500000.0,
        "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "initializer_range": 0.5,
        "bos_token_id": 1, "hidden_act": "silu"}
EOS_SHAPES = ("single", "list", "null")
PROMPT, NEW_TOKENS, STOP_STEP = [1, 17, 42, 5, 63], 12, 4


def _first_listed(value):
    """The runtime's documented rule for an eos (or bos) id: a list is held as its first id, an
    empty list as none; an int or null as it is."""
    if isinstance(value, list):
        return value[0] if value else None
    return value


def _oracle(hf: dict) -> dict:
    """Every field the runtime reads, as transformers reads the same dict."""
    import torch
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING[hf["model_type"]].from_dict(dict(hf))
    modeling = importlib.import_module(f"transformers.models.{hf['model_type']}.modeling_{hf['model_type']}")
    prefix = {"qwen2": "Qwen2", "llama": "Llama"}[hf["model_type"]]
    with torch.device("meta"):
        attention = getattr(modeling, f"{prefix}Attention")(config, 0)
        mlp = getattr(modeling, f"{prefix}MLP")(config)
    rope = getattr(config, "rope_parameters", None) or {}
    return {"model_type": config.model_type, "vocab_size": config.vocab_size,
            "hidden_size": config.hidden_size, "intermediate_size": config.intermediate_size,
            "num_hidden_layers": config.num_hidden_layers, "num_attention_heads": config.num_attention_heads,
            "num_key_value_heads": config.num_key_value_heads,
            "attention_head_dim": attention.head_dim,
            "max_position_embeddings": config.max_position_embeddings,
            "rope_theta": float(rope.get("rope_theta", getattr(config, "rope_theta", None))),
            "rms_norm_eps": config.rms_norm_eps, "tie_word_embeddings": bool(config.tie_word_embeddings),
            "qkv_bias": attention.q_proj.bias is not None and attention.k_proj.bias is not None
            and attention.v_proj.bias is not None,
            "o_proj_bias": attention.o_proj.bias is not None, "mlp_bias": mlp.gate_proj.bias is not None,
            "initializer_range": config.initializer_range,
            "bos_token_id": _first_listed(config.bos_token_id)}


def _runtime_fields(config) -> dict:
    return {"model_type": config.model_type, "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
            "intermediate_size": config.intermediate_size, "num_hidden_layers": config.num_hidden_layers,
            "num_attention_heads": config.num_attention_heads, "num_key_value_heads": config.num_key_value_heads,
            "attention_head_dim": config.attention_head_dim,
            "max_position_embeddings": config.max_position_embeddings, "rope_theta": float(config.rope_theta),
            "rms_norm_eps": config.rms_norm_eps, "tie_word_embeddings": config.tie_word_embeddings,
            "qkv_bias": config.qkv_bias, "o_proj_bias": config.o_proj_bias, "mlp_bias": config.mlp_bias,
            "initializer_range": config.initializer_range, "bos_token_id": config.bos_token_id}


def _read(hf: dict, directory: Path, name: str):
    """The runtime's reading of `hf`, written as a config.json file (the path runtime.load takes)."""
    config_module = importlib.import_module("pvlab.runtime.config")      # at call time: planted bugs reach it
    path = directory / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(hf), encoding="utf-8")
    return config_module.ModelConfig.from_json_file(path)


def config_read_as_transformers(*, device: str, seed: int = 0) -> dict:
    """Four realistic config.json dicts (Qwen2-0.5B: one eos id, tied; a Qwen2-7B-Instruct-like
    and a Llama-3-8B-Instruct-like one listing two eos ids, untied, rope_theta 1e6 / 5e5; a Llama
    with null bos/eos, attention and MLP biases, explicit head_dim, rope_parameters and absent
    defaults) and three tiny Llama configs (eos: one id, a list, null) are written as config.json
    and read by the runtime (ModelConfig.from_json_file); every field it reads must equal what
    transformers' config class for the model_type (PretrainedConfig.from_dict) and the
    transformers attention/MLP modules built from it say. The eos id must follow the runtime's
    documented rule: transformers' value, a list held as its first id.

    End to end: each tiny config's model (weights from `seed`) decodes greedily from a fixed
    prompt through runtime.generate.generate with eos_token_id=model.config.eos_token_id (as
    generate_text does); with the eos id set to the token it greedily emits at step 4 (first
    occurrence k), single and list must return exactly that run's first k+1 tokens with
    stopped_on_eos, and null must run to max_new_tokens without stopping.

    Observations: configs, field_mismatches (fields differing from transformers, over all
    configs), eos_mismatches (eos ids read against the rule, plus generations that stop
    elsewhere), generations, mismatched (the first eight differences, joined by "; ": observations are scalars)."""
    torch_device(device)
    checkpoint = importlib.import_module("pvlab.runtime.checkpoint")
    generate = importlib.import_module("pvlab.runtime.generate").generate

    field_mismatches = eos_mismatches = configs = generations = 0
    mismatched: list[str] = []

    def compare(name: str, hf: dict):
        nonlocal field_mismatches, eos_mismatches, configs
        read = _read(hf, directory, name)
        expected, got = _oracle(hf), _runtime_fields(read)
        for key in expected:
            if expected[key] != got[key]:
                field_mismatches += 1
                mismatched.append(f"{name}.{key}: runtime {got[key]!r}, transformers {expected[key]!r}")
        from transformers import CONFIG_MAPPING

        eos_expected = _first_listed(CONFIG_MAPPING[hf["model_type"]].from_dict(dict(hf)).eos_token_id)
        if read.eos_token_id != eos_expected:
            eos_mismatches += 1
            mismatched.append(f"{name}.eos_token_id: runtime {read.eos_token_id!r}, rule {eos_expected!r}")
        configs += 1
        return read

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        for name, hf in (("qwen2-0.5b", QWEN2_05B), ("qwen2-7b-instruct", QWEN2_7B_INSTRUCT),
                         ("llama-3-8b-instruct", LLAMA3_8B_INSTRUCT), ("llama-null-ids", LLAMA_NULL_IDS)):
            compare(name, hf)

        free_model = checkpoint.init_model(config={**TINY, "eos_token_id": None}, weights="random", seed=seed)
        free = generate(free_model, PROMPT, max_new_tokens=NEW_TOKENS).new_ids
        eos = free[STOP_STEP]
        k = free.index(eos)
        never = next(t for t in range(TINY["vocab_size"]) if t not in free)
        for shape in EOS_SHAPES:
            value = {"single": eos, "list": [eos, never], "null": None}[shape]
            read = compare(f"tiny-{shape}", {**TINY, "eos_token_id": value})
            model = checkpoint.init_model(config=read, weights="random", seed=seed)
            result = generate(model, PROMPT, max_new_tokens=NEW_TOKENS, eos_token_id=model.config.eos_token_id)
            want = (free, False) if shape == "null" else (free[:k + 1], True)
            if (result.new_ids, result.stopped_on_eos) != want:
                eos_mismatches += 1
                mismatched.append(f"tiny-{shape}: generated {len(result.new_ids)} tokens "
                                  f"(stopped_on_eos={result.stopped_on_eos}), expected {len(want[0])}")
            generations += 1
    return {"configs": configs, "field_mismatches": field_mismatches, "eos_mismatches": eos_mismatches,
            # Observations are scalars (the ledger's rule): the first mismatches as one string.
            "generations": generations, "stop_index": k, "mismatched": "; ".join(mismatched[:8])}
