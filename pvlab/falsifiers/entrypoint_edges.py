"""Two edges of the runtime's entry points that the end-to-end checks of entrypoints.py do not
reach: what pretraining shows on a terminal, and the window `eval --corpus` scores a checkpoint
that records no training recipe with.

Oracles written here: the bar's documented form (`[###...] step/total loss L r steps/s`, one
update per optimizer step, in order) and one plain line per evaluation; the documented default
window of 128 tokens (the tiny preset's context is 256, so the default, not the context, decides)
and float64 NLL of the model's logits over those windows.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import tempfile
from pathlib import Path

from .entrypoints import _cli, _clean_exit, _corpus_stream, _nll64, _pretrain_module, _python_corpus, _rel, _small_recipe


class _Terminal(io.StringIO):
    """A stream that says it is a terminal (the progress bar draws only on one)."""

    def isatty(self) -> bool:
        return True


_BAR = re.compile(r"\r\[([#.]+)\] (\S+)/(\d+) loss (\S+) ")
_EVAL = re.compile(r"step\s+(\d+)/(\d+)\s+train_loss")


def progress_and_default_window(*, device: str, steps: int = 5, eval_every: int = 2, default_window: int = 128,
                                tolerance: dict | None = None) -> dict:
    """(1) runtime.pretrain.pretrain with progress on, its stderr a terminal: the bar is drawn once
    per optimizer step with the step number 1..`steps` over `steps`, a finite loss and a fill
    proportional to the step; one evaluation line per recorded evaluation. (2) `python -m
    pvlab.runtime eval --corpus DIR --json` of the tiny-trained checkpoint with its recipe
    removed from runtime.json scores windows of `default_window` tokens (batch 8, every full
    window of the directory's stream), with the float64 loss over exactly those windows.

    Observations: bar_steps_wrong, bar_fill_wrong, eval_lines_wrong, completed (pretrain
    returned), window_tokens_wrong, window_rel_diff, rtol, failed (eval did not exit 0)."""
    import math

    from pvlab.runtime import checkpoint, data

    from . import fixtures
    from ._util import rtol_atol

    rtol, _ = rtol_atol(tolerance, "float32")
    pretrain = _pretrain_module()
    recipe = _small_recipe(steps=steps, eval_every=eval_every)
    terminal = _Terminal()
    out: dict = {"rtol": rtol}
    with tempfile.TemporaryDirectory(prefix="pv-edges-") as tmp:
        try:
            with contextlib.redirect_stderr(terminal):
                results = pretrain.pretrain(recipe, Path(tmp) / "run", device="cpu", path="reference", progress=True)
            out["completed"] = 1
        except Exception:  # noqa: BLE001 - pretrain crashing on its own progress output is the finding
            results, out["completed"] = {"history": []}, 0
        text = terminal.getvalue()
        bars = _BAR.findall(text)
        out["bar_steps_wrong"] = int([(s, int(t)) for _, s, t, _ in bars] != [(str(k), steps) for k in range(1, steps + 1)]
                                     or not all(math.isfinite(float(loss)) for *_, loss in bars))
        out["bar_fill_wrong"] = sum(1 for fill, s, t, _ in bars
                                    if not s.isdigit() or fill.count("#") != int(30 * int(s) / int(t)))
        evals = [int(m[1]) for m in _EVAL.finditer(text)]
        out["eval_lines_wrong"] = int(not evals or evals != [record["step"] for record in results["history"]])

        source = fixtures.checkpoint_dir("tiny-trained")
        bare = Path(tmp) / "bare"
        shutil.copytree(source, bare)
        meta = json.loads((bare / "runtime.json").read_text(encoding="utf-8"))
        meta.pop("recipe", None)
        (bare / "runtime.json").write_text(json.dumps(meta), encoding="utf-8")
        corpus_dir = _python_corpus(Path(tmp) / "corpus", "def g{index}_{k}(y):\n    return y - {k} * {index}\n\n", 40)
        result = _cli(["eval", str(bare), "--corpus", str(corpus_dir), "--json"])
        model = checkpoint.load(bare, device="cpu", path="reference")
        stream = _corpus_stream(model, corpus_dir)
        rows = stream.numel() // (default_window + 1)
        windows = stream[:rows * (default_window + 1)].view(rows, default_window + 1)
        batches = [data.LMBatch(inputs=windows[i:i + 8, :-1], targets=windows[i:i + 8, 1:]) for i in range(0, rows, 8)]
        total, count = _nll64(model, batches)
    if not _clean_exit(result, 0):
        return {**out, "failed": 1, "window_tokens_wrong": 1, "window_rel_diff": math.inf}
    report = json.loads(result.output.strip().splitlines()[-1])
    return {**out, "failed": 0, "window_tokens_wrong": int(report.get("tokens") != count or rows < 2),
            "window_rel_diff": _rel(report.get("val_loss"), total / count)}
