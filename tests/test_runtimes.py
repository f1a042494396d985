"""The runtime dimension in pv's core (pv.runtimes and its hooks): [tool.pv] runtimes, the
`runtimes:` key (validated against it, PV319), node ids and lifecycle cells runtime x subject x
device, old records counting for the default runtime, `pv run --runtime` selection — and one rule
for installed check packages in validate, generate and run."""

from __future__ import annotations

import pytest

from pv import runtimes
from pv import codegen
from pv.config import ConfigError, load_workspace
from pv.lifecycle import DeviceState, FalsifierState, falsifier_status
from pv.ledger import make_record
from pv.schema import Contract
from pv_validate_ws import parse_output

RUNTIMES_TOML = '\nruntimes = { alpha = "falsifiers.demo:Alpha", beta = "falsifiers.demo:Beta" }\n'


def _contract(runtimes_key: str = "    runtimes: [alpha, beta]\n", check: str = "falsifiers.demo:with_runtime"):
    return (("    check: falsifiers.demo:measure\n", f"    check: {check}\n{runtimes_key}"),)


def _with_runtime_check(ws):
    ws.write("falsifiers/demo.py", (ws.root / "falsifiers/demo.py").read_text() + '''

def with_runtime(*, device, runtime, checkpoint, batches=1):
    return {"val_loss": 1.0, "vocab_size": 1024}


class Alpha:
    def version(self):
        return "alpha 1.0"


class Beta:
    pass
''')


def test_the_runtimes_table_is_read_and_checked(vworkspace):
    vworkspace.write("pyproject.toml", (vworkspace.root / "pyproject.toml").read_text() + RUNTIMES_TOML)
    assert load_workspace().runtimes == {"alpha": "falsifiers.demo:Alpha", "beta": "falsifiers.demo:Beta"}
    vworkspace.write("pyproject.toml", '[tool.pv]\nruntimes = { alpha = "no colon" }\n')
    with pytest.raises(ConfigError, match=r"runtimes.alpha must be \"package.module:factory\""):
        load_workspace()
    vworkspace.write("pyproject.toml", '[tool.pv]\nruntimes = ["alpha"]\n')
    with pytest.raises(ConfigError, match="must be a table"):
        load_workspace()


def test_validate_accepts_declared_runtimes_and_names_an_unknown_one(vworkspace):
    vworkspace.write("pyproject.toml", (vworkspace.root / "pyproject.toml").read_text() + RUNTIMES_TOML)
    _with_runtime_check(vworkspace)
    vworkspace.contract(*_contract())
    result = vworkspace.run()
    assert result.exit_code == 0, result.output
    vworkspace.contract(*_contract("    runtimes: [alpha, betta]\n"))
    found = parse_output(vworkspace.run().output)
    assert [(f.code, "'betta'" in f.message) for f in found] == [("PV319", True)]


def test_a_check_that_takes_a_runtime_needs_runtimes(vworkspace):
    vworkspace.write("pyproject.toml", (vworkspace.root / "pyproject.toml").read_text() + RUNTIMES_TOML)
    _with_runtime_check(vworkspace)
    vworkspace.contract(*_contract(""))
    found = parse_output(vworkspace.run().output)
    assert any(f.code == "PV314" and "'runtime'" in f.message for f in found)


def test_an_installed_check_package_is_found_statically_by_validate(vworkspace):
    """pvpack is not under this workspace's root; validate finds its source the way run imports
    it (importlib.util.find_spec of the top package, then the file parsed), without importing it."""
    import sys

    vworkspace.write("pyproject.toml", '[tool.pv]\ncheck_packages = ["pvpack.checks"]\n'
                     'runtimes = { hf = "pvpack.adapters.transformers:TransformersAdapter" }\n')
    vworkspace.contract(("    check: falsifiers.demo:measure\n",
                         "    check: pvpack.checks.forward:forward_sanity\n    runtimes: [hf]\n"),
                        ("    params: {checkpoint: tiny, batches: 2}\n", "    subjects: [tiny]\n    params: {batches: 2}\n"),
                        ("    mutants: [drops_bias]\n", ""))
    before = set(sys.modules)
    result = vworkspace.run()
    assert result.exit_code == 0, result.output
    assert "pvpack.checks.forward" not in set(sys.modules) - before
    vworkspace.contract(("    check: falsifiers.demo:measure\n", "    check: pvpack.checks.nowhere:forward_sanity\n"))
    found = parse_output(vworkspace.run().output)
    unresolved = [f for f in found if f.code == "PV311"]
    assert len(unresolved) == 1 and "nor in an installed package" in unresolved[0].message


def test_node_ids_put_the_runtime_last():
    assert codegen.test_name("FALSIFY-A-001", "cpu", "tiny-trained", "transformers") == \
        "test_falsify_a_001[cpu-tiny-trained-transformers]"
    assert codegen.test_name("FALSIFY-A-001", "cpu", None, "pvlab") == "test_falsify_a_001[cpu-pvlab]"
    assert codegen.test_name("FALSIFY-A-001", "cuda") == "test_falsify_a_001[cuda]"


def test_cells_for_selection():
    assert runtimes.cells(["a", "b"], ["s"], ["cpu"]) == [("s", "cpu", "a"), ("s", "cpu", "b")]
    assert runtimes.cells(["a", "b"], ["s"], ["cpu"], only="b") == [("s", "cpu", "b")]
    assert runtimes.cells(None, ["s"], ["cpu"], only="b") == []
    assert runtimes.cells(None, [None], ["cpu"]) == [(None, "cpu", None)]


def _falsifier():
    return Contract.model_validate({
        "metadata": {"id": "demo", "version": "1.0.0", "kind": "pattern", "status": "DRAFT", "description": "d"},
        "falsification_tests": [{"id": "FALSIFY-DEMO-001", "rule": "r", "prediction": "x < 1", "devices": ["cpu"],
                                 "if_fails": "f", "runtimes": ["pvlab", "hf"], "check": "p.m:f"}]}).falsification_tests[0]


def _record(f, verdict, runtime):
    return make_record(contract="demo", contract_version="1.0.0", falsifier=f.id, falsifier_sha256=f.definition_sha256(),
                       device="cpu", verdict=verdict, observations={"x": 0.5}, prediction=f.prediction,
                       duration_s=0.1, time_utc="2026-01-01T00:00:00Z", runtime=runtime)


def test_lifecycle_cells_are_runtime_by_device_and_old_records_count_for_the_first_runtime():
    f = _falsifier()
    assert f.runtime_cells() == [("pvlab", None, "cpu"), ("hf", None, "cpu")]
    only_pvlab = falsifier_status("demo", f, list(enumerate([_record(f, "PASS", None)])))
    assert only_pvlab.state is FalsifierState.PARTIAL          # the old record counts for pvlab only
    assert [(d.runtime, d.state) for d in only_pvlab.devices] == [("pvlab", DeviceState.PASS),
                                                                   ("hf", DeviceState.PENDING)]
    assert only_pvlab.runtimes_discharged() == ["pvlab"]
    both = falsifier_status("demo", f, list(enumerate([_record(f, "PASS", None), _record(f, "PASS", "hf")])))
    assert both.state is FalsifierState.DISCHARGED and both.runtimes_discharged() == ["pvlab", "hf"]
    assert "cpu@hf" in both.explain()
    failing = falsifier_status("demo", f, list(enumerate([_record(f, "PASS", "pvlab"), _record(f, "FAIL", "hf")])))
    assert failing.state is FalsifierState.FALSIFIED and "cpu@hf" in failing.explain()
    stranger = falsifier_status("demo", f, list(enumerate([_record(f, "PASS", "other")])))
    assert stranger.state is FalsifierState.PENDING            # a runtime it does not list never counts


def test_the_harness_refuses_params_that_set_the_runtime(monkeypatch):
    from pv import harness

    runtimes.configure({"a": "falsifiers.demo:Alpha"})
    try:
        with pytest.raises(harness.FalsifierError, match="must not set 'runtime'"):
            harness.falsify(lambda **kw: {"x": 0}, params={"runtime": "b"}, prediction="x < 1", device="cpu",
                            runtime="a")
    finally:
        runtimes.configure(None)


def test_a_record_carries_the_adapter_its_runtime_was_bound_to(tmp_path, monkeypatch):
    """Red team 2026-12-03: records name the runtime, not the adapter the name was bound to, so
    `[tool.pv] runtimes` repointed at another adapter kept every cell of that name discharged.
    The outcome (and so the record) carries the binding it ran through (`runtime_binding`)."""
    from pv import harness

    (tmp_path / "rtbind_demo.py").write_text(
        "class Alpha:\n    def version(self):\n        return 'alpha 1'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    runtimes.configure({"a": "rtbind_demo:Alpha"})
    try:
        assert runtimes.binding_of("a") == "rtbind_demo:Alpha" and runtimes.binding_of("b") is None
        harness.falsify(lambda **kw: {"x": 0}, params={}, prediction="x < 1", device="cpu", runtime="a")
        outcome = harness.take_outcome()
    finally:
        runtimes.configure(None)
    assert outcome.verdict == "PASS", outcome.message
    assert outcome.runtime_binding == "rtbind_demo:Alpha"
    assert outcome.to_record(time_utc="2026-12-03T00:00:00Z").runtime_binding == "rtbind_demo:Alpha"
