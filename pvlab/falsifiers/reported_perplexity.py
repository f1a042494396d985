"""The perplexity `python -m pvlab.runtime eval` reports is exp of the held-out loss it reports.

The runtime's losses are mean next-token cross-entropies in nats (natural logarithms), so the
perplexity of a loss L is e ** L. A report that uses 2 ** L (the bits convention applied to nats)
or exp of another loss reads plausibly and is wrong by a factor that grows with the loss; no check
compared the reported perplexity with its definition (runtime_cli_matches_library judges the
losses eval reports, not the perplexity beside them).

The check runs `eval DIR --json` and `eval DIR` (the text form, 4 decimals) in process (click's
runner) on a checkpoint, and compares each reported perplexity with math.e ** val_loss computed
here in float64 from the val_loss the same output reports. The non-vacuity: a held-out loss
above 1 nat, where e ** L and 2 ** L differ by more than 40 %.
"""

from __future__ import annotations

import json
import math
import re

from ._util import torch_device
from .fixtures import checkpoint_dir

_LINE = re.compile(r"^\s*(?P<key>perplexity|val_loss):\s*(?P<value>[-+\d.eE]+|inf|nan)\s*$", re.MULTILINE)


def _figure(text: str, key: str) -> float:
    for match in _LINE.finditer(text):
        if match.group("key") == key:
            return float(match.group("value"))
    return math.nan


def eval_perplexity_is_exp_of_loss(*, device: str, checkpoint: str = "tiny-trained", batches: int = 2) -> dict:
    """Observations: json_rel_error (|perplexity - e ** val_loss| / e ** val_loss of `eval
    --json`), text_rel_error (the same for the text output, whose figures have 4 decimals),
    val_loss (the JSON's), failed_commands (an eval that did not exit 0 or printed no figure)."""
    torch_device(device)
    from click.testing import CliRunner

    from pvlab.runtime.cli import main

    directory = str(checkpoint_dir(checkpoint))
    common = ["eval", directory, "--device", device, "--batches", str(batches)]
    failed = 0
    as_json = CliRunner().invoke(main, [*common, "--json"], catch_exceptions=True)
    as_text = CliRunner().invoke(main, common, catch_exceptions=True)
    report: dict = {}
    if as_json.exit_code == 0 and as_json.output.strip():
        report = json.loads(as_json.output.strip().splitlines()[-1])
    else:
        failed += 1
    val, ppl = float(report.get("val_loss", math.nan)), float(report.get("perplexity", math.nan))
    text_val, text_ppl = _figure(as_text.output, "val_loss"), _figure(as_text.output, "perplexity")
    failed += int(as_text.exit_code != 0 or math.isnan(text_val) or math.isnan(text_ppl))
    expected, text_expected = math.e ** val, math.e ** text_val
    return {
        "json_rel_error": abs(ppl - expected) / expected if math.isfinite(expected) else math.inf,
        "text_rel_error": abs(text_ppl - text_expected) / text_expected if math.isfinite(text_expected) else math.inf,
        "val_loss": val, "failed_commands": failed,
    }
