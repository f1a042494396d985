"""Planted bugs of runtime.config: presets and the reading of HF config dicts.

How to add one: docs/mutants.md. Each generator plants on entry and restores in `finally`
(through `plant`)."""

from __future__ import annotations

from pv.mutation import mutant

from .planting import plant, swap, swap_item


@mutant("llama_370m_preset_tied_head")
def llama_370m_preset_tied_head():
    """The llama-370m preset ties its output head to the embedding (tie_word_embeddings=True):
    32.8M parameters vanish and the preset no longer describes a 370M model.

    Imitates a preset edit that silently changes the architecture (INV-ARCH-370M-001). Seam:
    runtime.config.PRESETS["llama-370m"], which runtime.config.preset() reads at call time."""
    from pvlab.runtime import config

    changed = config.PRESETS["llama-370m"].replace(tie_word_embeddings=True)
    with plant("llama_370m_preset_tied_head", swap_item(config.PRESETS, "llama-370m", changed,
                                                        "pvlab.runtime.config.PRESETS")):
        yield


@mutant("encoder_read_as_decoder")
def encoder_read_as_decoder():
    """An encoder (or encoder-decoder) config is not refused: its keys are mapped onto a Qwen2
    decoder's (hidden size, layers, heads, vocabulary), and the loader goes on to read — and a
    trainer to train — the encoder's weights as if they were a decoder's.

    Imitates the seed defect "the loader maps encoder weights onto a decoder by name".
    Seam: runtime.config.ModelConfig.from_hf_dict (every config.json and config dict)."""
    from pvlab.runtime.config import ENCODER_MODEL_TYPES, ModelConfig, _is_encoder_architecture

    original = vars(ModelConfig)["from_hf_dict"].__func__

    def from_hf_dict(cls, hf, *, source="config"):
        if isinstance(hf, dict) and (hf.get("model_type") in ENCODER_MODEL_TYPES
                                     or any(_is_encoder_architecture(a) for a in hf.get("architectures") or [])):
            heads = hf.get("num_attention_heads") or hf.get("num_heads")
            hf = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": hf.get("vocab_size"),
                  "hidden_size": hf.get("hidden_size") or hf.get("d_model"),
                  "intermediate_size": hf.get("intermediate_size") or hf.get("d_ff"),
                  "num_hidden_layers": hf.get("num_hidden_layers") or hf.get("num_layers"),
                  "num_attention_heads": heads, "num_key_value_heads": heads,
                  "max_position_embeddings": hf.get("max_position_embeddings") or 512}
        return original(cls, hf, source=source)

    with plant("encoder_read_as_decoder", swap(ModelConfig, "from_hf_dict", classmethod(from_hf_dict))):
        yield



# ---- fourth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Fourth blind batch"; probes in tests/falsifiers/fourth_mutant_probes.py)


@mutant("eos_token_list_read_as_none")
def eos_token_list_read_as_none():
    """A config.json that lists several end-of-sequence ids ("eos_token_id": [128001, 128009],
    as Llama 3 writes it) is read as having no end-of-sequence id at all, instead of its first:
    the model loads and runs, and generation of such a checkpoint never stops at the end of a
    text (generate_text/generate_texts keep decoding to max_new_tokens). A single id is read as
    before.

    Imitates a type guard that keeps only ints (`value if isinstance(value, int) else None`).
    Seam: runtime.config._single_token_id (bos_token_id and eos_token_id in
    ModelConfig.from_hf_dict)."""
    from pvlab.runtime import config

    def _single_token_id(value):
        return value if isinstance(value, int) else None                    # the defect: a list becomes None

    with plant("eos_token_list_read_as_none", swap(config, "_single_token_id", _single_token_id)):
        yield


# ---- sixth blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Sixth blind batch"; probes in tests/falsifiers/sixth_mutant_probes.py)


@mutant("parameter_count_counts_tied_head")
def parameter_count_counts_tied_head():
    """ModelConfig.num_parameters counts a tied output head as parameters of its own: a tied
    model reports vocab_size x hidden_size parameters too many (tiny: 164,416 instead of
    131,648; qwen2-0.5b: 630,167,424 instead of 494,032,768), in runtime.json's results, the
    inspect report and every figure derived from it (tokens per parameter, FLOPs). Untied
    models (llama-370m) are unaffected.

    Imitates the count written as embedding + layers + head, the untied formula, for every
    model. Seam: runtime.config.ModelConfig.num_parameters (wrapped: the head added when tied)."""
    from pvlab.runtime.config import ModelConfig

    original = ModelConfig.num_parameters

    def num_parameters(self):
        count = original(self)
        if self.tie_word_embeddings:
            count += self.vocab_size * self.hidden_size   # the defect: the shared head counted twice
        return count

    with plant("parameter_count_counts_tied_head", swap(ModelConfig, "num_parameters", num_parameters)):
        yield


# ---- seventh blind batch: written from pvlab/runtime alone, before any kill was measured
# (docs/mutants.md, "Seventh blind batch"; probes in tests/falsifiers/seventh_mutant_probes.py)


@mutant("config_json_omits_rms_norm_eps")
def config_json_omits_rms_norm_eps():
    """config.json is written without rms_norm_eps: a reader falls back to its default, 1e-6
    (ModelConfig.from_hf_dict, and transformers' Qwen2Config and LlamaConfig alike). Qwen2
    models (1e-6) round-trip exactly; a Llama with rms_norm_eps 1e-5 (llama-370m) comes back
    with 1e-6 from every checkpoint it saved, so the reloaded model's every norm, and its
    logits, differ from the model that was trained.

    Imitates a field left out of the hand-written config dict, unnoticed because the default
    model family's value equals the reader's default. Seam: runtime.config.ModelConfig.to_hf_dict
    (wrapped: the key removed)."""
    from pvlab.runtime.config import ModelConfig

    original = ModelConfig.to_hf_dict

    def to_hf_dict(self):
        hf = original(self)
        hf.pop("rms_norm_eps", None)   # the defect: the field is never written
        return hf

    with plant("config_json_omits_rms_norm_eps", swap(ModelConfig, "to_hf_dict", to_hf_dict)):
        yield


# ---- eighth blind batch ----
# Written from pvlab/runtime and docs/runtime.md alone, before any kill was measured (docs/mutants.md,
# "Eighth blind batch"; probes in tests/falsifiers/eighth_mutant_probes.py).


@mutant("eos_token_list_reads_last_id")
def eos_token_list_reads_last_id():
    """An eos_token_id (or bos_token_id) given as a list in config.json is held as its LAST id,
    not its first as documented: Llama 3's [128001, 128009] stops generation at 128009, a Qwen2
    Instruct's [151645, 151643] at 151643. A single id (every config this runtime writes) is
    unaffected.

    Imitates picking `value[-1]` ("the chat end-of-turn id is the one that matters") when
    collapsing the list. Quiet: generation still stops at a real end token, just another one.
    Seam: runtime.config._single_token_id."""
    from pvlab.runtime import config

    def _single_token_id(value):
        if isinstance(value, list):
            return value[-1] if value else None   # the defect: last listed id
        return value

    with plant("eos_token_list_reads_last_id", swap(config, "_single_token_id", _single_token_id)):
        yield


# ---- twelfth blind batch ----
# Written from pvlab/runtime and docs/runtime.md alone, before any kill was measured
# (docs/independent-mutants.md, "Twelfth batch"; probes in tests/falsifiers/twelfth_mutant_probes.py).


@mutant("absent_tie_key_reads_tied")
def absent_tie_key_reads_tied():
    """A config.json without a `tie_word_embeddings` key is read as a TIED head, though Qwen2Config
    and LlamaConfig default to untied: an untied checkpoint whose config omits the key (as
    transformers' save_pretrained may when the value is the class default) gets its head replaced
    by the embedding. Configs that state the key (every one this runtime writes) are read right.

    Imitates `hf.get("tie_word_embeddings", True)` ("Qwen2 ties its head", true of the 0.5B
    checkpoint only). Seam: runtime.config.ModelConfig.from_hf_dict."""
    from pvlab.runtime.config import ModelConfig

    original = ModelConfig.from_hf_dict.__func__

    def from_hf_dict(cls, hf, *, source="config"):
        if isinstance(hf, dict) and "tie_word_embeddings" not in hf:
            hf = {**hf, "tie_word_embeddings": True}   # the defect: absent read as tied
        return original(cls, hf, source=source)

    with plant("absent_tie_key_reads_tied", swap(ModelConfig, "from_hf_dict", classmethod(from_hf_dict))):
        yield


@mutant("rope_type_read_from_legacy_key")
def rope_type_read_from_legacy_key():
    """The RoPE variant of a `rope_parameters` object is read from the legacy key `type` instead
    of `rope_type`: a transformers-5 config with scaled RoPE ({"rope_type": "linear", "factor":
    4.0, ...}, or yarn, llama3, dynamic) is taken for default RoPE and run unscaled instead of
    refused. Default configs are unaffected.

    Imitates carrying the legacy rope_scaling key name over to the new object. Seam:
    runtime.config._read_rope_theta."""
    from pvlab.runtime import config
    from pvlab.runtime.errors import ConfigError, UnsupportedArchitectureError

    def _read_rope_theta(hf, source):
        parameters = hf.get("rope_parameters")
        legacy_scaling = hf.get("rope_scaling")
        if legacy_scaling:
            raise UnsupportedArchitectureError(f"{source}: rope_scaling {legacy_scaling} is not supported")
        if parameters is not None:
            if not isinstance(parameters, dict):
                raise ConfigError(f"{source}: rope_parameters must be an object, got {parameters!r}")
            rope_type = parameters.get("type", "default")   # the defect: the legacy key
            if rope_type != "default":
                raise UnsupportedArchitectureError(f"{source}: rope_type {rope_type!r} is not supported (only 'default')")
            theta = parameters.get("rope_theta", hf.get("rope_theta", 10000.0))
            if "rope_theta" in hf and hf["rope_theta"] != theta:
                raise ConfigError(f"{source}: rope_theta {hf['rope_theta']} disagrees with "
                                  f"rope_parameters.rope_theta {theta}")
            return theta
        return hf.get("rope_theta", 10000.0)

    with plant("rope_type_read_from_legacy_key", swap(config, "_read_rope_theta", _read_rope_theta)):
        yield
