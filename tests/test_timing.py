"""Timing falsifiers (pv.timing): their checks run with no line tracer, their records bind to
whole modules and say so, and every other falsifier is still traced per executed function."""

from __future__ import annotations

import importlib
import os
import sys
import uuid
from types import SimpleNamespace

import pytest
import yaml

from pv import execution, harness, lifecycle, timing
from pv.codebind import TreeDigests
from pv.schema import Contract
from pv_validate_ws import make_vworkspace, parse_output
from pv_workspace import cli, falsifier, make_workspace

KERNELS = '''\
SCALE = 2.0


def used(x):
    return x * SCALE


def unused(x):
    return x - 1
'''

CHECKS = '''\
import os
import sys

import coverage

from . import kernels


def timed(*, device):
    """What a timing check sees of pv's tracing: whether a tracer or collector runs."""
    return {"seconds": kernels.used(0.5), "traced": sys.gettrace() is not None,
            "measuring": coverage.Coverage.current() is not None,
            "children_measured": "COVERAGE_PROCESS_CONFIG" in os.environ}
'''


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    name = f"pvtime_{uuid.uuid4().hex[:10]}"
    root = tmp_path / "ws"
    package = root / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "kernels.py").write_text(KERNELS)
    (package / "checks.py").write_text(CHECKS)
    monkeypatch.syspath_prepend(str(root))
    harness.set_code_binding([name], [root])
    yield SimpleNamespace(name=name, root=root, dir=package,
                          check=importlib.import_module(f"{name}.checks").timed)
    harness.set_code_binding(None)
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def run(pkg, **kw):
    return harness.falsify(pkg.check, {}, "seconds > 0", "cpu", falsifier="FALSIFY-T-001", **kw)


def changes(pkg, outcome) -> tuple[str, ...]:
    return TreeDigests(pkg.root).record_changes(outcome.to_record(time_utc="2026-11-25T00:00:00Z"))


def edit_unused(pkg) -> None:
    path = pkg.dir / "kernels.py"
    path.write_text(path.read_text().replace("return x - 1", "return x - 2"))


def test_a_timing_check_runs_with_no_tracer_and_no_collector(pkg):
    assert sys.gettrace() is None, "these tests must run without an outside tracer"
    outcome = run(pkg, timing_observations=["seconds"])
    assert outcome.verdict == "PASS"
    assert outcome.observations["traced"] is False
    assert outcome.observations["measuring"] is False
    assert outcome.observations["children_measured"] is False


def test_a_normal_falsifier_of_the_same_check_is_still_traced(pkg):
    outcome = run(pkg)
    assert outcome.observations["traced"] is True and outcome.observations["measuring"] is True
    assert outcome.observations["children_measured"] is True
    assert outcome.binding is None and outcome.code_digests is None
    assert set(outcome.executed_code[f"{pkg.name}.kernels"]) == {"<module>", "used"}


def test_a_timing_record_binds_whole_modules_and_says_so(pkg):
    outcome = run(pkg, timing_observations=["seconds"])
    record = outcome.to_record(time_utc="2026-11-25T00:00:00Z")
    assert record.binding == timing.UNTRACED_BINDING and record.executed_code is None
    assert {pkg.name, f"{pkg.name}.checks", f"{pkg.name}.kernels"} <= set(record.code_digests)
    assert not record.binding_problems
    assert changes(pkg, outcome) == ()  # bound, and fresh on the tree it ran


def test_a_timing_record_stales_on_any_edit_of_a_bound_module(pkg):
    """The honest direction: an edit of a function the check never ran stales the coarse record,
    while the traced record of the same check stays fresh."""
    coarse, traced = run(pkg, timing_observations=["seconds"]), run(pkg)
    edit_unused(pkg)
    assert changes(pkg, coarse) == (f"{pkg.name}.kernels",)
    assert changes(pkg, traced) == ()


def test_a_timing_check_inside_a_traced_check_pauses_and_resumes_the_outer_collector(pkg):
    kernels = sys.modules[f"{pkg.name}.kernels"]
    with execution.collecting([pkg.name]) as outer:
        inner = run(pkg, timing_observations=["seconds"])
        assert sys.gettrace() is not None and "COVERAGE_PROCESS_CONFIG" in os.environ  # resumed
        kernels.unused(1.0)
    assert inner.observations["traced"] is False and inner.observations["children_measured"] is False
    bound = execution.bind(outer, [pkg.name], pkg.root)
    assert "unused" in bound.executed[f"{pkg.name}.kernels"]  # measured after the resume
    assert "timed" not in bound.executed.get(f"{pkg.name}.checks", {})  # not while paused


def test_a_shadowed_module_is_a_binding_problem_of_a_timing_record_too(pkg):
    """What pv.importbind flags for traced records (here a package directory shadowing a module)
    makes a module-bound record stale as well."""
    for module in [m for m in sys.modules if m == pkg.name or m.startswith(pkg.name + ".")]:
        del sys.modules[module]
    (pkg.dir / "kernels").mkdir()
    (pkg.dir / "kernels" / "__init__.py").write_text("def used(x):\n    return 1.0\n")
    check = importlib.import_module(f"{pkg.name}.checks").timed
    outcome = harness.falsify(check, {}, "seconds > 0", "cpu", timing_observations=["seconds"])
    assert any("shadows kernels.py" in p for p in outcome.binding_problems)
    assert changes(pkg, outcome)[0].startswith("binding: ")


# --- declared in the contract, checked by pv validate, shown by pv status ---------------------


@pytest.fixture
def vws(tmp_path, monkeypatch):
    return make_vworkspace(tmp_path, monkeypatch)


PREDICTION = 'prediction: "val_loss < 0.7 * ln(vocab_size)"'


def test_validate_accepts_a_declaration_of_observations_the_prediction_reads(vws):
    vws.contract((PREDICTION, PREDICTION + "\n    timing_observations: [val_loss]"))
    result = vws.run()
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("declared, code, words", [
    ("[seconds]", "PV409", "timing_observations names 'seconds', which the prediction does not read"),
    ("[]", "PV204", "at least 1 item"),
    ("[val_loss, val_loss]", "PV204", "listed twice: val_loss"),
    ('["val loss"]', "PV204", "'val loss' does not match"),
    ("val_loss", "PV203", "valid list"),
])
def test_validate_refuses_a_declaration_that_is_not_a_list_of_read_observations(vws, declared, code, words):
    vws.contract((PREDICTION, PREDICTION + f"\n    timing_observations: {declared}"))
    result = vws.run()
    assert result.exit_code == 1, result.output
    found = [f for f in parse_output(result.output) if f.code == code]
    assert found and words in found[0].message, result.output


TIMED_CHECK = '''
def timed(*, device):
    import sys
    return {"seconds": 0.5, "traced": sys.gettrace() is not None}


def helper_nobody_calls():
    return 1
'''


def test_end_to_end_the_record_is_untraced_module_bound_shown_and_stales(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path).enter(monkeypatch)
    with (ws.root / ws.package / "basic.py").open("a") as handle:
        handle.write(TIMED_CHECK)
    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001", prediction="seconds > 0 and not traced",
                                       check="basic:timed", timing_observations=["seconds"])])
    ws.generate()
    assert "timing_observations=['seconds']" in (ws.generated / "test_demo.py").read_text()
    done = ws.pytest("-q", "-p", "no:randomly", "generated_tests/test_demo.py")
    assert done.returncode == 0, done.stdout + done.stderr
    [record] = ws.records()
    assert record.verdict.value == "PASS" and record.observations["traced"] is False
    assert record.binding == "modules" and f"{ws.package}.basic" in record.code_digests
    status = cli("status")("--format", "json")
    assert "FALSIFY-DEMO-001" in status.output and '"stale": []' in status.output, status.output
    assert '"binding": "modules"' in status.output, status.output
    assert cli("status")().exit_code == 0
    dashboard = (ws.root / "docs" / "STATUS.md").read_text()
    assert "binding: modules" in dashboard, dashboard  # the evidence cell
    contract = Contract.model_validate(yaml.safe_load((ws.contracts / "demo-v1.yaml").read_text()))
    [status_of] = lifecycle.compute([contract], [record])
    assert status_of.falsifiers[0].explain() == f"passed on cpu ({timing.NOTE})"
    basic = ws.root / ws.package / "basic.py"
    basic.write_text(basic.read_text().replace("return 1\n", "return 2\n"))  # a function that never ran
    stale = cli("status")("--format", "json")
    assert f'"{ws.package}.basic"' in stale.output and "FALSIFY-DEMO-001" in stale.output, stale.output
