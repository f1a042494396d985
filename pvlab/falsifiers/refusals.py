"""Bad input is refused with the runtime's input error, naming what is wrong.

runtime/errors.py promises that every error a user can cause is a RuntimeInputError whose message
names the offending file, tensor or argument (the CLI prints it without a traceback). `pv mutate`
found the raises of several such refusals removable without any falsifier noticing: nothing fed
the runtime those inputs. The check feeds each one, built here by hand (the oracle: the table of
bad inputs with the error class and the words its message must hold, written from the runtime's
documented refusals, independent of the code that refuses them).
"""

from __future__ import annotations

import json
import shutil
import struct
import tempfile
from pathlib import Path


def _unknown_dtype_file(directory: Path) -> Path:
    """A safetensors file (8-byte little-endian header length, JSON header, data) whose one
    tensor has a dtype no safetensors version defines."""
    header = json.dumps({"w": {"dtype": "X9", "shape": [2], "data_offsets": [0, 8]}}).encode()
    file = directory / "unknown-dtype.safetensors"
    file.write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    return file


def _cases(work: Path):
    """(name, call, expected error class name, words the message must hold — or a predicate
    on the message, where what it must say is more than a few words)."""
    import importlib

    import torch
    from safetensors.torch import load_file, save_file
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    from pvlab.runtime import checkpoint, data, trainer

    from . import fixtures

    generate = importlib.import_module("pvlab.runtime.generate")   # the module: the package re-exports the function

    bin_only = work / "bin-only"
    shutil.copytree(fixtures.checkpoint_dir("tiny-trained"), bin_only)
    (bin_only / checkpoint.WEIGHTS_NAME).unlink()
    (bin_only / "pytorch_model.bin").write_bytes(b"not read: the runtime refuses pickles")

    odd_head = work / "tied-odd-head"     # tied: a redundant lm_head.weight is tolerated only in the embedding's shape
    shutil.copytree(fixtures.checkpoint_dir("tiny-trained"), odd_head)
    tensors = load_file(str(odd_head / checkpoint.WEIGHTS_NAME))
    vocab, hidden = tensors["model.embed_tokens.weight"].shape
    save_file({**tensors, "lm_head.weight": torch.zeros(vocab - 1, hidden)}, str(odd_head / checkpoint.WEIGHTS_NAME))

    model = fixtures.fresh_copy(fixtures.random_model("tiny"))
    vocab = model.config.vocab_size
    saved = trainer.Trainer(model).save(work / "trainer-run")
    (Path(saved) / trainer.OPTIMIZER_STATE_NAME).write_bytes(b"\x00" * 16)

    incomplete = work / "layer-1-missing"  # the 12 tensors of decoder layer 1 taken out of the file
    shutil.copytree(fixtures.checkpoint_dir("tiny-trained"), incomplete)
    kept = load_file(str(incomplete / checkpoint.WEIGHTS_NAME))
    removed = [name for name in kept if name.startswith("model.layers.1.")]
    save_file({name: t for name, t in kept.items() if name not in removed}, str(incomplete / checkpoint.WEIGHTS_NAME))

    def names_ten_and_counts_the_rest(message: str) -> bool:
        """The refusal lists the first ten missing tensors by name and counts the others."""
        listed = sum(f"missing tensor {name}\n" in message + "\n" for name in removed)
        return listed == 10 and message.rstrip().endswith(f"... and {len(removed) - 10} more")

    no_optimizer = Path(trainer.Trainer(model).save(work / "no-optimizer-state"))
    (no_optimizer / trainer.OPTIMIZER_STATE_NAME).unlink()
    bad_state = Path(trainer.Trainer(model).save(work / "bad-trainer-state"))
    (bad_state / trainer.TRAINER_STATE_NAME).write_text("{not json", encoding="utf-8")
    weights_dir = work / "weights-is-a-directory.safetensors"
    weights_dir.mkdir()

    no_end = Tokenizer(WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    unscored = data.LMBatch(inputs=torch.ones(2, 4, dtype=torch.long),
                            targets=torch.full((2, 4), -100, dtype=torch.long))     # IGNORE_INDEX everywhere
    return [
        ("pytorch_model.bin only", lambda: checkpoint.load(bin_only), "CheckpointError", ["pytorch_model.bin"]),
        ("tied checkpoint with a mis-shaped lm_head.weight", lambda: checkpoint.load(odd_head), "PopulateError",
         ["lm_head.weight"]),
        ("unknown safetensors dtype", lambda: checkpoint.read_safetensors_header(_unknown_dtype_file(work)),
         "CheckpointError", ["X9"]),
        ("corrupt optimizer state", lambda: trainer.Trainer.resume(saved), "CheckpointError",
         [trainer.OPTIMIZER_STATE_NAME]),
        ("tokenizer without end-of-text", lambda: data.encode_documents(no_end, ["a a"]), "DataError",
         [data.END_OF_TEXT]),
        ("train step without target tokens", lambda: trainer.Trainer(model).train_step([unscored]),
         "ArgumentError", ["target"]),
        ("evaluation without target tokens", lambda: trainer.Trainer(model).evaluate([unscored]),
         "ArgumentError", ["target"]),
        ("weights path that is a directory", lambda: checkpoint.read_safetensors_header(weights_dir),
         "CheckpointError", [weights_dir.name, "cannot read weights"]),
        ("checkpoint missing twelve tensors", lambda: checkpoint.load(incomplete), "PopulateError",
         names_ten_and_counts_the_rest),
        ("checkpoint directory that does not exist", lambda: checkpoint.inspect_checkpoint(work / "absent"),
         "CheckpointError", ["absent", "does not exist"]),
        ("resume without the optimizer state", lambda: trainer.Trainer.resume(no_optimizer), "CheckpointError",
         [trainer.OPTIMIZER_STATE_NAME, "missing"]),
        ("resume with an unreadable trainer.json", lambda: trainer.Trainer.resume(bad_state), "CheckpointError",
         [trainer.TRAINER_STATE_NAME, "unreadable"]),
        ("split of one distinct document", lambda: data.split_documents(["x = 1\n"] * 3, val_fraction=0.5, seed=0),
         "DataError", ["1 distinct"]),
        ("batch of zero sequences", lambda: data.LMBatch.from_sequences([]), "DataError", ["zero sequences"]),
        ("batched generation without prompts", lambda: generate.generate_batch(model, [], max_new_tokens=1),
         "GenerationError", ["no prompts"]),
        ("batched generation with an id outside the vocabulary",
         lambda: generate.generate_batch(model, [[1, 2], [vocab]], max_new_tokens=1), "GenerationError", ["vocabulary"]),
        ("text generation without a tokenizer", lambda: generate.generate_texts(model, None, ["a"], max_new_tokens=1),
         "GenerationError", ["tokenizer.json"]),
    ]


def _judge(cases) -> list[str]:
    """What went wrong for each case that was not refused as its row says: accepted, another
    error class or message, or a crash (any other exception: a traceback for the user)."""
    from pvlab.runtime.errors import RuntimeInputError

    wrong = []
    for name, call, expected, words in cases:
        try:
            call()
            wrong.append(f"{name}: accepted")
        except RuntimeInputError as error:
            said = words(str(error)) if callable(words) else all(w in str(error) for w in words)
            if type(error).__name__ != expected or not said:
                wrong.append(f"{name}: {type(error).__name__}: {str(error)[:120]}")
        except Exception as error:  # noqa: BLE001 - a crash instead of a refusal is the finding
            wrong.append(f"{name}: crashed with {type(error).__name__}: {str(error)[:120]}")
    return wrong


def bad_inputs_refused(*, device: str) -> dict:
    """Each bad input of the table (a checkpoint holding only pytorch_model.bin, a tied
    checkpoint whose redundant lm_head.weight is not the embedding's shape, a safetensors
    header with an unknown dtype, a weights path that is a directory, a checkpoint missing the
    twelve tensors of one layer, a checkpoint directory that is not there, a resume without its
    optimizer state or with an unreadable trainer.json, a corrupt optimizer state, a tokenizer
    without the end-of-text token, a train step and an evaluation with no target token, a
    split of a single distinct document, a batch of no sequences, a batched generation with no
    prompt or an id outside the vocabulary, text generation without a tokenizer) must raise
    the table's RuntimeInputError subclass with the table's words in its message. Accepting the
    input, or failing with any other exception (a traceback for the user), is a wrong verdict.

    Observations: cases, wrong_verdicts, wrong (each wrong case and what happened instead, joined by "; ": observations are numbers, booleans or text)."""
    with tempfile.TemporaryDirectory(prefix="pv-refusals-") as tmp:
        cases = _cases(Path(tmp))
        wrong = _judge(cases)
    return {"cases": len(cases), "wrong_verdicts": len(wrong), "wrong": "; ".join(wrong)}


def _config_cases():
    """(name, call, expected error class name, words): ModelConfig's documented field domains
    and the config.json shapes from_hf_dict refuses, each written here by hand."""
    from pvlab.runtime.config import PRESETS, ModelConfig

    tiny = PRESETS["tiny"]
    hf = tiny.to_hf_dict()

    def built(**changes):
        return lambda: tiny.replace(**changes)

    def read(**changes):
        return lambda: ModelConfig.from_hf_dict({**hf, **changes}, source="my/config.json")

    return [
        ("vocab_size True (a bool is not a size)", built(vocab_size=True), "ConfigError", ["vocab_size", "positive integer"]),
        ("hidden_size 64.0 (a float)", built(hidden_size=64.0), "ConfigError", ["hidden_size", "positive integer"]),
        ("num_hidden_layers 0", built(num_hidden_layers=0), "ConfigError", ["num_hidden_layers", "positive integer"]),
        ("head_dim 0", built(head_dim=0), "ConfigError", ["head_dim", "positive integer"]),
        ("head_dim True", built(head_dim=True), "ConfigError", ["head_dim", "positive integer"]),
        ("qwen2 without Q/K/V biases", built(qkv_bias=False), "ConfigError", ["qwen2", "qkv_bias=False"]),
        ("qwen2 with an o_proj bias", built(o_proj_bias=True), "ConfigError", ["qwen2", "o_proj_bias=True"]),
        ("config.json of an encoder model_type", read(model_type="bert", architectures=[]),
         "UnsupportedArchitectureError", ["my/config.json", "'bert'", "encoder"]),
        ("config.json of an unknown model_type", read(model_type="gpt2", architectures=[]),
         "ConfigError", ["my/config.json", "'gpt2'", "supported"]),
        ("config.json with vocab_size 0", read(vocab_size=0), "ConfigError", ["my/config.json", "vocab_size"]),
    ]


def bad_configs_refused(*, device: str) -> dict:
    """Each architecture outside ModelConfig's documented domain (a size that is a bool, a
    float or 0, a head_dim of 0 or True, a qwen2 without its Q/K/V biases or with an o_proj
    bias) and each config.json from_hf_dict cannot run (an encoder model_type, an unknown one, a
    vocab_size of 0) must raise the table's ConfigError subclass, naming the field and, for a
    file, the file. Accepting it, or any other exception, is a wrong verdict.

    Observations: cases, wrong_verdicts, wrong."""
    cases = _config_cases()
    wrong = _judge(cases)
    return {"cases": len(cases), "wrong_verdicts": len(wrong), "wrong": "; ".join(wrong)}
