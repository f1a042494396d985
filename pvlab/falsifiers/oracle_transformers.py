"""transformers as an independent oracle: a second implementation of the same architecture.

Every other model-level check compares the runtime with itself (reference path against fast path,
CPU against CUDA, its writer against its reader). Here the expected side is transformers' own
`AutoModelForCausalLM.from_pretrained(<the same checkpoint directory>)`, run in float32 on the
CPU with eager attention; the runtime computes nothing on that side. Compared: logits, the loss
on held-out batches, the gradient of every parameter (matched by name) after one backward, and N
greedy tokens decoded with the KV cache.

Checkpoints (`checkpoint=`):

    tiny-trained      the zoo's trained Qwen2-style model (written by the runtime's own writer)
    hf-qwen2-random   a small Qwen2 that transformers builds and writes itself (save_pretrained):
                      untied head, every parameter drawn from a seed (norms and biases included)
    hf-llama-random   a small Llama written by transformers: MQA (one KV head), head_dim 32 !=
                      hidden/heads, o_proj and Q/K/V biases, rope_theta 5e5, rms_norm_eps 1e-5

For the hf-* checkpoints neither the runtime's writer nor its config conversion wrote the file, so
a defect that sits on both sides of the runtime's own round trip cannot hide.

transformers missing, or unable to open a checkpoint, is an ERROR that names the file and the
reason (OracleUnavailable) — never a skip: a missing oracle has judged nothing.
"""

from __future__ import annotations

import atexit
import copy
import shutil
import tempfile
from pathlib import Path

import torch

from . import fixtures
from ._util import compared, rtol_atol, torch_device

HF_RANDOM = ("hf-qwen2-random", "hf-llama-random")
ORACLE_CHECKPOINTS = ("tiny-trained",) + HF_RANDOM
WINDOW = 65            # tokens per window: 64 (input, target) pairs
BATCH = 4              # windows per batch
PADDED_TAIL = 9        # the last row of the last batch ends early: its last 9 targets are padding


class OracleUnavailable(RuntimeError):
    """transformers is absent or cannot open the checkpoint: the oracle cannot judge (ERROR)."""


# ---- the oracle side: transformers ------------------------------------------------------------

def _transformers():
    try:
        import transformers
    except ImportError as error:
        raise OracleUnavailable(f"transformers is not importable ({error}); the independent oracle cannot run: "
                                "install transformers into the environment that runs the checks") from None
    transformers.utils.logging.disable_progress_bar()
    return transformers


def _hf_random_config(transformers, name: str):
    if name == "hf-qwen2-random":
        return transformers.Qwen2Config(
            vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, rope_theta=10000.0, rms_norm_eps=1e-6,
            tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
    return transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=32, max_position_embeddings=128, rope_theta=500000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=False, attention_bias=True, bos_token_id=1, eos_token_id=2)


@fixtures.cached(data=True)
def spread_parameters(model: torch.nn.Module, seed: int, *, bias_std: float = 0.2,
                      matrix=lambda noise, parameter: 0.1 * noise) -> None:
    """Redraw every parameter from `seed` on the CPU, in `named_parameters` order: norm weights
    1 + N(0, 0.2²), biases N(0, bias_std²), everything else `matrix(noise, parameter)` of a
    standard normal draw. (The runtime's tests use it too, with their own matrix scale.)"""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter_name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if parameter_name.endswith("norm.weight"):
                parameter.copy_(1 + 0.2 * noise)
            elif parameter_name.endswith(".bias"):
                parameter.copy_(bias_std * noise)
            else:
                parameter.copy_(matrix(noise, parameter))


def hf_random_checkpoint(name: str, seed: int = 0) -> Path:
    """A checkpoint directory written by transformers' save_pretrained (no download). Every
    parameter is drawn from `seed` on the CPU: matrices N(0, 0.1²) (large enough that logits
    spread over several units), norm weights 1 + N(0, 0.2²), biases N(0, 0.2²) — a zero bias or a
    unit norm would hide a runtime that drops them."""
    transformers = _transformers()
    if name not in HF_RANDOM:
        raise ValueError(f"unknown transformers-written checkpoint {name!r}; known: {', '.join(HF_RANDOM)}")
    with torch.device("cpu"):
        model = transformers.AutoModelForCausalLM.from_config(_hf_random_config(transformers, name))
    spread_parameters(model, seed)
    directory = Path(tempfile.mkdtemp(prefix=f"pv-{name}-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    model.save_pretrained(directory)
    return directory


def checkpoint_directory(name: str) -> Path:
    if name == "tiny-trained":
        return fixtures.checkpoint_dir(name)
    if name in HF_RANDOM:
        return hf_random_checkpoint(name)
    raise ValueError(f"unknown checkpoint {name!r}; known: {', '.join(ORACLE_CHECKPOINTS)}")


def open_with_transformers(directory: Path | str):
    """transformers' own model of `directory`, float32, eager attention, on the CPU, eval mode.

    Raises OracleUnavailable naming the file and the reason when transformers is absent, the
    config cannot be read, no weights file exists, loading fails, or transformers would fill a
    tensor the file lacks with random values (its default is only a warning)."""
    transformers = _transformers()
    directory = Path(directory)
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise OracleUnavailable(f"{config_file}: missing; transformers cannot open {directory} without it")
    try:
        transformers.AutoConfig.from_pretrained(directory)
    except Exception as error:  # transformers raises ValueError, OSError, KeyError, JSONDecodeError ...
        raise OracleUnavailable(f"{config_file}: transformers cannot read it ({type(error).__name__}: {error})") from None
    weights = directory / "model.safetensors"
    if not weights.is_file():
        weights = directory / "model.safetensors.index.json"
        if not weights.is_file():
            raise OracleUnavailable(f"{directory / 'model.safetensors'}: missing; transformers finds no weights in "
                                    f"{directory}")
    try:
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            directory, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    except Exception as error:
        raise OracleUnavailable(f"{weights}: transformers cannot load the weights ({type(error).__name__}: "
                                f"{error})") from None
    unfilled = sorted(set(info.get("missing_keys", ())) | {str(k) for k in info.get("mismatched_keys", ())})
    if unfilled:
        raise OracleUnavailable(f"{weights}: transformers would initialise {len(unfilled)} tensor(s) at random "
                                f"(missing or mis-shaped in the file), first {unfilled[0]!r}")
    return model.to("cpu").eval()


@fixtures.cached
def _oracle_model(name: str):
    return open_with_transformers(checkpoint_directory(name))


@fixtures.cached
def _runtime_model(name: str, device: str, path: str):
    if name == "tiny-trained":
        return fixtures.model(name, device, path)
    from pvlab.runtime import checkpoint

    return checkpoint.load(checkpoint_directory(name), device=device, path=path, parity_gate=False).eval()


# ---- inputs, built here from token ids (not by the runtime's batching code) --------------------

@fixtures.cached(data=True)
def token_windows(name: str, batches: int, seed: int) -> tuple:
    """`batches` tensors of BATCH windows of WINDOW token ids: the tiny-trained held-out stream's
    consecutive windows (offset by seed), or seeded uniform ids for a transformers-written model."""
    count = batches * BATCH
    if name == "tiny-trained":
        stream = fixtures.prepared_data(name).heldout_stream
        start = seed * count * WINDOW
        if stream.numel() < start + count * WINDOW:
            raise ValueError(f"held-out stream has {stream.numel()} tokens; seed {seed} needs {start + count * WINDOW}")
        windows = stream[start:start + count * WINDOW].view(count, WINDOW)
    else:
        vocab = _oracle_model(name).config.vocab_size
        windows = torch.randint(0, vocab, (count, WINDOW), generator=torch.Generator().manual_seed(seed))
    return tuple(windows[i * BATCH:(i + 1) * BATCH].clone() for i in range(batches))


def _inputs_targets(window: torch.Tensor, *, pad_last_row: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """inputs = tokens [0, T), targets = tokens [1, T]; optionally the last row ends PADDED_TAIL
    tokens early (IGNORE_INDEX targets, input ids kept)."""
    from pvlab.runtime.kernels import IGNORE_INDEX

    inputs, targets = window[:, :-1].clone(), window[:, 1:].clone()
    if pad_last_row:
        targets[-1, -PADDED_TAIL:] = IGNORE_INDEX
    return inputs, targets


def _pairs(name: str, batches: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    windows = token_windows(name, batches, seed)
    return [_inputs_targets(w, pad_last_row=(i == len(windows) - 1)) for i, w in enumerate(windows)]


def _tolerance_for(path: str, tolerance) -> tuple[str, float, float]:
    dtype = "bfloat16" if path == "fast" else "float32"
    rtol, atol = rtol_atol(tolerance, dtype)
    return dtype, rtol, atol


def _common(device: str, checkpoint: str, path: str | None) -> tuple[torch.device, str]:
    from pvlab.runtime.devices import default_path

    dev = torch_device(device)
    if checkpoint not in ORACLE_CHECKPOINTS:
        raise ValueError(f"unknown checkpoint {checkpoint!r}; known: {', '.join(ORACLE_CHECKPOINTS)}")
    return dev, path or default_path(dev)


# ---- the checks --------------------------------------------------------------------------------

def logits_agree(*, device: str, checkpoint: str = "tiny-trained", path: str | None = None, batches: int = 2,
                 seed: int = 0, tolerance=None) -> dict:
    """Runtime logits (runtime.load on `device`/`path`) against transformers' (CPU, float32) on
    the same token windows. Tolerance: float32 for the reference path, bfloat16 for the fast one.

    Observations: max_abs_diff, max_abs_ref, max_rel_diff, allclose_ratio, nonfinite, rtol, atol,
    argmax_agreement (fraction of positions whose top token agrees), positions."""
    dev, path = _common(device, checkpoint, path)
    _, rtol, atol = _tolerance_for(path, tolerance)
    oracle, model = _oracle_model(checkpoint), _runtime_model(checkpoint, device, path)
    ours, theirs = [], []
    with torch.no_grad():
        for inputs, _ in _pairs(checkpoint, batches, seed):
            theirs.append(oracle(input_ids=inputs).logits.detach().double())
            ours.append(model(inputs.to(dev)).detach().to("cpu", torch.float64))
    return logits_compared(torch.cat(ours), torch.cat(theirs), rtol=rtol, atol=atol)


def logits_compared(ours: torch.Tensor, theirs: torch.Tensor, *, rtol: float, atol: float) -> dict:
    """The runtime's float64 logits against transformers' (both on the CPU): compared(), plus
    argmax_agreement (the fraction of positions whose top token agrees) and positions."""
    if ours.shape != theirs.shape:
        raise ValueError(f"runtime logits have shape {tuple(ours.shape)}, transformers' {tuple(theirs.shape)}")
    observations = compared(ours, theirs, rtol=rtol, atol=atol)
    observations["argmax_agreement"] = float((ours.argmax(-1) == theirs.argmax(-1)).double().mean())
    observations["positions"] = int(theirs.shape[0] * theirs.shape[1])
    return observations


def _oracle_loss_sum(oracle, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Sum of next-token NLL over non-IGNORE targets from transformers' logits (textbook
    definition: logsumexp minus the target's logit), and the token count."""
    from pvlab.runtime.kernels import IGNORE_INDEX

    logits = oracle(input_ids=inputs).logits                                   # (B, T, V)
    keep = targets != IGNORE_INDEX
    rows = logits[keep]
    picked = rows.gather(1, targets[keep][:, None]).squeeze(1)
    return (torch.logsumexp(rows, dim=-1) - picked).sum(), int(keep.sum())


def loss_agrees(*, device: str, checkpoint: str = "tiny-trained", path: str | None = None, batches: int = 4,
                seed: int = 0, tolerance=None) -> dict:
    """The runtime's eval loss (Trainer.evaluate: token-weighted over batches, on `device`/`path`)
    against the mean next-token NLL computed here in float64 from transformers' logits. The last
    row of the last batch is padded (IGNORE_INDEX targets), so padding handling is compared too.

    Observations: loss, reference_loss, loss_abs_diff, loss_tol (atol + rtol * reference_loss at
    the path's dtype), tokens, rtol, atol."""
    from pvlab.runtime.data import LMBatch
    from pvlab.runtime.trainer import Trainer

    _, path = _common(device, checkpoint, path)
    _, rtol, atol = _tolerance_for(path, tolerance)
    oracle, model = _oracle_model(checkpoint), _runtime_model(checkpoint, device, path)
    pairs = _pairs(checkpoint, batches, seed)
    total, tokens = 0.0, 0
    in_float64 = copy.deepcopy(oracle).double()
    with torch.no_grad():
        for inputs, targets in pairs:
            nll, count = _oracle_loss_sum(in_float64, inputs, targets)
            total, tokens = total + float(nll), tokens + count
    reference = total / tokens
    loss = Trainer(fixtures.fresh_copy(model)).evaluate([LMBatch(inputs=i, targets=t) for i, t in pairs])
    return {"loss": loss, "reference_loss": reference, "loss_abs_diff": abs(loss - reference),
            "loss_tol": atol + rtol * abs(reference), "tokens": tokens, "rtol": rtol, "atol": atol}


def gradients_agree(*, device: str, checkpoint: str = "tiny-trained", path: str | None = None, seed: int = 0,
                    tolerance=None) -> dict:
    """One backward of the runtime's training loss (CausalLM.loss in train mode, on `device` /
    `path`) against one backward of the textbook mean NLL of transformers' logits (float32, CPU),
    on the same padded batch. Gradients are matched by parameter name (both follow the Hugging
    Face names; a tied head appears once, as the embedding).

    Observations: parameters (transformers'), grads_compared, grads_missing (a transformers
    parameter the runtime lacks or gave no gradient), grads_extra (a runtime parameter transformers
    lacks), worst_ratio (max over parameters of max|g - g_ref| / (atol + rtol * max|g_ref|)),
    worst_relative (max over parameters of max|g - g_ref| / max|g_ref|),
    max_abs_diff (over all), loss_abs_diff, nonfinite, rtol, atol."""
    dev, path = _common(device, checkpoint, path)
    _, rtol, atol = _tolerance_for(path, tolerance)
    inputs, targets = _pairs(checkpoint, 1, seed)[-1]       # the padded batch
    oracle = copy.deepcopy(_oracle_model(checkpoint)).train()
    oracle.zero_grad(set_to_none=True)
    nll, count = _oracle_loss_sum(oracle, inputs, targets)
    reference_loss = nll / count
    reference_loss.backward()
    model = fixtures.fresh_copy(_runtime_model(checkpoint, device, path)).train()
    model.zero_grad(set_to_none=True)
    loss = model.loss(inputs.to(dev), targets.to(dev))
    loss.backward()
    ours = {name: p.grad for name, p in model.named_parameters()}
    theirs = {name: p.grad for name, p in oracle.named_parameters()}
    missing = sum(1 for name in theirs if ours.get(name) is None)
    extra = sum(1 for name in ours if name not in theirs)
    worst = max_abs = worst_relative = 0.0
    nonfinite = compared_count = 0
    for name, reference in theirs.items():
        if reference is None or ours.get(name) is None:
            continue
        stats = compared(ours[name], reference, rtol=rtol, atol=atol)
        nonfinite += stats["nonfinite"]
        compared_count += 1
        if stats["nonfinite"]:
            worst = max_abs = float("nan")
            continue
        max_abs = max(max_abs, stats["max_abs_diff"])
        worst_relative = max(worst_relative, stats["max_abs_diff"] / stats["max_abs_ref"] if stats["max_abs_ref"] else
                             (0.0 if stats["max_abs_diff"] == 0 else float("inf")))
        worst = max(worst, stats["max_abs_diff"] / (atol + rtol * stats["max_abs_ref"]))
    return {"parameters": len(theirs), "grads_compared": compared_count, "grads_missing": missing,
            "grads_extra": extra, "worst_ratio": worst, "worst_relative": worst_relative,
            "max_abs_diff": max_abs, "loss_abs_diff": abs(float(loss.detach()) - float(reference_loss.detach())), "nonfinite": nonfinite,
            "rtol": rtol, "atol": atol}


def greedy_tokens_agree(*, device: str, checkpoint: str = "tiny-trained", path: str | None = None,
                        new_tokens: int = 24, prompt_tokens: int = 12, seed: int = 0, tolerance=None) -> dict:
    """`new_tokens` greedy tokens from runtime.generate (KV cache on, `device`/`path`) against
    transformers' own generate (greedy, its KV cache, CPU float32), from the same prompt.

    A flip at an exact tie is not a defect, so each runtime token is also judged by transformers'
    logits on the runtime's own prefix (one full forward): it is *consistent* when its logit is
    within the logits tolerance (atol + rtol * max|logit|) of the largest.

    Observations: requested_tokens, greedy_tokens (how many the runtime produced), agreeing_prefix (strict agreement with transformers' tokens),
    consistent_prefix, largest_gap (max over runtime tokens of max logit - chosen logit,
    transformers' logits), rtol, atol."""
    from pvlab.runtime.generate import generate

    _, path = _common(device, checkpoint, path)
    _, rtol, atol = _tolerance_for(path, tolerance)
    transformers = _transformers()
    oracle, model = _oracle_model(checkpoint), _runtime_model(checkpoint, device, path)
    prompt = token_windows(checkpoint, 1, seed)[0][0, :prompt_tokens].tolist()
    ours = generate(model, prompt, max_new_tokens=new_tokens, temperature=0.0, use_cache=True,
                             eos_token_id=None).new_ids
    settings = transformers.GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                                             use_cache=True, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        produced = oracle.generate(torch.tensor([prompt]), generation_config=settings)
        theirs = produced[0, len(prompt):].tolist()
        judged = oracle(input_ids=torch.tensor([prompt + ours[:-1]])).logits[0, len(prompt) - 1:].double()
    agreeing = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    gaps = [float(judged[i].max() - judged[i, token]) for i, token in enumerate(ours)]
    consistent = 0
    for i, gap in enumerate(gaps):
        if gap > atol + rtol * float(judged[i].abs().max()):
            break
        consistent += 1
    return {"requested_tokens": new_tokens, "greedy_tokens": len(ours), "agreeing_prefix": agreeing, "consistent_prefix": consistent,
            "largest_gap": max(gaps) if gaps else 0.0, "rtol": rtol, "atol": atol}
