"""Parity between the reference backend (cpu, reference path, fp32) and the device backend
(cpu: the fast path on the CPU; cuda: the fast path on the GPU): logits, greedy decoding, the
init-time parity gate, and `run --no-gpu` leaving CUDA untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import torch

from . import fixtures
from .mutants.child import python_command
from ._util import device_unavailable, rtol_atol, torch_device


def _device_backend(device: str) -> tuple[str, str]:
    """(device, path) of the backend under test for a falsifier device."""
    torch_device(device)
    return device, "fast"


def logits_parity(*, device: str, checkpoint: str = "tiny-trained", batches: int = 1,
                  tolerance: dict | None = None) -> dict:
    """Logits of held-out batches from cpu:reference (a) and the device backend (b).

    Observations: min_cosine / mean_cosine (per position, over the vocabulary), max_abs_diff,
    max_abs_ref, max_rel_diff (max |a-b| / max |a|), argmax_agreement (fraction of positions with
    the same top token), kl_max / kl_mean (KL(softmax a || softmax b) per position, nats), rtol /
    atol (bfloat16, the device path's compute dtype), positions."""
    from pvlab.runtime.kernels import IGNORE_INDEX

    dev_name, path = _device_backend(device)
    rtol, atol = rtol_atol(tolerance, "bfloat16")
    reference = fixtures.model(checkpoint, "cpu", "reference")
    candidate = fixtures.model(checkpoint, dev_name, path)
    cosines, kls = [], []
    max_abs_diff = max_abs_ref = 0.0
    agree = positions = 0
    with torch.no_grad():
        for batch, row in ((batch, row) for batch in fixtures.heldout_batches(checkpoint, batches)
                           for row in range(batch.inputs.shape[0])):
            # One sequence at a time: float64 logits of both backends stay small at V = 151,936.
            inputs, keep = batch.inputs[row:row + 1], batch.targets[row:row + 1] != IGNORE_INDEX
            a = reference(inputs).double()[keep]                                          # (N, V)
            b = candidate(inputs.to(torch.device(dev_name))).double().cpu()[keep]        # (N, V)
            cosines.append(torch.nn.functional.cosine_similarity(a, b, dim=-1))
            log_pa, log_pb = torch.log_softmax(a, dim=-1), torch.log_softmax(b, dim=-1)
            kls.append((log_pa.exp() * (log_pa - log_pb)).sum(dim=-1))
            max_abs_diff = max(max_abs_diff, float((a - b).abs().max()))
            max_abs_ref = max(max_abs_ref, float(a.abs().max()))
            agree += int((a.argmax(-1) == b.argmax(-1)).sum())
            positions += a.shape[0]
    cosine, kl = torch.cat(cosines), torch.cat(kls)
    if not torch.isfinite(cosine).all():
        cosine = torch.nan_to_num(cosine, nan=-1.0)
    return {
        "min_cosine": float(cosine.min()),
        "mean_cosine": float(cosine.mean()),
        "max_abs_diff": max_abs_diff,
        "max_abs_ref": max_abs_ref,
        "max_rel_diff": max_abs_diff / max_abs_ref if max_abs_ref else float("inf"),
        "argmax_agreement": agree / positions,
        "kl_max": float(kl.max()),
        "kl_mean": float(kl.mean()),
        "rtol": rtol,
        "atol": atol,
        "positions": positions,
    }


def _prompts(checkpoint: str, count: int, length: int) -> list[list[int]]:
    """The first `length` tokens of `count` held-out documents (real text the model has not seen)."""
    prepared = fixtures.prepared_data(checkpoint)
    tokenizer = fixtures.model(checkpoint, "cpu", "reference").tokenizer
    prompts = []
    for document in prepared.heldout_documents:
        ids = tokenizer.encode(document).ids
        if len(ids) >= length:
            prompts.append(ids[:length])
        if len(prompts) == count:
            break
    if len(prompts) < count:
        raise RuntimeError(f"only {len(prompts)} held-out documents have {length} tokens")
    return prompts


def greedy_decode_parity(*, device: str, checkpoint: str = "tiny-trained", prompts: int = 6,
                         prompt_tokens: int = 8, new_tokens: int = 32, tolerance: dict | None = None) -> dict:
    """Greedy runtime.generate.generate on the device backend (its real decode loop and KV cache)
    from the beginnings of held-out documents, judged against the reference backend.

    A token is *consistent* when the reference, fed the device's own prefix, would pick it
    greedily too — or ranks it within the bf16 logit tolerance of its top token (a near-tie:
    2 * (atol + rtol * |top logit|)). Gibberish, a wrong position or a dropped bias produces
    tokens the reference ranks far below its choice.

    Observations: consistent_prefix (shortest run of consistent leading tokens over the prompts),
    agreeing_prefix (shortest run of tokens identical to the reference's own greedy decode — strict,
    breaks at the first near-tie flip), agreeing_tokens (identical positions, summed),
    near_tie_flips (consistent tokens that differ from the reference's top choice), largest_tie_gap
    (largest reference logit gap among those), new_tokens, prompts."""
    from pvlab.runtime.generate import generate

    dev_name, path = _device_backend(device)
    rtol, atol = rtol_atol(tolerance, "bfloat16")
    reference = fixtures.model(checkpoint, "cpu", "reference")
    candidate = fixtures.model(checkpoint, dev_name, path)
    consistent_min = strict_min = new_tokens
    agreeing_total = flips = 0
    largest_tie_gap = 0.0
    for ids in _prompts(checkpoint, prompts, prompt_tokens):
        a = generate(reference, ids, max_new_tokens=new_tokens, temperature=0.0).new_ids
        b = generate(candidate, ids, max_new_tokens=new_tokens, temperature=0.0).new_ids
        strict = 0
        for x, y in zip(a, b):
            if x != y:
                break
            strict += 1
        strict_min = min(strict_min, strict if len(b) == new_tokens else min(strict, len(b)))
        agreeing_total += sum(1 for x, y in zip(a, b) if x == y)
        with torch.no_grad():
            logits = reference(torch.tensor([ids + b])).double()[0]                     # (P + N, V)
        consistent = 0
        for j, token in enumerate(b):
            row = logits[len(ids) - 1 + j]
            top = float(row.max())
            gap = top - float(row[token])
            if gap > 2 * (atol + rtol * abs(top)):
                break
            if gap > 0:
                flips += 1
                largest_tie_gap = max(largest_tie_gap, gap)
            consistent += 1
        consistent_min = min(consistent_min, consistent)
    return {"consistent_prefix": consistent_min, "agreeing_prefix": strict_min, "agreeing_tokens": agreeing_total,
            "near_tie_flips": flips, "largest_tie_gap": largest_tie_gap, "new_tokens": new_tokens,
            "prompts": prompts}


def parity_gate(*, device: str, checkpoint: str = "tiny-trained") -> dict:
    """Place the checkpoint on the device backend through runtime.load with the parity gate on:
    once as it is (must be accepted), once with a divergence planted in the device path only
    (the registered planted bug fast_path_reverses_output_features: the fast path's linear layers
    reverse their output features — gibberish, as in the bug hunt, while the CPU reference stays
    intact; must be refused with ParityGateError).

    Observations: gate_accepted_faithful, gate_refused_diverging (1/0), faithful_min_cosine
    (from the accepted model's parity report), diverging_min_cosine (the planted model's logits
    against the reference, measured here)."""
    from pvlab.runtime import checkpoint as runtime_checkpoint
    from pvlab.runtime.errors import ParityGateError

    from .mutants import registry

    dev_name, path = _device_backend(device)
    directory = fixtures.checkpoint_dir(checkpoint)
    accepted, faithful_cosine = 0, float("nan")
    try:
        model = runtime_checkpoint.load(directory, device=dev_name, path=path, parity_gate=True)
        accepted = 1
        report = getattr(model, "parity_report", None)
        faithful_cosine = float(report.min_cosine) if report is not None else float("nan")
    except ParityGateError:
        accepted = 0

    # Taken before the divergence is planted: the fixtures would rebuild them under it.
    probe = fixtures.heldout_batches(checkpoint, 1)[0].inputs[:1, :32]
    with torch.no_grad():
        a = fixtures.model(checkpoint, "cpu", "reference")(probe).double()
    refused, diverging_cosine = 0, float("nan")
    with registry()["fast_path_reverses_output_features"]():  # the registered planted divergence
        try:
            runtime_checkpoint.load(directory, device=dev_name, path=path, parity_gate=True)
        except ParityGateError:
            refused = 1
        ungated = runtime_checkpoint.load(directory, device=dev_name, path=path, parity_gate=False)
        with torch.no_grad():
            b = ungated(probe.to(torch.device(dev_name))).double().cpu()
    diverging_cosine = float(torch.nn.functional.cosine_similarity(a, b, dim=-1).min())
    return {"gate_accepted_faithful": accepted, "gate_refused_diverging": refused,
            "faithful_min_cosine": faithful_cosine, "diverging_min_cosine": diverging_cosine}


_NO_GPU_DRIVER = textwrap.dedent("""
    import contextlib, io, json, sys
    import torch
    from pvlab.runtime import cli
    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out):
        try:
            cli.main(args=sys.argv[1:], prog_name="python -m pvlab.runtime", standalone_mode=False)
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
    print(json.dumps({"cuda_initialized": bool(torch.cuda.is_initialized()), "exit_code": code,
                      "stdout": out.getvalue()}))
""")


def no_gpu_context(*, device: str, checkpoint: str = "tiny-trained", prompt: str = "def ", max_tokens: int = 16,
                   timeout_s: float = 300.0) -> dict:
    """Run `python -m pvlab.runtime run DIR --prompt ... --no-gpu` (the CLI's main, in a fresh Python
    process) and report whether CUDA got initialised in that process. Needs a machine with a
    CUDA GPU (otherwise there is no context to avoid): DeviceUnavailable elsewhere.

    Observations: cuda_context_created (1/0), generated_tokens (tokens of the printed text
    beyond the prompt's), exit_code, cuda_available_in_parent."""
    if device != "cuda" or not torch.cuda.is_available():
        raise device_unavailable("the --no-gpu falsifier needs a machine with a CUDA GPU")
    directory = fixtures.checkpoint_dir(checkpoint)
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # imports pvlab
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    completed = subprocess.run(  # through python_command: a planted bug is planted in the child too
        python_command("-c", _NO_GPU_DRIVER, "run", str(directory), "--prompt", prompt, "--max-tokens",
                       str(max_tokens), "--no-gpu"),
        capture_output=True, text=True, timeout=timeout_s, env=env, cwd=root)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if completed.returncode != 0 or not lines:
        raise RuntimeError(f"driver exited {completed.returncode}: {completed.stderr[-2000:]}")
    report = json.loads(lines[-1])
    tokenizer = fixtures.model(checkpoint, "cpu", "reference").tokenizer
    text = report["stdout"].rstrip("\n")
    generated = len(tokenizer.encode(text).ids) - len(tokenizer.encode(prompt).ids) if text.startswith(prompt) else 0
    return {"cuda_context_created": int(report["cuda_initialized"]), "generated_tokens": max(generated, 0),
            "exit_code": report["exit_code"], "cuda_available_in_parent": int(torch.cuda.is_available())}
