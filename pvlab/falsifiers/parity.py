"""pvlab's own parity checks: the init-time parity gate, and `run --no-gpu` leaving CUDA
untouched. (Logits and greedy-decoding parity between the reference and the device backend are
the falsifier pack's, runtime-neutral: pvpack.checks.parity.)
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import torch

from . import fixtures
from .mutants.child import python_command
from ._util import device_unavailable, torch_device


def _device_backend(device: str) -> tuple[str, str]:
    """(device, path) of the backend under test for a falsifier device."""
    torch_device(device)
    return device, "fast"


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
