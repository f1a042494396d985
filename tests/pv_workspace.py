"""Throw-away pv workspaces for pv's own tests: pyproject.toml with [tool.pv], contracts/, and a
tiny pure-Python check package (no torch), so the tests never depend on the repo's contracts.

Each workspace gets its own check-package name (derived from the temp dir) so modules imported
in-process by one test can never be mistaken for another test's.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

import yaml

CHECKS = '''\
from pv.harness import DeviceUnavailable

STATE = {"bias": True}


def loss(*, device, vocab_size=1024, loss=2.0, seed=0):
    """observations: val_loss, vocab_size"""
    if not STATE["bias"]:
        loss = 18.55
    return {"val_loss": loss, "vocab_size": vocab_size}


def boom(*, device):
    return 1 / 0


def not_a_dict(*, device):
    return 3.0


def needs_gpu(*, device):
    raise DeviceUnavailable("no accelerator of the required kind on this machine")


def tol(*, device, tolerance):
    return {"rtol": tolerance["float32"]["rtol"], "bf16_rtol": tolerance["bfloat16"]["rtol"]}


def no_tol(*, device, **kwargs):
    return {"got_tolerance": "tolerance" in kwargs}


def hang(*, device):
    import time

    time.sleep(120)  # a check that never returns in any reasonable time
    return {"x": 2}
'''

MUTANTS = '''\
from contextlib import contextmanager

from pv.mutation import mutant

from {package} import basic


@contextmanager
def without_bias():
    basic.STATE["bias"] = False
    try:
        yield
    finally:
        basic.STATE["bias"] = True


@mutant("drops_bias")
def drops_bias():
    """The forward forgets the attention biases."""
    with without_bias():
        yield


@mutant("does_nothing")
def does_nothing():
    """A mutant the falsifiers cannot see."""
    yield
'''


def assert_contains(text: str, expected: list[str]) -> None:
    """Every piece of `expected` is in `text` (a command's output, a written report); a failure
    names every missing piece at once and shows the text."""
    missing = [piece for piece in expected if piece not in text]
    assert not missing, f"missing from the text: {missing!r}\n--- text ---\n{text}"


def hand_written_contract(check: str | None = None) -> str:
    """A small valid contract as a person types it (block style, keys in the usual order), with
    its `prediction:` on line 10; `check` adds a `check:` line after it."""
    lines = [
        "metadata:",
        "  id: demo",
        "  version: 1.0.0",
        "  kind: pattern",
        "  status: DRAFT",
        "  description: A demo contract.",
        "falsification_tests:",
        "  - id: FALSIFY-DEMO-001",
        "    rule: loss is small",
        "    prediction: loss < 1",
        *([] if check is None else [f"    check: {check}"]),
        "    devices: [cpu]",
        "    if_fails: look at the loss",
    ]
    return "\n".join(lines) + "\n"


def falsifier(fid: str, prediction: str = "val_loss < 0.7 * ln(vocab_size)", check: str | None = "basic:loss",
              devices: tuple[str, ...] = ("cpu",), **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"id": fid, "rule": f"rule of {fid}", "prediction": prediction}
    if check is not None:
        data["check"] = check  # completed with the package name by contract_yaml
    data["devices"] = list(devices)
    data["if_fails"] = f"look at {fid}"
    data.update(extra)
    return data


def contract_yaml(cid: str, falsifiers: list[dict[str, Any]], package: str, version: str = "1.0.0",
                  description: str = "A demo contract.") -> str:
    tests = []
    for f in falsifiers:
        f = dict(f)
        if f.get("check") and "." not in f["check"].split(":")[0]:  # "basic:loss" -> "<package>.basic:loss"
            f["check"] = f"{package}.{f['check']}"
        tests.append(f)
    doc = {
        "metadata": {"id": cid, "version": version, "kind": "pattern", "status": "DRAFT",
                     "description": description},
        "falsification_tests": tests,
    }
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


class Ws:
    """A workspace on disk."""

    def __init__(self, root: Path, package: str):
        self.root = root
        self.package = package
        self.contracts = root / "contracts"
        self.generated = root / "generated_tests"
        self.ledger = root / "evidence" / "ledger.jsonl"

    def add_contract(self, cid: str, falsifiers: list[dict[str, Any]], filename: str | None = None,
                     **kw: Any) -> Path:
        path = self.contracts / (filename or f"{cid}-v1.yaml")
        path.write_text(contract_yaml(cid, falsifiers, self.package, **kw), encoding="utf-8")
        return path

    def enter(self, monkeypatch: Any) -> "Ws":
        """Work inside this workspace, as `pv` is run in it: the current directory, CUDA absent."""
        monkeypatch.chdir(self.root)
        monkeypatch.setenv("PV_FORCE_NO_CUDA", "1")
        return self

    def workspace(self):
        from pv.config import load_workspace

        return load_workspace(self.root)

    def generate(self) -> None:
        from pv import codegen

        plan = codegen.build_plan(self.workspace())
        assert not plan.invalid, [d.format() for d in plan.diagnostics]
        codegen.apply(plan, echo=lambda _line: None)

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(self.root), *filter(None, [env.get("PYTHONPATH")])])
        env.pop("PYTEST_ADDOPTS", None)
        env.pop("PYTEST_XDIST_WORKER", None)
        env.update(extra)
        return env

    def pytest(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run pytest in the workspace (a subprocess, as `pv run` does)."""
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
            cwd=self.root, env=env or self.env(PV_FORCE_NO_CUDA="1"), capture_output=True, text=True,
            timeout=120,
        )

    def records(self) -> list[Any]:
        from pv import ledger

        contents = ledger.read(self.ledger)
        assert not contents.problems, contents.problems
        return contents.records


def cli(*verb: str) -> Callable[..., Any]:
    """`pv <verb> ARGS...` run in this process (click's CliRunner), exceptions not swallowed."""
    def invoke(*args: str) -> Any:
        from click.testing import CliRunner

        from pv.cli import main

        return CliRunner().invoke(main, [*verb, *args], catch_exceptions=False)

    return invoke


def make_workspace(tmp_path: Path, *, mutants: bool = True, extra_pyproject: str = "") -> Ws:
    root = tmp_path / "ws"
    root.mkdir(parents=True)
    digest = hashlib.sha256(str(tmp_path.resolve()).encode()).hexdigest()[:8]
    package = "pvt_" + re.sub(r"[^a-z0-9]", "_", tmp_path.name.lower())[-30:] + "_" + digest
    pyproject = textwrap.dedent(f"""\
        [tool.pv]
        contracts_dir = "contracts"
        generated_dir = "generated_tests"
        ledger = "evidence/ledger.jsonl"
        check_packages = ["{package}"]
        """)
    if mutants:
        pyproject += f'mutants_module = "{package}.mutants"\n'
    (root / "pyproject.toml").write_text(pyproject + extra_pyproject, encoding="utf-8")
    (root / "contracts").mkdir()
    pkg = root / package
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "basic.py").write_text(CHECKS, encoding="utf-8")
    (pkg / "mutants.py").write_text(MUTANTS.format(package=package), encoding="utf-8")
    return Ws(root, package)


def what_ran(root: Path, loaded: Any, fid: str, device: str = "cpu", subject: str | None = None) -> dict[str, Any]:
    """The fields pv's plugin records about what ran (pv.identity) when the falsifier's own
    generated test runs on the contract's current definition: for hand-made records that
    should count as evidence."""
    from pv import codegen, identity
    from pv.config import load_workspace

    ws = load_workspace(root)
    f = loaded.contract.falsifier(fid)
    check = identity.EvidenceCheck(ws, [loaded])
    prefix, _ = check.expected(loaded.contract.metadata.id, fid)
    digest, templates = check.current(loaded.contract.metadata.id, fid)
    name = codegen.test_name(fid, device, subject).split("[", 1)[1]
    override = f.tolerance.model_dump(exclude_none=True) if f.tolerance else None
    return {"test_node": f"{prefix}[{name}", "test_sha256": digest, "test_templates": sorted(templates),
            "judged_params": dict(f.params), "judged_tolerance": identity.tolerance_numbers(override)}
