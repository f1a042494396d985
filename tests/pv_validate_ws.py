"""Helpers for the `pv validate` tests (imported by name: `from pv_validate_ws import ...`; a
module called `conftest` is ambiguous once test folders have their own).

`vworkspace` builds a throw-away workspace for `pv validate` (pyproject.toml with [tool.pv],
contracts/, a tiny falsifiers/ package that is only ever parsed, never imported), chdirs into
it, and offers `write`, `contract` (the known-good contract with text replacements) and `run`
(the CLI through click's CliRunner). Nothing here reads the repository's own contracts.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from pv.schema import SCHEMA_PATH

PYPROJECT = """\
[tool.pv]
contracts_dir = "contracts"
check_packages = ["falsifiers"]
mutants_module = "falsifiers.mutants"
"""

FALSIFIERS = {
    "falsifiers/__init__.py": "from .demo import measure as reexported\n",
    "falsifiers/demo.py": '''\
import torch  # never imported by pv validate: it parses this file


def measure(*, device, checkpoint, batches=1, tolerance=None):
    """observations: val_loss, vocab_size"""
    return {"val_loss": 1.0, "vocab_size": 1024}


def needs_extra(*, device, checkpoint, extra):
    return {}


def anything(device, **kwargs):
    return {}


async def later(*, device, checkpoint):
    return {}


def positional(device, checkpoint, /):
    return {}


alias = measure
''',
    "falsifiers/mutants.py": '''\
from pv.mutation import mutant


@mutant("drops_bias")
def drops_bias():
    yield
''',
    "elsewhere/__init__.py": "",
    "elsewhere/checks.py": "def measure(*, device, checkpoint):\n    return {}\n",
}

GOOD_ID = "demo-forward"
GOOD_NAME = f"{GOOD_ID}-v1.yaml"

# The line numbers of this text are part of the tests (found with line_of, never hard-coded).
GOOD = """\
# yaml-language-server: $schema={schema}
metadata:
  id: demo-forward
  version: 1.0.0
  kind: pattern
  status: DRAFT
  description: The forward pass of a trained checkpoint is far better than uniform.
  references: ["pv tests"]
  depends_on: []
equations:
  bound:
    formula: "val_loss < 0.7 * ln(vocab_size)"
proof_obligations:
  - id: DEMO-BND-001
    type: bound
    property: Eval loss is far below uniform
    falsifiers: [FALSIFY-DEMO-FORWARD-001]
falsification_tests:
  - id: FALSIFY-DEMO-FORWARD-001
    rule: Eval loss of a trained checkpoint is well below uniform
    prediction: "val_loss < 0.7 * ln(vocab_size)"
    check: falsifiers.demo:measure
    params: {{checkpoint: tiny, batches: 2}}
    devices: [cpu]
    if_fails: The forward drops a bias or another structural defect.
    mutants: [drops_bias]
"""

DIAG = re.compile(r"^(?P<path>[^\n]+?):(?P<line>\d+):(?P<col>\d+): (?P<code>PV\d{3}) (?P<warning>warning: )?(?P<message>.*)$",
                  re.M)


@dataclass(frozen=True)
class Found:
    path: str
    line: int
    col: int
    code: str
    warning: bool
    message: str


def parse_output(text: str) -> list[Found]:
    return [Found(m["path"], int(m["line"]), int(m["col"]), m["code"], bool(m["warning"]), m["message"])
            for m in DIAG.finditer(text)]


def line_of(text: str, needle: str, nth: int = 1) -> int:
    """1-based line of the nth line containing `needle`."""
    hits = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(hits) >= nth, f"{needle!r} not found {nth} times"
    return hits[nth - 1]


# `pv validate` in a process of its own, as a user's shell runs it.
PV = [sys.executable, "-c", "from pv.cli import main; main()"]


def only(result, code: str) -> list[Found]:
    """The diagnostics with `code`, asserting there is at least one."""
    found = [d for d in parse_output(result.output) if d.code == code]
    assert found, f"no {code} in:\n{result.output}"
    return found


def codes(result) -> set[str]:
    return {d.code for d in parse_output(result.output)}


class VWorkspace:
    def __init__(self, root: Path):
        self.root = root
        self.contracts = root / "contracts"
        self.schema = os.path.relpath(SCHEMA_PATH, self.contracts)

    def write(self, rel: str, text: str | bytes) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path

    def good_text(self, *replacements: tuple[str, str]) -> str:
        text = GOOD.format(schema=self.schema)
        for old, new in replacements:
            assert old in text, f"{old!r} is not in the good contract"
            text = text.replace(old, new, 1)
        return text

    def contract(self, *replacements: tuple[str, str], name: str = GOOD_NAME) -> tuple[Path, str]:
        """Write the good contract with `(old, new)` text replacements; returns (path, text)."""
        text = self.good_text(*replacements)
        return self.write(f"contracts/{name}", text), text

    def run(self, *args: str):
        from click.testing import CliRunner

        from pv.cli import main

        return CliRunner().invoke(main, ["validate", *args], catch_exceptions=False)


def make_vworkspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> VWorkspace:
    root = tmp_path / "ws"
    root.mkdir()
    ws = VWorkspace(root)
    ws.write("pyproject.toml", PYPROJECT)
    for rel, text in FALSIFIERS.items():
        ws.write(rel, text)
    ws.contracts.mkdir()
    monkeypatch.chdir(root)
    return ws


def other_contract(vworkspace, cid: str = "demo-other", *extra: tuple[str, str]):
    """A second valid contract beside the good one: its own id, file name and falsifier ids."""
    return vworkspace.contract(("id: demo-forward", f"id: {cid}"), ("DEMO-BND-001", "OTHER-BND-001"),
                               ("FALSIFY-DEMO-FORWARD-001]", "FALSIFY-OTHER-001]"),
                               ("- id: FALSIFY-DEMO-FORWARD-001", "- id: FALSIFY-OTHER-001"), *extra,
                               name=f"{cid}-v1.yaml")
