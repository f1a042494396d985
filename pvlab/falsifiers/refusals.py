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
    """(name, call, expected error class name, words the message must hold)."""
    import torch
    from safetensors.torch import load_file, save_file
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    from pvlab.runtime import checkpoint, data, trainer

    from . import fixtures

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
    saved = trainer.Trainer(model).save(work / "trainer-run")
    (Path(saved) / trainer.OPTIMIZER_STATE_NAME).write_bytes(b"\x00" * 16)

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
    ]


def bad_inputs_refused(*, device: str) -> dict:
    """Each bad input of the table (a checkpoint holding only pytorch_model.bin, a tied
    checkpoint whose redundant lm_head.weight is not the embedding's shape, a safetensors
    header with an unknown dtype, a corrupt optimizer state on resume, a tokenizer without the
    end-of-text token, a train step and an evaluation with no target token) must raise the
    table's RuntimeInputError subclass with the table's words in its message. Accepting the
    input, or failing with any other exception (a traceback for the user), is a wrong verdict.

    Observations: cases, wrong_verdicts, wrong (each wrong case: what happened instead)."""
    from pvlab.runtime.errors import RuntimeInputError

    with tempfile.TemporaryDirectory(prefix="pv-refusals-") as tmp:
        cases = _cases(Path(tmp))
        wrong = []
        for name, call, expected, words in cases:
            try:
                call()
                wrong.append(f"{name}: accepted")
            except RuntimeInputError as error:
                if type(error).__name__ != expected or not all(w in str(error) for w in words):
                    wrong.append(f"{name}: {type(error).__name__}: {str(error)[:120]}")
            except Exception as error:  # noqa: BLE001 - a crash instead of a refusal is the finding
                wrong.append(f"{name}: crashed with {type(error).__name__}: {str(error)[:120]}")
    return {"cases": len(cases), "wrong_verdicts": len(wrong), "wrong": wrong}
