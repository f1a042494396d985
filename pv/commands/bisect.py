"""`pv bisect`: localise a divergence between two backends of a runtime, op by op.

Both backends run the same input with forward hooks on every op the workspace's bisect
adapter names (embedding; each block's input norm, q, k, v, attention, o, post norm, mlp;
final norm; logits). Each op's output is compared (cosine, max abs diff, relative L2 error)
against the tolerance of the less precise of the two dtypes, and the first op out of
tolerance is named: that is where the backends part ways.

The backends run one after the other in this process, and a `--mutant` applies only while
backend B runs, so a planted bug in a shared kernel shows up on one side only.

The adapter (`[tool.pv] bisect_adapter`, a module) keeps pv independent of the runtime:
    load(checkpoint, *, device, path, dtype) -> model
    encode(model, prompt) -> inputs
    ops(model) -> [(op_name, module, "output" | "input"), ...]   in execution order
    run(model, inputs) -> None
    compute_dtype(path, dtype) -> "float32" | "bfloat16" | ...   the precision a backend computes in
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import sys
from dataclasses import asdict, dataclass
from typing import Any

import click

from pv import tolerance as tolerances
from pv.commands import pass_workspace
from pv.config import Workspace

DTYPE_ORDER = ["float64", "float32", "float16", "bfloat16"]  # most to least precise


@dataclass(frozen=True)
class Backend:
    device: str
    path: str
    dtype: str | None = None

    @classmethod
    def parse(cls, spec: str) -> "Backend":
        parts = spec.split(":")
        if len(parts) not in (2, 3) or not all(parts):
            raise click.BadParameter(f"{spec!r}: expected DEVICE:PATH[:DTYPE], e.g. cpu:reference or cuda:fast")
        device, path = parts[0], parts[1]
        dtype = parts[2] if len(parts) == 3 else None
        if dtype is not None and dtype not in tolerances.DTYPES:
            raise click.BadParameter(f"{spec!r}: unknown dtype {dtype!r}; known: {', '.join(tolerances.DTYPES)}")
        return cls(device, path, dtype)

    def __str__(self) -> str:
        return f"{self.device}:{self.path}" + (f":{self.dtype}" if self.dtype else "")


@dataclass(frozen=True)
class OpComparison:
    op: str
    shape: list[int]
    cosine: float
    max_abs_diff: float
    max_abs_ref: float
    rel_l2: float
    bound: float  # the largest max_abs_diff this op may show
    within: bool
    note: str = ""  # why an op could not be compared (it ran on one side only, shapes differ)


def capture(adapter: Any, model: Any, inputs: Any) -> dict[str, Any]:
    """Run the model once and return each op's activation (float64, on the CPU)."""
    import torch

    captured: dict[str, Any] = {}
    handles = []

    def hook_for(name: str, side: str):
        def hook(module, args, output):
            value = args[0] if side == "input" else output
            if isinstance(value, tuple):
                value = value[0]
            captured[name] = value.detach().to("cpu", dtype=torch.float64)
        return hook

    try:
        for name, module, side in adapter.ops(model):
            handles.append(module.register_forward_hook(hook_for(name, side)))
        adapter.run(model, inputs)
    finally:
        for handle in handles:
            handle.remove()
    order = [name for name, _, _ in adapter.ops(model)]
    return {name: captured[name] for name in order if name in captured}


def compare(name: str, a: Any, b: Any, rtol: float, atol: float) -> OpComparison:
    import torch

    if a.shape != b.shape:
        return OpComparison(name, list(a.shape), float("nan"), float("inf"), float(a.abs().max()), float("inf"),
                            0.0, False, f"shape differs: b is {list(b.shape)}")
    diff = (a - b).abs()
    a_flat, b_flat = a.flatten(), b.flatten()
    denom = a_flat.norm() * b_flat.norm()
    cosine = float(torch.dot(a_flat, b_flat) / denom) if denom > 0 else (1.0 if diff.max() == 0 else 0.0)
    max_abs_ref = float(a.abs().max()) if a.numel() else 0.0
    max_abs_diff = float(diff.max()) if a.numel() else 0.0
    ref_norm = float(a_flat.norm())
    rel_l2 = float((a_flat - b_flat).norm()) / ref_norm if ref_norm > 0 else (0.0 if max_abs_diff == 0 else math.inf)
    bound = atol + rtol * max_abs_ref
    within = math.isfinite(max_abs_diff) and max_abs_diff <= bound
    return OpComparison(name, list(a.shape), cosine, max_abs_diff, max_abs_ref, rel_l2, bound, within)


def skipped_op(name: str, value: Any, missing_on: str) -> OpComparison:
    """An op that ran on one backend only (e.g. a skipped final norm): a divergence by itself."""
    nan = float("nan")
    return OpComparison(name, list(value.shape), nan, float("inf"), float(value.abs().max()), float("inf"), 0.0,
                        False, f"did not run on {missing_on}")


def least_precise(*dtypes: str) -> str:
    return max(dtypes, key=DTYPE_ORDER.index)


@dataclass
class BisectReport:
    checkpoint: str
    a: str
    b: str
    dtype: str
    rtol: float
    atol: float
    mutant: str | None
    rows: list[OpComparison]

    @property
    def first_divergence(self) -> OpComparison | None:
        return next((r for r in self.rows if not r.within), None)

    def to_json(self) -> dict[str, Any]:
        first = self.first_divergence
        return {
            "checkpoint": self.checkpoint, "a": self.a, "b": self.b, "tolerance_dtype": self.dtype,
            "rtol": self.rtol, "atol": self.atol, "mutant": self.mutant,
            "first_divergence": first.op if first else None,
            "ops": [_finite(asdict(r)) for r in self.rows],
        }

    def to_markdown(self) -> str:
        lines = [
            f"pv bisect {self.checkpoint}: a = {self.a}, b = {self.b}"
            + (f", mutant {self.mutant} on b" if self.mutant else ""),
            f"tolerance ({self.dtype}): |a-b|max <= {self.atol:g} + {self.rtol:g}·|a|max",
            "",
            "| op | shape | cosine | max abs diff | bound | rel L2 | |",
            "| --- | --- | ---: | ---: | ---: | ---: | --- |",
        ]
        first = self.first_divergence
        for row in self.rows:
            mark = "ok" if row.within else ("**FIRST OUT OF TOLERANCE**" if row is first else "out")
            if row.note:
                mark += f" ({row.note})"
            shape = "×".join(str(s) for s in row.shape)
            lines.append(f"| {row.op} | {shape} | {row.cosine:.6f} | {row.max_abs_diff:.3e} | {row.bound:.3e} "
                         f"| {row.rel_l2:.3e} | {mark} |")
        lines.append("")
        lines.append(f"first op out of tolerance: {first.op}" if first else "every op within tolerance")
        return "\n".join(lines)


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (repr(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def bisect(adapter: Any, checkpoint: str, a: Backend, b: Backend, prompt: str, *,
           mutant_context: Any = None, mutant: str | None = None, judge_dtype: str | None = None,
           rtol: float | None = None, atol: float | None = None) -> BisectReport:
    dtype = judge_dtype or least_precise(adapter.compute_dtype(a.path, a.dtype),
                                         adapter.compute_dtype(b.path, b.dtype))
    table = tolerances.merged()[dtype]
    rtol = table["rtol"] if rtol is None else rtol
    atol = table["atol"] if atol is None else atol

    model_a = adapter.load(checkpoint, device=a.device, path=a.path, dtype=a.dtype)
    acts_a = capture(adapter, model_a, adapter.encode(model_a, prompt))
    del model_a
    with (mutant_context or contextlib.nullcontext()):
        model_b = adapter.load(checkpoint, device=b.device, path=b.path, dtype=b.dtype)
        acts_b = capture(adapter, model_b, adapter.encode(model_b, prompt))
    rows = [compare(name, acts_a[name], acts_b[name], rtol, atol) if name in acts_b else skipped_op(name, acts_a[name], "b")
            for name in acts_a]
    rows += [skipped_op(name, acts_b[name], "a") for name in acts_b if name not in acts_a]
    return BisectReport(checkpoint, str(a), str(b), dtype, rtol, atol, mutant, rows)


def load_adapter(module_name: str | None) -> Any:
    if not module_name:
        raise click.UsageError("no bisect adapter: set `bisect_adapter = \"pkg.module\"` in [tool.pv]")
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise click.UsageError(f"cannot import bisect adapter {module_name!r}: {exc}") from None


@click.command(name="bisect")
@click.argument("checkpoint")
@click.option("--a", "spec_a", default="cpu:reference", show_default=True,
              help="Reference backend, DEVICE:PATH[:DTYPE].")
@click.option("--b", "spec_b", default="cuda:fast", show_default=True,
              help="Backend under test, DEVICE:PATH[:DTYPE].")
@click.option("--dtype", type=click.Choice(tolerances.DTYPES), default=None,
              help="Judge with this dtype's tolerance instead of the less precise backend's.")
@click.option("--prompt", default="def fibonacci(n):\n    if n < 2:\n        return n\n", show_default=False,
              help="Input text (default: a short Python function).")
@click.option("--rtol", type=float, default=None, help="Override the relative tolerance.")
@click.option("--atol", type=float, default=None, help="Override the absolute tolerance.")
@click.option("--mutant", default=None, help="Plant this registered bug while backend B runs.")
@click.option("--format", "fmt", type=click.Choice(["markdown", "json"]), default="markdown", show_default=True)
@pass_workspace
def command(checkpoint: str, spec_a: str, spec_b: str, dtype: str | None, prompt: str, rtol: float | None,
            atol: float | None, mutant: str | None, fmt: str, *, workspace: Workspace) -> None:
    """Compare two backends op by op on CHECKPOINT and name the first op out of tolerance.

    CHECKPOINT is a checkpoint directory or a name the adapter knows (e.g. tiny-trained).
    Exit 0 when every op is within tolerance, 1 when one is not, 2 on a usage error.

    \b
    Examples:
      pv bisect tiny-trained --a cpu:reference --b cuda:fast
      pv bisect tiny-trained --a cpu:reference:float64 --b cpu:reference:float32
      pv bisect tiny-trained --a cpu:reference --b cpu:fast --format json
    """
    a, b = Backend.parse(spec_a), Backend.parse(spec_b)
    adapter = load_adapter(workspace.bisect_adapter)
    context = None
    if mutant:
        from pv import mutation

        try:
            context = mutation.get(mutation.load_registry(workspace), mutant)()
        except mutation.MutationError as exc:
            raise click.UsageError(str(exc)) from None
    error_types = tuple(getattr(adapter, "INPUT_ERRORS", ()))
    try:
        report = bisect(adapter, checkpoint, a, b, prompt, mutant_context=context, mutant=mutant,
                        judge_dtype=dtype, rtol=rtol, atol=atol)
    except error_types as exc:  # the adapter's "bad input" errors: a clear message, no traceback
        raise click.ClickException(str(exc)) from None
    if fmt == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo(report.to_markdown())
    sys.exit(1 if report.first_divergence else 0)

