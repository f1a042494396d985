"""Timing falsifiers (pv.timing): their checks run with no line tracer, their records bind every
unit of the modules they can run (pv.untracedbind) and say so, and every other falsifier is
still traced per executed function."""

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
    assert record.binding == timing.UNTRACED_BINDING and record.code_digests is None
    assert {m: set(u) for m, u in record.executed_code.items()} == {
        pkg.name: {"<module>"}, f"{pkg.name}.checks": {"<module>", "timed"},
        f"{pkg.name}.kernels": {"<module>", "used", "unused"}}  # every unit, not only those that ran
    assert record.code_origins[f"{pkg.name}.kernels"] == f"{pkg.name}/kernels.py"
    assert not record.binding_problems
    assert changes(pkg, outcome) == ()  # bound, and fresh on the tree it ran


def test_a_timing_record_stales_on_any_edit_of_a_bound_module(pkg):
    """The honest direction: an edit of a function the check never ran stales the coarse record,
    while the traced record of the same check stays fresh."""
    coarse, traced = run(pkg, timing_observations=["seconds"]), run(pkg)
    edit_unused(pkg)
    assert changes(pkg, coarse) == (f"{pkg.name}.kernels:unused",)
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
    assert record.binding == "modules" and "helper_nobody_calls" in record.executed_code[f"{ws.package}.basic"]
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
    assert f"{ws.package}.basic:helper_nobody_calls" in stale.output and "FALSIFY-DEMO-001" in stale.output, stale.output


# --- the units an untraced record binds (pv.untracedbind) -------------------------------------

MUTANTS_INIT = '''\
"""Importing this registers every planted bug (as [tool.pv] mutants_module does)."""
from . import alpha, beta, gamma  # noqa: F401 - registers
from .planting import plant
'''

PLANTING = '''\
import contextlib


@contextlib.contextmanager
def plant(owner, name, value):
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)
'''

ALPHA = '''\
from pv.mutation import mutant

from .. import kernels
from .gamma import OFFSET
from .planting import plant


@mutant("alpha_{uid}")
def alpha_bug():
    with plant(kernels, "SCALE", OFFSET):
        yield


def _alpha_helper():
    return 1
'''

BETA = '''\
from pv.mutation import mutant

from .. import kernels
from .planting import plant

LIMIT = 3


@mutant("beta_{uid}")
def beta_bug():
    def halved(x):
        return x * 0.5

    with plant(kernels, "used", halved):
        yield
'''

GAMMA = '''\
from pv.mutation import mutant

OFFSET = 3.0


@mutant("gamma_{uid}")
def gamma_bug():
    yield
'''

NEW_BUG = '''

@mutant("beta_new_{uid}")
def beta_new_bug():
    with plant(kernels, "SCALE", -1.0):
        yield
'''


@pytest.fixture
def mpkg(pkg):
    """`pkg` with a mutants package: alpha (the active bug; it imports gamma), beta and gamma
    (siblings that declare bugs), planting (machinery, no bug)."""
    from pv import mutation

    uid = uuid.uuid4().hex[:8]
    mutants = pkg.dir / "mutants"
    mutants.mkdir()
    for name, text in [("__init__", MUTANTS_INIT), ("planting", PLANTING), ("alpha", ALPHA), ("beta", BETA),
                       ("gamma", GAMMA)]:
        (mutants / f"{name}.py").write_text(text.replace("{uid}", uid))
    harness.set_code_binding([pkg.name], [pkg.root], mutants=f"{pkg.name}.mutants")
    importlib.import_module(f"{pkg.name}.mutants")
    active = f"alpha_{uid}"
    pkg.uid, pkg.mutants, pkg.active = uid, f"{pkg.name}.mutants", active
    harness.set_mutant(active, mutation.REGISTRY[active].factory)
    yield pkg
    harness.set_mutant(None)
    for name in [n for n in mutation.REGISTRY if n.endswith(uid)]:
        del mutation.REGISTRY[name]


def edit(pkg, module: str, old: str, new: str) -> None:
    path = pkg.dir.joinpath(*module.split(".")).with_suffix(".py")
    text = path.read_text()
    assert old in text, (module, old)
    path.write_text(text.replace(old, new))


def test_an_untraced_record_binds_every_unit_but_a_sibling_bugs_functions(mpkg):
    outcome = run(mpkg, timing_observations=["seconds"])
    record = outcome.to_record(time_utc="2026-11-25T00:00:00Z")
    assert record.mutant == mpkg.active and record.binding == timing.UNTRACED_BINDING
    assert record.code_digests is None and not record.binding_problems
    units = {module: set(by_unit) for module, by_unit in record.executed_code.items()}
    n, m = mpkg.name, mpkg.mutants
    assert units[f"{n}.checks"] == {"<module>", "timed"}
    assert units[f"{n}.kernels"] == {"<module>", "used", "unused"}  # `unused` never ran: bound all the same
    assert units[f"{m}.alpha"] == {"<module>", "alpha_bug", "_alpha_helper"}  # the active bug's module, whole
    assert units[f"{m}.gamma"] == {"<module>", "gamma_bug"}  # a sibling the active bug's module imports: whole
    assert units[f"{m}.beta"] == {"<module>"}  # a sibling: its bugs' functions left out
    assert units[m] == {"<module>"} and units[f"{m}.planting"] == {"<module>", "plant"}
    assert record.code_origins[f"{m}.beta"] == f"{n}/mutants/beta.py"
    assert changes(mpkg, outcome) == ()
    from pv import identity  # the bug's function is bound, so the record shows it was planted

    assert identity.mutant_not_run(record, (f"{m}.alpha", "alpha_bug")) is None
    relabelled = record.model_copy(update={"mutant": f"beta_{mpkg.uid}"})
    assert "did not run in it" in identity.mutant_not_run(relabelled, (f"{m}.beta", "beta_bug"))


def test_a_new_bug_in_a_sibling_leaves_the_record_fresh_its_module_code_does_not(mpkg):
    outcome = run(mpkg, timing_observations=["seconds"])
    with (mpkg.dir / "mutants" / "beta.py").open("a") as handle:
        handle.write(NEW_BUG.replace("{uid}", mpkg.uid))
    assert changes(mpkg, outcome) == ()  # a planted bug that was not entered cannot have run
    edit(mpkg, "mutants.beta", "x * 0.5", "x * 0.25")  # a sibling's bug (and what it nests) edited: never ran
    assert changes(mpkg, outcome) == ()
    edit(mpkg, "mutants.beta", "LIMIT = 3", "LIMIT = 4")
    assert changes(mpkg, outcome) == (f"{mpkg.mutants}.beta (module-level code)",)


@pytest.mark.parametrize("module, old, new, changed", [
    ("checks", '"seconds": kernels.used(0.5)', '"seconds": kernels.used(0.25)', "checks:timed"),
    ("kernels", "return x - 1", "return x - 2", "kernels:unused"),
    ("mutants.alpha", "return 1", "return 2", "mutants.alpha:_alpha_helper"),  # the active bug's module
    ("mutants.alpha", 'kernels, "SCALE", OFFSET', 'kernels, "SCALE", 2 * OFFSET', "mutants.alpha:alpha_bug"),
    ("mutants.gamma", "    yield", "    yield\n    print()", "mutants.gamma:gamma_bug"),  # imported by alpha
    ("mutants.planting", "setattr(owner, name, old)", "pass", "mutants.planting:plant"),  # machinery
    ("mutants.__init__", "from .planting import plant", "from .planting import plant as plant", "mutants (module-level code)"),
])
def test_an_edit_of_any_function_of_a_module_bound_whole_stales_it(mpkg, module, old, new, changed):
    outcome = run(mpkg, timing_observations=["seconds"])
    edit(mpkg, module, old, new)
    assert changes(mpkg, outcome) == (f"{mpkg.name}.{changed}",)


def test_a_sibling_helper_is_bound_only_its_bugs_are_left_out(mpkg):
    edit(mpkg, "mutants.beta", "LIMIT = 3\n", "LIMIT = 3\n\n\ndef _limit():\n    return LIMIT\n")
    outcome = run(mpkg, timing_observations=["seconds"])
    assert set(outcome.executed_code[f"{mpkg.mutants}.beta"]) == {"<module>", "_limit"}
    edit(mpkg, "mutants.beta", "return LIMIT", "return LIMIT + 1")
    assert changes(mpkg, outcome) == (f"{mpkg.mutants}.beta:_limit",)


def test_with_no_bug_entered_every_sibling_leaves_its_bugs_out_and_without_a_package_none_does(mpkg):
    from pv import untracedbind

    n, m = mpkg.name, mpkg.mutants
    start = [f"{n}.checks", m]  # a check whose module imports the mutants package, under no bug
    bound = untracedbind.bind(start, [n], [mpkg.root], mpkg.root, mutants=m)
    units = {module: set(by_unit) for module, by_unit in bound.executed.items()}
    assert units[f"{m}.alpha"] == {"<module>", "_alpha_helper"}
    assert units[f"{m}.beta"] == units[f"{m}.gamma"] == {"<module>"}  # imported only by a sibling: a sibling
    assert units[m] == {"<module>"} and units[f"{m}.planting"] == {"<module>", "plant"}
    whole = untracedbind.bind(start, [n], [mpkg.root], mpkg.root, mutants=None)
    assert set(whole.executed[f"{m}.beta"]) == {"<module>", "beta_bug", "beta_bug.<locals>.halved"}
    harness.set_code_binding([n], [mpkg.root])  # the harness without a mutants package: every module whole
    assert set(run(mpkg, timing_observations=["seconds"]).executed_code[f"{m}.beta"]) == set(whole.executed[f"{m}.beta"])


def test_an_old_record_with_only_module_digests_is_judged_by_whole_modules(mpkg):
    """Records made before the units: `code_digests` alone, judged by module digests as ever."""
    outcome = run(mpkg, timing_observations=["seconds"])
    outcome.executed_code = outcome.code_origins = None
    outcome.code_digests = harness.code_digests_of([f"{mpkg.name}.checks", f"{mpkg.mutants}.alpha"])
    assert f"{mpkg.mutants}.beta" in outcome.code_digests
    assert changes(mpkg, outcome) == ()
    with (mpkg.dir / "mutants" / "beta.py").open("a") as handle:
        handle.write(NEW_BUG.replace("{uid}", mpkg.uid))
    assert changes(mpkg, outcome) == (f"{mpkg.mutants}.beta",)  # any edit of a bound module, as before
