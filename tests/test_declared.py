"""pv.declared: PV501 remembered across runs is recomputed when anything it read changes."""

from __future__ import annotations

from pv import codebind, ledger
from pv.config import load_workspace
from pv.declared import declared_status_diagnostics
from pv.loader import load_contract

CONTRACT = """\
metadata:
  id: demo
  version: 1.0.0
  kind: pattern
  status: {status}
  description: demo
falsification_tests:
  - id: FALSIFY-DEMO-001
    rule: r
    prediction: x < 1
    check: checks.m:f
    devices: [cpu]
    if_fails: look
    mutants: [m_one]
"""


def _setup(tmp_path, status="ACTIVE_RUNTIME"):
    (tmp_path / "pyproject.toml").write_text('[tool.pv]\ncontracts_dir = "contracts"\ncheck_packages = ["checks"]\n')
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "__init__.py").write_text("")
    (tmp_path / "checks" / "m.py").write_text("def f(*, device):\n    return {'x': 0.5}\n")
    (tmp_path / "contracts").mkdir()
    path = tmp_path / "contracts" / "demo-v1.yaml"
    path.write_text(CONTRACT.format(status=status))
    ws = load_workspace(tmp_path)
    loaded, problems = load_contract(path, "contracts/demo-v1.yaml")
    assert not problems
    return ws, loaded


def _append(ws, loaded, verdict, mutant=None):
    f = loaded.contract.falsification_tests[0]
    digests = codebind.bind(["checks.m"], ["checks"], [ws.root], loaded={})
    ledger.append(ws.ledger, [ledger.make_record(
        contract="demo", contract_version="1.0.0", falsifier=f.id, falsifier_sha256=f.definition_sha256(),
        device="cpu", mutant=mutant, verdict=verdict, observations={"x": 0.5}, prediction=f.prediction,
        duration_s=0.1, time_utc="2026-01-01T00:00:00Z", code_digests=digests)])


def test_a_remembered_answer_follows_the_ledger_the_code_and_the_contract(tmp_path):
    ws, loaded = _setup(tmp_path)
    _append(ws, loaded, "PASS")
    assert [d.code for d in declared_status_diagnostics(ws, [loaded])] == ["PV501"]  # the mutant is not run
    _append(ws, loaded, "FAIL", mutant="m_one")
    assert declared_status_diagnostics(ws, [loaded]) == []
    assert declared_status_diagnostics(ws, [loaded]) == []  # remembered
    assert (tmp_path / ".pv-cache" / "pv" / "declared-status.json").exists()
    (tmp_path / "checks" / "m.py").write_text("def f(*, device):\n    return {'x': 0.7}\n")  # the code changed
    [stale] = declared_status_diagnostics(ws, [loaded])
    assert stale.code == "PV501" and "STALE" in stale.message
    (tmp_path / "checks" / "m.py").write_text("def f(*, device):\n    return {'x': 0.5}\n")
    assert declared_status_diagnostics(ws, [loaded]) == []
    path = tmp_path / "contracts" / "demo-v1.yaml"  # the definition changed: its records are stale
    path.write_text(CONTRACT.format(status="ACTIVE_RUNTIME").replace("x < 1", "x < 0.9"))
    changed, _ = load_contract(path, "contracts/demo-v1.yaml")
    assert [d.code for d in declared_status_diagnostics(ws, [changed])] == ["PV501"]


def test_a_remembered_answer_follows_the_executed_units_of_a_record(tmp_path):
    """A record bound to the units it executed (pv.execution) is judged by the file each module
    loads now: an edit to the executed function recomputes; an unrelated function does not stale."""
    from pv.codeunits import units_of_source

    ws, loaded = _setup(tmp_path)
    f = loaded.contract.falsification_tests[0]
    module = tmp_path / "checks" / "m.py"

    def append(verdict, mutant=None):
        units = units_of_source(module.read_bytes()).digests
        ledger.append(ws.ledger, [ledger.make_record(
            contract="demo", contract_version="1.0.0", falsifier=f.id, falsifier_sha256=f.definition_sha256(),
            device="cpu", mutant=mutant, verdict=verdict, observations={"x": 0.5}, prediction=f.prediction,
            duration_s=0.1, time_utc="2026-01-01T00:00:00Z", executed_code={"checks.m": {"f": units["f"]}},
            code_origins={"checks.m": "checks/m.py"})])

    append("PASS")
    append("FAIL", mutant="m_one")
    assert declared_status_diagnostics(ws, [loaded]) == []
    assert declared_status_diagnostics(ws, [loaded]) == []  # remembered
    module.write_text(module.read_text() + "\n\ndef unrelated():\n    return 1\n")
    assert declared_status_diagnostics(ws, [loaded]) == []  # f unchanged: still fresh
    module.write_text(module.read_text().replace("0.5", "0.7"))
    [stale] = declared_status_diagnostics(ws, [loaded])
    assert stale.code == "PV501" and "STALE" in stale.message
