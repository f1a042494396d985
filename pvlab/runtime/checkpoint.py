"""Hugging Face checkpoint directories: reading, validating, populating, writing.

A checkpoint is a directory that transformers opens unchanged:

    config.json              architecture (Qwen2ForCausalLM / LlamaForCausalLM)
    model.safetensors        weights by HF tensor name (or model-0000x-of-0000y.safetensors
                             shards plus model.safetensors.index.json)
    tokenizer.json           optional: the BPE tokenizer the model was trained with
    runtime.json             optional: how the runtime produced it (data recipe, losses)

Loading compares the tensor names and shapes the architecture expects with those the files
hold *before* touching any weight, and refuses a missing, extra or mis-shaped tensor by name.
The resulting `PopulateReport` (e.g. "290/290 tensors") travels with the model.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

# Sibling modules, not their functions: every call below looks the function up at call time
# (`devices.resolve_device(...)`), so replacing one module attribute reaches every caller.
from . import atomic, devices, parity
from . import config as configs
from . import model as models
from .config import ModelConfig
from .errors import CheckpointError, ConfigError, UnpairedArgumentsError
from .model import CausalLM

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
TOKENIZER_NAME = "tokenizer.json"
RUNTIME_META_NAME = "runtime.json"

# Bytes per element of each safetensors dtype the runtime accepts as weights.
FLOAT_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
OTHER_DTYPES = {"I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1, "U16": 2, "U32": 4,
                "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}
MAX_HEADER_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    file: Path


@dataclass(frozen=True)
class PopulateReport:
    """What the architecture expects against what the checkpoint supplied, by tensor name."""

    expected: tuple[str, ...]
    found: tuple[str, ...]                 # expected names whose tensor was copied into the model
    missing: tuple[str, ...] = ()          # expected, absent from the files
    extra: tuple[str, ...] = ()            # in the files, unknown to the architecture
    mismatched: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = ()  # (name, expected, file)
    ignored: tuple[str, ...] = ()          # in the files, tolerated on purpose (see _TOLERATED)
    source: str = ""

    @property
    def complete(self) -> bool:
        return (set(self.found) == set(self.expected) and not self.missing and not self.extra
                and not self.mismatched)

    def summary(self) -> str:
        text = f"{len(self.found)}/{len(self.expected)} tensors"
        problems = [f"{len(items)} {label}" for label, items in
                    (("missing", self.missing), ("extra", self.extra), ("mis-shaped", self.mismatched)) if items]
        return text + (f" ({', '.join(problems)})" if problems else "")

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["mismatched"] = [{"name": n, "expected": list(e), "found": list(f)} for n, e, f in self.mismatched]
        data.update(tensors_expected=len(self.expected), tensors_populated=len(self.found),
                    tensors_missing=len(self.missing), tensors_extra=len(self.extra),
                    tensors_mismatched=len(self.mismatched), summary=self.summary())
        return data


class PopulateError(CheckpointError):
    """A checkpoint's tensors do not match its architecture; `.report` says exactly how."""

    def __init__(self, message: str, report: PopulateReport):
        super().__init__(message)
        self.report = report


# ---- reading safetensors headers ---------------------------------------------------------------

def read_safetensors_header(file: Path) -> dict[str, TensorInfo]:
    """Parse and validate one safetensors file's header without reading its data.

    Refuses (naming the file) an empty or truncated file, a header that is not JSON, and tensor
    entries whose byte ranges disagree with their dtype and shape or with the file's size.
    """
    file = Path(file)
    try:
        size = file.stat().st_size
        with open(file, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise CheckpointError(f"{file}: not a safetensors file (only {size} bytes)")
            (header_length,) = struct.unpack("<Q", prefix)
            if header_length > min(MAX_HEADER_BYTES, size - 8):
                raise CheckpointError(f"{file}: corrupt or truncated safetensors file (header claims "
                                      f"{header_length} bytes, file has {size})")
            header_bytes = handle.read(header_length)
    except OSError as error:
        raise CheckpointError(f"{file}: cannot read weights: {error.strerror}") from None
    try:
        header = json.loads(header_bytes)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(f"{file}: corrupt safetensors file (header is not valid JSON)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{file}: corrupt safetensors file (header is not a JSON object)")

    data_length = size - 8 - header_length
    tensors: dict[str, TensorInfo] = {}
    data_end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise CheckpointError(f"{file}: corrupt safetensors header entry for tensor {name!r}") from None
        item_size = FLOAT_DTYPES.get(dtype) or OTHER_DTYPES.get(dtype)
        if item_size is None:
            raise CheckpointError(f"{file}: tensor {name!r} has unknown dtype {dtype!r}")
        if end - begin != math.prod(shape) * item_size or begin < 0:
            raise CheckpointError(f"{file}: corrupt safetensors header: tensor {name!r} of shape "
                                  f"{list(shape)} {dtype} spans bytes [{begin}, {end})")
        data_end = max(data_end, end)
        tensors[name] = TensorInfo(name, dtype, shape, file)
    if data_end > data_length:
        raise CheckpointError(f"{file}: truncated safetensors file: tensors need {data_end} data bytes, "
                              f"the file holds {data_length}")
    if data_end < data_length:
        raise CheckpointError(f"{file}: corrupt safetensors file: {data_length - data_end} trailing "
                              "bytes after the last tensor")
    return tensors


def weight_files(directory: Path) -> list[Path]:
    """The safetensors file(s) of a checkpoint directory, single or sharded."""
    single, index = directory / WEIGHTS_NAME, directory / WEIGHTS_INDEX_NAME
    if single.is_file():
        return [single]
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            shard_names = sorted(set(weight_map.values()))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise CheckpointError(f"{index}: unreadable shard index (expected a 'weight_map' object)") from None
        shards = [directory / shard for shard in shard_names]
        for shard in shards:
            if not shard.is_file():
                raise CheckpointError(f"{shard}: weight shard listed in {index.name} is missing")
        return shards
    if (directory / "pytorch_model.bin").exists():
        raise CheckpointError(f"{directory}: only pytorch_model.bin found; this runtime reads safetensors "
                              "only (unpickling .bin files can run arbitrary code) — re-save with "
                              "save_pretrained(safe_serialization=True)")
    raise CheckpointError(f"{directory}: no weights ({WEIGHTS_NAME} or {WEIGHTS_INDEX_NAME}) in the directory")


def read_tensor_index(files: list[Path]) -> dict[str, TensorInfo]:
    index: dict[str, TensorInfo] = {}
    for file in files:
        for name, info in read_safetensors_header(file).items():
            if name in index:
                raise CheckpointError(f"{file}: tensor {name!r} is also stored in {index[name].file.name}")
            index[name] = info
    return index


# ---- comparing and populating ------------------------------------------------------------------

def _is_tolerated(name: str, config: ModelConfig) -> bool:
    """Tensors some transformers versions write that carry no information of their own: rotary
    inverse-frequency buffers (recomputed from rope_theta) and, for a tied model, a copy of the
    embedding as lm_head.weight (checked to be identical when loaded)."""
    return name.endswith("rotary_emb.inv_freq") or (config.tie_word_embeddings and name == "lm_head.weight")


def compare_tensors(config: ModelConfig, index: Mapping[str, TensorInfo], *, source: str = "") -> PopulateReport:
    """Compare expected names/shapes with the files' index; nothing is read or copied."""
    expected_shapes = config.tensor_shapes()
    missing = tuple(name for name in expected_shapes if name not in index)
    extra = tuple(sorted(name for name in index if name not in expected_shapes and not _is_tolerated(name, config)))
    ignored = tuple(sorted(name for name in index if name not in expected_shapes and _is_tolerated(name, config)))
    mismatched = tuple((name, shape, index[name].shape) for name, shape in expected_shapes.items()
                       if name in index and index[name].shape != shape)
    non_float = [name for name in expected_shapes if name in index and index[name].dtype not in FLOAT_DTYPES]
    if non_float:
        name = non_float[0]
        raise CheckpointError(f"{index[name].file}: tensor {name!r} has dtype {index[name].dtype}; "
                              "weights must be floating point")
    if "lm_head.weight" in ignored and index["lm_head.weight"].shape != expected_shapes["model.embed_tokens.weight"]:
        mismatched += (("lm_head.weight", expected_shapes["model.embed_tokens.weight"], index["lm_head.weight"].shape),)
    found = tuple(name for name in expected_shapes if name in index and index[name].shape == expected_shapes[name])
    return PopulateReport(expected=tuple(expected_shapes), found=found, missing=missing, extra=extra,
                          mismatched=mismatched, ignored=ignored, source=source)


def _refuse_unless_complete(report: PopulateReport) -> None:
    if report.complete:
        return
    lines = [f"{report.source}: checkpoint does not match its architecture: {report.summary()}"]
    lines += [f"  missing tensor {name}" for name in report.missing[:10]]
    lines += [f"  extra tensor {name}" for name in report.extra[:10]]
    lines += [f"  tensor {name} has shape {list(found)}, expected {list(expected)}"
              for name, expected, found in report.mismatched[:10]]
    not_copied = sorted(set(report.expected) - set(report.found) - set(report.missing)
                        - {name for name, _, _ in report.mismatched})
    lines += [f"  tensor {name} was not copied into the model" for name in not_copied[:10]]
    hidden = (len(report.missing) + len(report.extra) + len(report.mismatched) + len(not_copied)) - (len(lines) - 1)
    if hidden > 0:
        lines.append(f"  ... and {hidden} more")
    raise PopulateError("\n".join(lines), report)


def copy_tensor(parameter: torch.nn.Parameter, tensor: torch.Tensor) -> None:
    """Copy one checkpoint tensor into the model (converting e.g. bf16 files to fp32 weights)."""
    with torch.no_grad():
        parameter.copy_(tensor)


def populate(model: CausalLM, tensors: Mapping[str, Any], plan: PopulateReport) -> PopulateReport:
    """Copy every planned tensor into `model`; return the report of what was actually copied.

    `tensors` maps names to tensors or to zero-argument loaders (so a large file is read one
    tensor at a time).
    """
    parameters = dict(model.named_parameters())  # a tied head appears once, as the embedding
    copied = []
    for name in plan.found:
        value = tensors[name]
        copy_tensor(parameters[name], value() if callable(value) else value)
        copied.append(name)
    unfilled = sorted(set(parameters) - set(copied))
    report = PopulateReport(expected=plan.expected, found=tuple(copied), missing=plan.missing + tuple(unfilled),
                            extra=plan.extra, mismatched=plan.mismatched, ignored=plan.ignored, source=plan.source)
    _refuse_unless_complete(report)
    if "lm_head.weight" in plan.ignored:
        redundant_head = tensors["lm_head.weight"]
        redundant_head = redundant_head() if callable(redundant_head) else redundant_head
        if not torch.equal(redundant_head.to(model.lm_head.weight.dtype), model.lm_head.weight.detach().cpu()):
            raise CheckpointError(f"{plan.source}: lm_head.weight differs from model.embed_tokens.weight although "
                                  "tie_word_embeddings is true; set tie_word_embeddings=false to keep both")
    return report


def _empty_model(config: ModelConfig) -> CausalLM:
    """Construction allocates (torch.empty) without initialising; populate overwrites every
    parameter and refuses if one is left unwritten."""
    return CausalLM(config)


def _lazy_file_tensors(index: Mapping[str, TensorInfo]) -> dict[str, Any]:
    def loader(info: TensorInfo):
        def read() -> torch.Tensor:
            try:
                with safe_open(str(info.file), framework="pt", device="cpu") as handle:
                    return handle.get_tensor(info.name)
            except SafetensorError as error:
                raise CheckpointError(f"{info.file}: cannot read tensor {info.name!r}: {error}") from None
        return read
    return {name: loader(info) for name, info in index.items()}


# ---- public entry points -----------------------------------------------------------------------

def load(checkpoint_dir: Path | str, *, device: str | torch.device | None = "cpu", path: str | None = None,
         parity_gate: bool | None = None, allow_gpu: bool = True) -> CausalLM:
    """Open a Hugging Face checkpoint directory (written by transformers or by this runtime).

    device: "cpu" (default), "cuda", "cuda:N" or "auto"; path: "reference" or "fast" (default:
    fast on CUDA, reference on CPU). The returned model carries `populate_report`, `tokenizer`
    (or None), `config`, `checkpoint_dir` and `runtime_meta`. With `parity_gate` (default: on
    whenever the model will not run as fp32 reference on the CPU) the device/path logits are
    compared with the CPU reference on a probe input and a diverging model is refused.
    """
    directory = Path(checkpoint_dir)
    if not directory.exists():
        raise CheckpointError(f"{directory}: checkpoint directory does not exist")
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: not a directory (a checkpoint is a directory with "
                              f"{CONFIG_NAME} and {WEIGHTS_NAME})")
    config_file = directory / CONFIG_NAME
    if not config_file.is_file():
        raise CheckpointError(f"{config_file}: missing; weights without an architecture cannot be loaded")
    config = ModelConfig.from_json_file(config_file)
    target_device = devices.resolve_device(device, allow_gpu=allow_gpu)

    index = read_tensor_index(weight_files(directory))
    plan = compare_tensors(config, index, source=str(directory))
    _refuse_unless_complete(plan)
    model = _empty_model(config)
    model.populate_report = populate(model, _lazy_file_tensors(index), plan)
    model.tokenizer = _load_tokenizer(directory)
    model.checkpoint_dir = directory
    model.runtime_meta = read_runtime_meta(directory)
    return parity.place(model, target_device, path or devices.default_path(target_device), gate=parity_gate)


def init_model(*, config: ModelConfig | str | Mapping[str, Any] | Path | None = None,
               weights: str | Path | Mapping[str, torch.Tensor] | None = None, seed: int = 0,
               device: str | torch.device | None = "cpu", path: str | None = None,
               parity_gate: bool | None = None) -> CausalLM:
    """Build a model from an architecture *and* its weights; both are required.

    config: a ModelConfig, a preset name ("tiny", "qwen2-0.5b", "llama-370m"), a transformers
    config dict, or a config.json path. weights: a .safetensors file, a {name: tensor} dict, or
    the explicit string "random" (initialised from `seed`). Passing only one of the two is an
    UnpairedArgumentsError: the runtime never invents weights or an architecture silently.
    """
    if config is None and weights is None:
        raise UnpairedArgumentsError("init_model needs both config= (architecture) and weights= "
                                     "(a .safetensors file, a state dict, or 'random')")
    if weights is None:
        raise UnpairedArgumentsError("init_model: config given without weights; pass weights=<file.safetensors>, "
                                     "a state dict, or weights='random' to initialise from seed")
    if config is None:
        raise UnpairedArgumentsError("init_model: weights given without an architecture; pass config= "
                                     "(a preset name, a ModelConfig, or a config.json)")
    model_config = _coerce_config(config)
    target_device = devices.resolve_device(device)
    if isinstance(weights, str) and weights == "random":
        model = CausalLM(model_config)
        models.init_weights(model, seed)
        expected = tuple(model_config.tensor_shapes())
        model.populate_report = PopulateReport(expected=expected, found=expected, source=f"random init (seed {seed})")
    else:
        if isinstance(weights, Mapping):
            index = {name: TensorInfo(name, _safetensors_dtype(t), tuple(t.shape), Path("<state dict>"))
                     for name, t in weights.items()}
            tensors: Mapping[str, Any] = weights
            source = "<state dict>"
        else:
            weights_file = Path(weights)
            if weights_file.is_dir():
                raise UnpairedArgumentsError(f"init_model: weights={weights_file} is a checkpoint directory; "
                                             "use runtime.load() for directories")
            if not weights_file.is_file():
                raise CheckpointError(f"{weights_file}: weights file does not exist")
            index = read_safetensors_header(weights_file)
            tensors, source = _lazy_file_tensors(index), str(weights_file)
        plan = compare_tensors(model_config, index, source=source)
        _refuse_unless_complete(plan)
        model = _empty_model(model_config)
        model.populate_report = populate(model, tensors, plan)
    model.checkpoint_dir = None
    model.runtime_meta = {}
    return parity.place(model, target_device, path or devices.default_path(target_device), gate=parity_gate)


def _coerce_config(config: ModelConfig | str | Mapping[str, Any] | Path) -> ModelConfig:
    if isinstance(config, ModelConfig):
        return config
    if isinstance(config, Mapping):
        return ModelConfig.from_hf_dict(dict(config), source="config")
    if isinstance(config, Path) or (isinstance(config, str) and (config.endswith(".json") or "/" in config)):
        file = Path(config)
        return ModelConfig.from_json_file(file / CONFIG_NAME if file.is_dir() else file)
    if isinstance(config, str):
        return configs.preset(config)
    raise ConfigError(f"config must be a ModelConfig, preset name, dict or config.json path, got {type(config).__name__}")


def _safetensors_dtype(tensor: torch.Tensor) -> str:
    return {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64"}.get(
        tensor.dtype, str(tensor.dtype))


def _load_tokenizer(directory: Path):
    file = directory / TOKENIZER_NAME
    if not file.is_file():
        return None
    from tokenizers import Tokenizer  # imported here: plenty of callers never need it
    try:
        return Tokenizer.from_file(str(file))
    except Exception as error:  # the tokenizers library raises a bare Exception on bad JSON
        raise CheckpointError(f"{file}: not a valid tokenizer file ({error})") from None


def read_runtime_meta(directory: Path) -> dict[str, Any]:
    file = Path(directory) / RUNTIME_META_NAME
    if not file.is_file():
        return {}
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{file}: unreadable runtime metadata ({error})") from None


def model_tensors(model: CausalLM) -> dict[str, torch.Tensor]:
    """The model's weights by HF name, on the CPU, in file order; a tied head is left out."""
    state = model.state_dict()
    return {name: state[name].detach().to("cpu").contiguous() for name in model.config.tensor_shapes()}


def save_checkpoint(model: CausalLM, checkpoint_dir: Path | str, *, tokenizer=None,
                    runtime_meta: Mapping[str, Any] | None = None,
                    extra_files: Mapping[str, bytes] | None = None) -> Path:
    """Write a transformers-compatible checkpoint directory, atomically (see atomic.staged_directory).

    tokenizer defaults to `model.tokenizer`; runtime_meta is stored as runtime.json; extra_files
    (name -> bytes) are written alongside (the trainer stores optimizer state this way).
    """
    directory = Path(checkpoint_dir)
    tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    with atomic.staged_directory(directory) as staging:
        save_file(model_tensors(model), str(staging / WEIGHTS_NAME), metadata={"format": "pt"})
        if tokenizer is not None:
            tokenizer.save(str(staging / TOKENIZER_NAME))
            (staging / "tokenizer_config.json").write_text(json.dumps(_tokenizer_config(model.config), indent=2) + "\n")
        if runtime_meta:
            (staging / RUNTIME_META_NAME).write_text(json.dumps(runtime_meta, indent=2, sort_keys=True) + "\n")
        for name, data in (extra_files or {}).items():
            (staging / name).write_bytes(data)
        (staging / CONFIG_NAME).write_text(json.dumps(model.config.to_hf_dict(), indent=2) + "\n")
    return directory


def _tokenizer_config(config: ModelConfig) -> dict[str, Any]:
    """Lets transformers.AutoTokenizer open tokenizer.json. For qwen2 it insists on its own
    Qwen2Tokenizer (whose pipeline data.train_tokenizer reproduces); for llama the generic
    backend keeps the byte-level pipeline instead of Llama's SentencePiece-style one."""
    from .data import END_OF_TEXT
    tokenizer_class = "Qwen2Tokenizer" if config.model_type == "qwen2" else "TokenizersBackend"
    return {"tokenizer_class": tokenizer_class, "bos_token": None, "eos_token": END_OF_TEXT,
            "pad_token": END_OF_TEXT, "unk_token": None, "model_max_length": config.max_position_embeddings}


def inspect_checkpoint(checkpoint_dir: Path | str) -> dict[str, Any]:
    """Config, parameter counts and tensor coverage from headers alone (no weights are read)."""
    directory = Path(checkpoint_dir)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: checkpoint directory does not exist")
    config = ModelConfig.from_json_file(directory / CONFIG_NAME)
    files = weight_files(directory)
    index = read_tensor_index(files)
    report = compare_tensors(config, index, source=str(directory))
    return {
        "checkpoint": str(directory),
        "config": config.to_hf_dict(),
        "parameters_expected": config.num_parameters(),
        "parameters_in_files": sum(math.prod(info.shape) for info in index.values() if info.name in report.found),
        "files": [file.name for file in files],
        "dtypes": sorted({info.dtype for info in index.values()}),
        "coverage": report.as_dict(),
        "tokenizer": (directory / TOKENIZER_NAME).is_file(),
        "runtime": read_runtime_meta(directory),
    }
