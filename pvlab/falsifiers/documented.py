"""Documented values and rules of the runtime, each checked against a table written here.

`pv mutate` over pvlab/runtime found mutants that every falsifier let through because no check
read these values: a preset's published shape, how a device request resolves, which
safetensors dtypes a header may hold, the trainer's counters and mode, the corpus reader's
exclusions. Each check below holds its expected values in the check itself, taken from the
source the runtime documents (Qwen/Qwen2-0.5B's config.json, safetensors' own writer, the
docstrings' rules), never from the runtime's code.
"""

from __future__ import annotations

import hashlib
import math
import tempfile
from pathlib import Path

# Qwen/Qwen2-0.5B's config.json on the Hugging Face hub (the preset says it has its shapes).
QWEN2_05B = {"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
             "num_attention_heads": 14, "num_key_value_heads": 2, "max_position_embeddings": 32768,
             "rope_theta": 1000000.0, "tie_word_embeddings": True}
QWEN2_05B_PARAMETERS = 494_032_768      # the model card's count (the tied head counted once)
LLAMA_370M_PARAMETERS = 369_935_360     # the preset's own comment: 2*32000*1024 + 24*(...) + 1024


def _qwen2_parameters(vocab, hidden, inner, layers, heads, kv_heads, tied) -> int:
    """Parameter count of a Qwen2 decoder written out from the architecture (Q/K/V biases, no
    other bias, two norms a layer, a final norm, a head unless tied)."""
    head_dim = hidden // heads
    attention = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    attention += heads * head_dim + 2 * kv_heads * head_dim
    return vocab * hidden * (1 if tied else 2) + layers * (attention + 3 * hidden * inner + 2 * hidden) + hidden


def presets_match_published(*, device: str) -> dict:
    """The qwen2-0.5b preset holds Qwen/Qwen2-0.5B's published config values and parameter
    count, llama-370m the count its comment derives, and kv_groups is the integer number of
    query heads per KV head of every preset.

    Observations: field_mismatches, count_mismatches, kv_group_mismatches."""
    from pvlab.runtime.config import PRESETS

    qwen = PRESETS["qwen2-0.5b"]
    field_mismatches = sum(getattr(qwen, key) != value for key, value in QWEN2_05B.items())
    written_out = _qwen2_parameters(151936, 896, 4864, 24, 14, 2, tied=True)
    count_mismatches = int(written_out != QWEN2_05B_PARAMETERS) + int(qwen.num_parameters() != QWEN2_05B_PARAMETERS)
    count_mismatches += int(PRESETS["llama-370m"].num_parameters() != LLAMA_370M_PARAMETERS)
    kv_group_mismatches = 0
    for config in PRESETS.values():
        groups = config.kv_groups
        expected = config.num_attention_heads // config.num_key_value_heads
        kv_group_mismatches += int(type(groups) is not int or groups != expected)
    return {"field_mismatches": field_mismatches, "count_mismatches": count_mismatches,
            "kv_group_mismatches": kv_group_mismatches}


def device_requests_resolve(*, device: str) -> dict:
    """resolve_device gives what its docstring promises: "cpu" (any case, spaces around) is the
    CPU; None and "auto" are the GPU when torch sees one, else the CPU; "auto" with
    allow_gpu=False is the CPU; "tpu" is refused with DeviceError.

    Observations: requests, wrong_resolutions."""
    import torch

    from pvlab.runtime import devices
    from pvlab.runtime.errors import DeviceError

    default = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    table = [(None, {}, default), ("auto", {}, default), ("AUTO", {}, default), ("cpu", {}, torch.device("cpu")),
             (" CPU ", {}, torch.device("cpu")), ("auto", {"allow_gpu": False}, torch.device("cpu")),
             (None, {"allow_gpu": False}, torch.device("cpu")), ("tpu", {}, DeviceError)]
    wrong = 0
    for request, options, expected in table:
        try:
            got = devices.resolve_device(request, **options)
        except DeviceError:
            got = DeviceError
        except Exception:  # noqa: BLE001 - a crash is a wrong resolution
            got = None
        wrong += int(got != expected)
    return {"requests": len(table), "wrong_resolutions": wrong}


def every_safetensors_dtype_read(*, device: str) -> dict:
    """A file written by safetensors' own writer, holding one 3x5 tensor of every dtype the
    runtime's header reader lists (F64/F32/F16/BF16, I64/I32/I16/I8, U64/U32/U16/U8, BOOL,
    F8_E4M3/F8_E5M2), is read with each tensor's dtype and shape as written (the writer's
    byte offsets are the oracle for each dtype's width).

    Observations: dtypes, misread."""
    import torch
    from safetensors.torch import save_file

    from pvlab.runtime import checkpoint

    by_name = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
               "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
               "U64": torch.uint64, "U32": torch.uint32, "U16": torch.uint16, "U8": torch.uint8,
               "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}
    with tempfile.TemporaryDirectory(prefix="pv-dtypes-") as tmp:
        file = Path(tmp) / "every-dtype.safetensors"
        save_file({name: torch.zeros(3, 5, dtype=dtype) for name, dtype in by_name.items()}, str(file))
        try:
            index = checkpoint.read_safetensors_header(file)
        except Exception:  # noqa: BLE001 - refusing a valid file misreads every tensor
            return {"dtypes": len(by_name), "misread": len(by_name)}
    misread = sum(name not in index or index[name].dtype != name or tuple(index[name].shape) != (3, 5)
                  for name in by_name)
    return {"dtypes": len(by_name), "misread": misread}


def trainer_counts_and_restores(*, device: str) -> dict:
    """Two train steps of a tiny random model whose loss is NaN (one weight set to NaN) count
    two non-finite losses; an evaluation leaves the model in the mode it found it in (training
    stays training, eval stays eval).

    Observations: nonfinite_counted, mode_not_restored."""
    import torch

    from pvlab.runtime import data, trainer

    from . import fixtures

    batch = data.LMBatch.from_sequences([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    model = fixtures.fresh_copy(fixtures.random_model("tiny")).to(device)
    with torch.no_grad():
        model.state_dict()["model.norm.weight"][0] = float("nan")
    poisoned = trainer.Trainer(model, lr=1e-3)
    poisoned.train_step([batch])
    poisoned.train_step([batch])
    healthy = trainer.Trainer(fixtures.fresh_copy(fixtures.random_model("tiny")).to(device), lr=1e-3)
    not_restored = 0
    for training in (True, False):
        healthy.model.train(training)
        healthy.evaluate([batch])
        not_restored += int(healthy.model.training != training)
    return {"nonfinite_counted": poisoned.nonfinite_losses, "mode_not_restored": not_restored}


def lr_schedule_as_documented(*, device: str, lr: float) -> dict:
    """The learning rate a Trainer applies at each step is the documented schedule written out
    here: with no warmup given (the documented default is none), the cosine starts at the peak
    on step 0 and reaches min_lr at total_steps (total 4: the peak, then the cosine at 1/4, 2/4
    and 3/4 of the way, then min_lr); with two warmup steps, the ramp is lr/2, lr.

    Observations: steps, max_rel_error."""
    from pvlab.runtime import trainer

    from . import fixtures

    def cosine(step, warmup, total, min_lr):
        return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))

    runs = [({"total_steps": 4, "min_lr": 0.0}, [lr] + [cosine(s, 0, 4, 0.0) for s in (1, 2, 3)] + [0.0]),
            ({"warmup_steps": 2, "total_steps": 6, "min_lr": lr / 10}, [lr / 2, lr, lr])]
    errors = []
    for options, expected in runs:
        run = trainer.Trainer(fixtures.fresh_copy(fixtures.random_model("tiny")).to(device), lr=lr, **options)
        for step, want in enumerate(expected):
            run.step = step
            errors.append(abs(run.current_lr() - want) / lr)
    return {"steps": len(errors), "max_rel_error": max(errors)}


def corpus_reading_rules(*, device: str) -> dict:
    """read_python_sources over a tree built here keeps exactly the *.py files a person wrote
    (a.py, pkg/b.py), leaves out site-packages/ and __pycache__/ without counting them, counts
    an empty file and one marked "Autogenerated by Sphinx" as skipped, and digests the kept
    files as its docstring says (sha256 over path, NUL, byte length, NUL, bytes, in path
    order); load("stdlib/json") reads the standard library's json package.

    Observations: wrong_files, wrong_skips, digest_mismatch, stdlib_wrong."""
    from pvlab.runtime import corpus

    files = {"a.py": "x = 1\n", "pkg/b.py": "def f():\n    return 2\n", "empty.py": "  \n",
             "gen.py": "# Autogenerated by Sphinx\nX = 1\n", "site-packages/c.py": "y = 3\n",
             "pkg/__pycache__/d.py": "z = 4\n"}
    with tempfile.TemporaryDirectory(prefix="pv-corpus-") as tmp:
        root = Path(tmp)
        for relative, text in files.items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(text, encoding="utf-8")
        try:
            read = corpus.read_python_sources(root)
            kept = [(source.path, source.text) for source in read.files]
            skipped, digest = dict(read.skipped), read.digest
        except Exception:  # noqa: BLE001 - a crash reads nothing right
            kept, skipped, digest = [], {}, ""
    expected = [("a.py", files["a.py"]), ("pkg/b.py", files["pkg/b.py"])]
    oracle = hashlib.sha256()
    for path, text in expected:
        oracle.update(f"{path}\0{len(text.encode())}\0".encode() + text.encode())
    try:
        json_corpus = corpus.load("stdlib/json")
        stdlib_wrong = int(json_corpus.spec != "stdlib/json" or "decoder.py" not in {s.path for s in json_corpus.files})
    except Exception:  # noqa: BLE001
        stdlib_wrong = 1
    return {"wrong_files": int(kept != expected), "wrong_skips": int(skipped != {"empty": 1, "generated": 1}),
            "digest_mismatch": int(digest != oracle.hexdigest()), "stdlib_wrong": stdlib_wrong}
