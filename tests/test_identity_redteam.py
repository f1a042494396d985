"""pv.identity against the red-team rounds: records that contradict themselves (verdict, device),
a kill relabelled to another planted bug, executed code cut down to look fresh, a later failure
made not to count, pv's default tolerance table widened for one run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pv import identity
from pv.ledger import Verdict, make_record
from pv_workspace import cli, falsifier, make_workspace

from identity_demo import DEMO, HONEST, NEW_CHECK, demo_workspace, regenerate, status_of


@pytest.fixture
def ws(tmp_path, monkeypatch):
    return demo_workspace(tmp_path, monkeypatch)


# --- records that contradict themselves (red-team round: verdict, device) ----------------------


def test_attack_a_fail_flipped_to_pass_in_a_copied_record_never_counts(ws):
    """An honest FAIL (val_loss 9.0 observed) copied with `verdict: PASS` and a new record id: not
    a replay (its content differs), and it carries the honest test identity and judged definition.
    The observations it recorded falsify its own prediction: it is refused and the FAIL decides."""
    from pv.ledger import append

    assert ws.pytest("generated_tests", "-k", "demo_001").returncode == 1
    fail = ws.records()[0]
    assert fail.verdict.value == "FAIL" and fail.observations["val_loss"] == 9.0
    append(ws.ledger, [fail.model_copy(update={"verdict": Verdict.PASS, "record_id": "f" * 32, "margin": 1.0,
                                               "message": ""})])
    state = status_of(ws, "FALSIFY-DEMO-001")
    assert state["state"] == "FALSIFIED"
    assert state["devices"]["cpu"]["record"]["record_id"] == fail.record_id
    assert cli("status")("--require-fresh").exit_code == 1


def test_attack_a_pass_flipped_to_fail_never_kills(ws):
    """The other way round: a PASS made a FAIL (under a mutant that would be a kill). Refused,
    and the reason says the observations contradict the verdict."""
    assert ws.pytest("generated_tests", "-k", "demo_002").returncode == 0
    passed = ws.records()[0]
    flipped = passed.model_copy(update={"verdict": Verdict.FAIL, "record_id": "e" * 32})
    from pv.loader import load_contract

    loaded, _ = load_contract(ws.contracts / "demo-v1.yaml")
    check = identity.EvidenceCheck(ws.workspace(), [loaded])
    falsifier_ = loaded.contract.falsifier("FALSIFY-DEMO-002")
    assert check.refuses(passed, falsifier_) is None
    why = check.refuses(flipped, falsifier_)
    assert why is not None and "recorded observations" in why and "FAIL" in why


def test_a_record_whose_observations_cannot_be_judged_again_is_not_refused_for_it():
    """Recorded observations are a lossy copy (NaN kept as text, long text cut): a contradiction
    counts only where the prediction can be judged again; NaN is read back as NaN."""
    record = make_record(contract="demo", contract_version="1", falsifier="F", falsifier_sha256="0",
                         device="cpu", verdict="FAIL", prediction="x < 1", observations={"x": float("nan")},
                         duration_s=0.1, time_utc="2026-01-01T00:00:00Z")
    assert record.observations == {"x": "nan"}
    assert identity.verdict_contradicts(record) is None
    assert identity.verdict_contradicts(record.model_copy(update={"verdict": Verdict.PASS})) is not None
    unknown = record.model_copy(update={"verdict": Verdict.PASS, "observations": {}})
    assert identity.verdict_contradicts(unknown) is None


def test_attack_a_cpu_pass_relabelled_cuda_never_fills_the_cuda_cell(tmp_path, monkeypatch):
    """A falsifier required on cpu and cuda; the cpu PASS copied with `device: cuda` (no GPU
    ran). Its test node still says `[cpu]`: the cuda cell stays unfilled."""
    from pv.ledger import append

    ws = make_workspace(tmp_path, mutants=False)
    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001", prediction=HONEST, devices=("cpu", "cuda"))])
    ws.generate()
    ws.enter(monkeypatch)
    assert ws.pytest("generated_tests", "-k", "demo_001 and cpu").returncode == 0
    passed = ws.records()[0]
    assert passed.test_node.endswith("[cpu]")
    append(ws.ledger, [passed.model_copy(update={"device": "cuda", "record_id": "d" * 32,
                                                 "device_name": "NVIDIA H100 80GB HBM3"})])
    state = status_of(ws, "FALSIFY-DEMO-001")
    assert state["devices"]["cpu"]["state"] == "PASS"
    assert state["devices"]["cuda"]["state"] == "STALE"
    assert "[cpu]" in state["devices"]["cuda"]["stale_because"][0]
    assert state["state"] != "DISCHARGED"


# --- a kill relabelled to another planted bug (red-team round: mutant) ---------------------------


@pytest.fixture
def planted_ws(tmp_path, monkeypatch):
    """FALSIFY-DEMO-001 declares two planted bugs: drops_bias (killed: the loss jumps) and
    does_nothing (survives: nothing changes). Both records are real runs."""
    ws = make_workspace(tmp_path)
    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001", mutants=["drops_bias", "does_nothing"])])
    ws.generate()
    ws.enter(monkeypatch)
    # without a bug first: a FAIL under one is a kill only where the falsifier PASSes without it
    assert cli("run")("--contract", "demo", "--device", "cpu").exit_code == 0
    for mutant in ("drops_bias", "does_nothing"):
        run = cli("run")("--contract", "demo", "--device", "cpu", "--mutant", mutant)
        assert run.output and mutant in run.output
    return ws


def mutant_states(ws) -> dict[str, str]:
    return {name: m["state"] for name, m in status_of(ws, "FALSIFY-DEMO-001")["mutants"].items()}


def test_attack_a_kill_relabelled_to_another_planted_bug_never_counts(planted_ws):
    """The honest FAIL made under drops_bias, copied with `mutant: does_nothing` and a new record
    id: it carries the honest test identity, judged definition and observations, but the code it
    executed is drops_bias's, not does_nothing's. does_nothing stays SURVIVED; drops_bias KILLED."""
    from pv.ledger import append

    ws = planted_ws
    records = ws.records()
    kill = next(r for r in records if r.mutant == "drops_bias")
    assert kill.verdict.value == "FAIL" and "drops_bias" in kill.executed_code[f"{ws.package}.mutants"]
    assert "does_nothing" not in kill.executed_code[f"{ws.package}.mutants"]
    survivor = next(r for r in records if r.mutant == "does_nothing")
    assert "does_nothing" in survivor.executed_code[f"{ws.package}.mutants"]  # planting runs the bug's function
    assert mutant_states(ws) == {"drops_bias": "KILLED", "does_nothing": "SURVIVED"}
    append(ws.ledger, [kill.model_copy(update={"mutant": "does_nothing", "record_id": "c" * 32})])
    assert mutant_states(ws) == {"drops_bias": "KILLED", "does_nothing": "SURVIVED"}
    from pv.loader import load_contract

    loaded, _ = load_contract(ws.contracts / "demo-v1.yaml")
    check = identity.EvidenceCheck(ws.workspace(), [loaded])
    falsifier_ = loaded.contract.falsifier("FALSIFY-DEMO-001")
    assert check.refuses(kill, falsifier_) is None
    why = check.refuses(ws.records()[-1], falsifier_)
    assert why is not None and "'does_nothing'" in why and "did not run" in why and "relabelled" in why


def test_a_module_bound_record_under_a_bug_counts_only_if_the_bugs_module_is_bound(planted_ws):
    """A timing record (`binding: modules`, pv.timing) binds whole modules, not units: under a
    bug it counts when the module that defines the bug is among them, else it is refused."""
    from pv.codebind import bind
    from pv.ledger import append

    ws = planted_ws
    kill = next(r for r in ws.records() if r.mutant == "drops_bias")

    def timed(modules: list[str], record_id: str):
        digests = bind([f"{ws.package}.{m}" for m in modules], [ws.package], [ws.root], loaded={})
        return kill.model_copy(update={"mutant": "does_nothing", "record_id": record_id, "binding": "modules",
                                       "executed_code": None, "code_origins": None, "code_digests": digests})

    append(ws.ledger, [timed(["basic"], "b" * 32)])
    assert mutant_states(ws)["does_nothing"] == "SURVIVED"  # does_nothing's module was not bound
    append(ws.ledger, [timed(["basic", "mutants"], "a" * 32)])
    assert mutant_states(ws)["does_nothing"] == "KILLED"  # bound: the record can have planted it



def test_attack_a_kill_relabelled_to_a_bug_no_mutants_module_declares_never_counts(planted_ws):
    """The honest drops_bias kill copied with `mutant: ghost_bug`, a name the contract now declares
    but the mutants module does not (pv validate: PV309). mutant_not_run had nothing to compare the
    record's code with, so it accepted the copy: the dashboard showed ghost_bug KILLED and the
    contract ACTIVE_RUNTIME, on a bug that was never planted anywhere. A record under a bug the
    mutants module does not declare cannot show it was planted: it never counts."""
    from pv.ledger import append

    ws = planted_ws
    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001", mutants=["drops_bias", "ghost_bug"])])
    ws.generate()
    assert cli("run")("--contract", "demo", "--device", "cpu").exit_code == 0  # the runtime's own PASS
    kill = next(r for r in ws.records() if r.mutant == "drops_bias")
    append(ws.ledger, [kill.model_copy(update={"mutant": "ghost_bug", "record_id": "d" * 32})])
    assert mutant_states(ws) == {"drops_bias": "KILLED", "ghost_bug": "NOT_RUN"}
    data = json.loads(cli("status")("--format", "json").stdout)
    assert data["contracts"][0]["evidence"] == "DRAFT_PARTIAL_DISCHARGE"
    from pv.loader import load_contract

    loaded, _ = load_contract(ws.contracts / "demo-v1.yaml")
    why = identity.EvidenceCheck(ws.workspace(), [loaded]).refuses(ws.records()[-1], loaded.contract.falsifier(
        "FALSIFY-DEMO-001"))
    assert why is not None and "'ghost_bug'" in why and "not declared" in why


# --- executed code cut down to look fresh (red-team round 3) ---------------------------------------


def test_attack_executed_code_cut_down_to_look_fresh_never_counts(planted_ws):
    """An honest PASS; then the check's code is edited, so the record is STALE. A copy of it whose
    executed code has the edited module's entry emptied (`{module: {}}`), or the check's own unit
    removed, has no digest left to compare, and counted as fresh. Every honest record names its
    check among what ran and the module-level code of every module it lists (2,012 records and
    48,569 module entries in this repository's ledger on 2026-12-02): a record that does not was
    cut down after the run."""
    from pv.ledger import append
    from pv.loader import load_contract

    ws = planted_ws
    assert cli("run")("--contract", "demo", "--device", "cpu").exit_code == 0
    honest = ws.records()[-1]
    module = f"{ws.package}.basic"
    assert honest.verdict.value == "PASS" and {"<module>", "loss"} <= set(honest.executed_code[module])
    basic = ws.root / ws.package / "basic.py"
    basic.write_text(basic.read_text().replace("loss = 18.55", "loss = 18.56"))
    assert status_of(ws, "FALSIFY-DEMO-001")["devices"]["cpu"]["state"] == "STALE"
    emptied = honest.model_copy(update={"record_id": "e" * 32, "time_utc": "2030-01-01T00:00:00Z",
                                        "executed_code": {**honest.executed_code, module: {}}})
    append(ws.ledger, [emptied])
    assert status_of(ws, "FALSIFY-DEMO-001")["devices"]["cpu"]["state"] == "STALE"
    loaded, _ = load_contract(ws.contracts / "demo-v1.yaml")
    check = identity.EvidenceCheck(ws.workspace(), [loaded])
    falsifier_ = loaded.contract.falsifier("FALSIFY-DEMO-001")
    assert check.refuses(honest, falsifier_) is None
    why = check.refuses(emptied, falsifier_)
    assert why is not None and "module-level code" in why and module in why
    without_check = {**honest.executed_code, module: {k: v for k, v in honest.executed_code[module].items()
                                                      if k != "loss"}}
    why = check.refuses(honest.model_copy(update={"executed_code": without_check}), falsifier_)
    assert why is not None and "its own check" in why and f"{module}:loss" in why


# --- a later failure made not to count (red-team round 2) ------------------------------------------

ENV_CHECK = '''

def env_loss(*, device):
    """observations: val_loss, vocab_size (the loss a machine gives: read from its environment)"""
    import os

    return {"val_loss": float(os.environ.get("DEMO_LOSS", "2.0")), "vocab_size": 1024}
'''


def test_attack_removing_a_sibling_falsifier_never_brings_back_a_pass_an_honest_fail_followed(ws):
    """002 PASSes; a falsifier of a new check is added and, beside it, 002 FAILs honestly on the
    same code and definition (another machine: here its environment); the new falsifier is then
    removed from the contract. The FAIL no longer counts (its sibling's template is gone), but
    the PASS made before that falsifier existed does: it decided, DISCHARGED. A failure that no
    longer counts leaves the cell STALE: only a re-run says which verdict holds."""
    with open(ws.root / ws.package / "basic.py", "a") as handle:
        handle.write(ENV_CHECK)
    on_machine = falsifier("FALSIFY-DEMO-002", prediction=HONEST, check="basic:env_loss")
    regenerate(ws, [DEMO[0], on_machine])
    assert ws.pytest("generated_tests", "-k", "demo_002").returncode == 0
    regenerate(ws, [DEMO[0], on_machine, NEW_CHECK])
    failed = ws.pytest("generated_tests", "-k", "demo_002", env=ws.env(PV_FORCE_NO_CUDA="1", DEMO_LOSS="9.0"))
    assert failed.returncode == 1, failed.stdout
    assert status_of(ws, "FALSIFY-DEMO-002")["state"] == "FALSIFIED"
    regenerate(ws, [DEMO[0], on_machine])
    state = status_of(ws, "FALSIFY-DEMO-002")
    assert state["state"] == "STALE", state["state"]
    why = state["devices"]["cpu"]["stale_because"][0]
    assert "FAIL" in why and identity.SIBLING_OTHER in why
    assert cli("status")("--require-fresh").exit_code == 1


# --- the tolerance table the check received (attack round of 2026-12-02) ---------------------------

WIDENS_DEFAULTS = "import pv.tolerance\n\npv.tolerance.DEFAULTS['float32']['rtol'] = 0.02\n"


def test_attack_pvs_default_tolerances_widened_for_one_run_then_put_back(tmp_path, monkeypatch):
    """pv/tolerance.py edited for the run (here: a plugin from outside the workspace widens the
    table, as an edit to pv would) and put back: the check received a looser table than the one
    the contract is judged by today, so its PASS never counts."""
    ws = make_workspace(tmp_path, mutants=False)
    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001", prediction="rtol >= 0.01", check="basic:tol")])
    ws.generate()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "widen_pv_defaults.py").write_text(WIDENS_DEFAULTS, encoding="utf-8")
    assert ws.pytest("generated_tests").returncode == 1  # torch's table: rtol 1.3e-6
    env = ws.env(PV_FORCE_NO_CUDA="1")
    env["PYTHONPATH"] = f"{outside}:{env['PYTHONPATH']}"
    assert ws.pytest("-p", "widen_pv_defaults", "generated_tests", env=env).returncode == 0
    records = ws.records()
    assert records[1].verdict.value == "PASS" and records[1].tolerance_table["float32"]["rtol"] == 0.02
    assert records[1].judged_tolerance is None  # the override (none) is the contract's
    state, f = _state_of(ws, monkeypatch)
    assert state == "FALSIFIED", f  # the honest FAIL decides; the widened PASS does not count
    assert Path(ws.ledger).read_text(encoding="utf-8").count('"tolerance_table"') == 2


def _state_of(ws, monkeypatch):
    ws.enter(monkeypatch)
    data = json.loads(cli("status")("--format", "json").stdout)
    f = data["contracts"][0]["falsifiers"][0]
    return f["state"], f


def test_table_differs_judges_only_a_record_that_says_what_table_it_received():
    from pv import tolerance
    from pv.schema import FalsificationTest

    f = FalsificationTest.model_validate({"id": "FALSIFY-X-001", "rule": "r", "prediction": "x < 1", "check": "a.b:c",
                                          "devices": ["cpu"], "if_fails": "i"})
    base = dict(contract="c", contract_version="1", falsifier="FALSIFY-X-001", falsifier_sha256="0", device="cpu",
                verdict="PASS", prediction="x < 1", duration_s=0.0, time_utc="2026-01-01T00:00:00Z")
    assert identity.table_differs(make_record(**base), f) is None  # made before, or no tolerance taken
    assert identity.table_differs(make_record(**base, tolerance_table=tolerance.merged(None)), f) is None
    wide = tolerance.merged(None)
    wide["float32"]["atol"] = 1e-2
    assert "another tolerance table" in identity.table_differs(make_record(**base, tolerance_table=wide), f)
