"""`pv strength`: falsifiers run under planted bugs; KILLED / SURVIVED / ERROR / SKIPPED, exit codes,
ledger records carrying the mutant, the kill matrix (markdown and JSON) and the mutation score.

Every test works in a throw-away workspace with a tiny pure-Python check package (no torch):
`basic:loss` is a good falsifier (it sees the `drops_bias` mutant), `vacuous:always` passes
whatever happens, `basic:boom` crashes.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from pv import mutation
from pv.commands.strength import KILLED, SKIPPED, SURVIVED, StrengthResult, cell_result, render_matrix
from pv_workspace import assert_contains, cli, falsifier, make_workspace

VACUOUS = '''\
def always(*, device, **params):
    """A falsifier that cannot fail: it measures nothing."""
    return {"ok": True}
'''

# Added to the workspace's mutants module: one that acts on CUDA only, one that breaks the check.
MORE_MUTANTS = '''

@mutant("cuda_only_bug")
def cuda_only_bug():
    """A bug of the CUDA path alone."""
    with without_bias():
        yield


cuda_only_bug.pv_devices = ("cuda",)  # where it can show (pv strength reads it)


@mutant("crashes_checks")
def crashes_checks():
    """The runtime raises: a check cannot measure (an ERROR, never a kill)."""
    class Exploding(dict):
        def __getitem__(self, key):
            raise RuntimeError("the runtime fell over")

    original = basic.STATE
    basic.STATE = Exploding()
    try:
        yield
    finally:
        basic.STATE = original
'''


@pytest.fixture(autouse=True)
def _isolated_registry(monkeypatch):
    # In-process CliRunner calls import each workspace's mutants module into this process.
    monkeypatch.setattr(mutation, "REGISTRY", {})


@pytest.fixture
def ws(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path)
    (ws.root / ws.package / "vacuous.py").write_text(VACUOUS, encoding="utf-8")
    mutants = ws.root / ws.package / "mutants.py"
    mutants.write_text(mutants.read_text(encoding="utf-8") + MORE_MUTANTS, encoding="utf-8")
    ws.add_contract("demo", [
        falsifier("FALSIFY-DEMO-001", devices=("cpu", "cuda"), mutants=["drops_bias"]),
        falsifier("FALSIFY-DEMO-002", prediction="ok", check="vacuous:always",
                  mutants=["drops_bias", "does_nothing"]),
    ])
    return ws.enter(monkeypatch)


pv = cli("strength")


def records_by_pair(ws):
    return {(r.falsifier, r.mutant, r.device): r for r in ws.records()}


# ---- declared pairs ----------------------------------------------------------------------------


def test_good_falsifier_killed_vacuous_survives_every_mutant_exit_one(ws):
    result = pv("--device", "cpu")
    assert result.exit_code == 1, result.output
    out = result.output
    assert_contains(out, [
        "mutant does_nothing: 1 falsifier test(s)",
        "mutant drops_bias: 2 falsifier test(s)",
        "FALSIFY-DEMO-001  drops_bias  KILLED  (cpu FAIL)",
        "FALSIFY-DEMO-002  drops_bias  SURVIVED  (cpu PASS)",
        "FALSIFY-DEMO-002  does_nothing  SURVIVED  (cpu PASS)",
        "mutation score: 1/3 (33.3%) killed (declared pairs)",
        "SURVIVED: FALSIFY-DEMO-002 passes with drops_bias planted",
        "SURVIVED: FALSIFY-DEMO-002 passes with does_nothing planted",
        "3 record(s) appended to evidence/ledger.jsonl",
    ])
    # one ledger record per pair run, each carrying its mutant
    records = records_by_pair(ws)
    assert {k: r.verdict.value for k, r in records.items()} == {
        ("FALSIFY-DEMO-001", "drops_bias", "cpu"): "FAIL",
        ("FALSIFY-DEMO-002", "drops_bias", "cpu"): "PASS",
        ("FALSIFY-DEMO-002", "does_nothing", "cpu"): "PASS",
    }
    assert "mutant:   drops_bias (killed)" in records[("FALSIFY-DEMO-001", "drops_bias", "cpu")].message
    assert len({r.run_id for r in records.values()}) == 2  # one pytest run per mutant


def test_all_declared_killed_exits_zero_and_lifecycle_sees_the_kills(ws):
    # without the bug first: a FAIL under it is a kill only where the falsifier PASSes without it
    assert cli("run")("FALSIFY-DEMO-001", "--device", "cpu").exit_code == 0
    result = pv("FALSIFY-DEMO-001", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "mutation score: 1/1 (100.0%) killed" in result.output
    assert "does_nothing" not in result.output  # not declared by 001: not run
    from pv import lifecycle
    from pv.loader import load_contract

    loaded, _ = load_contract(ws.contracts / "demo-v1.yaml")
    status = lifecycle.contract_status(loaded.contract, ws.records())
    demo1 = next(f for f in status.falsifiers if f.id == "FALSIFY-DEMO-001")
    assert demo1.strength == "1/1" and demo1.mutants[0].state is lifecycle.MutantState.KILLED


def test_auto_device_skips_absent_cuda_but_kills_on_cpu(ws):
    result = pv("FALSIFY-DEMO-001")
    assert result.exit_code == 0, result.output
    assert "FALSIFY-DEMO-001  cuda  SKIPPED" in result.output
    assert "FALSIFY-DEMO-001  drops_bias  KILLED  (cpu FAIL, cuda SKIP)" in result.output
    verdicts = {(r.device, r.verdict.value) for r in ws.records()}
    assert verdicts == {("cpu", "FAIL"), ("cuda", "SKIP")}


def test_only_skips_is_not_evidence_and_not_a_failure(ws):
    ws.add_contract("gpu", [falsifier("FALSIFY-GPU-001", devices=("cuda",), mutants=["drops_bias"])])
    result = pv("FALSIFY-GPU-001")
    assert result.exit_code == 0, result.output
    assert_contains(result.output, [
        "FALSIFY-GPU-001  drops_bias  SKIPPED  (cuda SKIP)",
        "1 pair(s) skipped — not evidence (device absent)",
        "mutation score: 0/0 killed",
    ])


def test_an_erroring_check_is_an_error_never_a_kill(ws):
    ws.add_contract("crash", [falsifier("FALSIFY-CRASH-001", mutants=["crashes_checks"])])
    result = pv("--contract", "crash")
    assert result.exit_code == 1, result.output
    assert_contains(result.output, [
        "FALSIFY-CRASH-001  crashes_checks  ERROR",
        "ERROR: FALSIFY-CRASH-001 under crashes_checks could not run — not a kill",
        "the runtime fell over",
        # the score leaves the ERROR out of its denominator, and says so on the same line
        "mutation score: 0/0 killed (declared pairs); 1 pair(s) ERROR, not judged (not kills)",
    ])
    assert [r.verdict.value for r in ws.records()] == ["ERROR"]


def test_a_mutant_acting_on_cuda_only_is_not_run_on_cpu(ws):
    ws.add_contract("cuda-bug", [falsifier("FALSIFY-CB-001", devices=("cpu", "cuda"), mutants=["cuda_only_bug"])])
    result = pv("FALSIFY-CB-001", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "1 pair(s) not applicable here (the mutant acts on other devices or runtimes)" in result.output
    assert not ws.ledger.exists()
    result = pv("FALSIFY-CB-001", "--device", "auto")  # cuda is absent here: skipped, not survived
    assert result.exit_code == 0, result.output
    assert "FALSIFY-CB-001  cuda  SKIPPED" in result.output and "FALSIFY-CB-001  cpu" not in result.output
    assert [(r.device, r.verdict.value) for r in ws.records()] == [("cuda", "SKIP")]


def test_unproven_falsifier_is_a_finding(ws):
    ws.add_contract("bare", [falsifier("FALSIFY-BARE-001")])
    result = pv("--contract", "bare")
    assert result.exit_code == 1
    assert "UNPROVEN (declare no mutant): FALSIFY-BARE-001" in result.output
    assert not ws.ledger.exists()


def test_usage_errors_exit_two(ws):
    result = pv("--mutant", "drop_bias")
    assert result.exit_code == 2
    assert "unknown mutant 'drop_bias'; did you mean 'drops_bias'?" in result.stderr
    result = pv("FALSIFY-DEMO-01")
    assert result.exit_code == 2 and "did you mean FALSIFY-DEMO-001" in result.stderr
    assert pv("--no-ledger", "--ledger", "x.jsonl").exit_code == 2
    result = pv("FALSIFY-DEMO-001", "--mutant", "does_nothing")
    assert result.exit_code == 2 and "no selected falsifier declares does_nothing" in result.stderr
    assert not ws.ledger.exists()


def test_declared_but_unregistered_mutant_is_reported(ws):
    ws.add_contract("ghost", [falsifier("FALSIFY-GHOST-001", mutants=["not_registered_anywhere"])])
    result = pv("--contract", "ghost")
    assert result.exit_code == 1
    assert "declared but not registered in " in result.stderr and "not_registered_anywhere" in result.stderr


def test_only_this_workspaces_mutants_are_used(ws):
    @mutation.mutant("foreign_mutant")
    def foreign_mutant():
        yield

    result = pv("--matrix", "--device", "cpu", "--no-ledger", "--format", "json")
    assert "foreign_mutant" not in json.loads(result.stdout)["mutants"]


def test_no_ledger_and_explicit_ledger(ws):
    result = pv("FALSIFY-DEMO-001", "--device", "cpu", "--no-ledger")
    assert result.exit_code == 0 and "dry run: no ledger records written" in result.output
    assert not ws.ledger.exists()
    result = pv("FALSIFY-DEMO-001", "--device", "cpu", "--ledger", "gpu.jsonl")
    assert result.exit_code == 0 and "1 record(s) appended to gpu.jsonl" in result.output
    from pv import ledger

    assert [r.mutant for r in ledger.read(ws.root / "gpu.jsonl").records] == ["drops_bias"]


# ---- the matrix --------------------------------------------------------------------------------


def test_matrix_markdown_score_and_sections(ws):
    result = pv("--matrix", "--device", "cpu", "--write", "KILL_MATRIX.md")
    # the vacuous falsifier's declared pairs survive: exit 1
    assert result.exit_code == 1, result.output
    text = (ws.root / "KILL_MATRIX.md").read_text()
    assert text in result.output
    # cpu: 001 kills drops_bias only (crashes_checks errors, cuda_only_bug is not applicable)
    assert_contains(text, [
        "- matrix: 2 falsifiers × 4 mutants",
        "- mutation score: 1/5 (20.0%)",
        "- declared pairs killed: 1/3 (33.3%)",
        "- 1 pair(s) ERROR: not judged, so outside the score (a crash is not a kill)",
        "| falsifier | `crashes_checks` | `cuda_only_bug` | `does_nothing` | `drops_bias` | kills |",
        "| `FALSIFY-DEMO-001` | E | - | · | **K** | 1 |",
        "| `FALSIFY-DEMO-002` | · | - | **·** | **·** | 0 |",
        "| killed by | 0 | 0 | 0 | 1 | |",
        "- `drops_bias`: only `FALSIFY-DEMO-001`",
        "## Mutants no falsifier kills\n\n- `crashes_checks`\n- `does_nothing`",
        "## Falsifiers that kill nothing beyond their declared mutants\n\n- `FALSIFY-DEMO-001`",
        "## Falsifiers that kill no mutant at all\n\n- `FALSIFY-DEMO-002`",
        "- `FALSIFY-DEMO-002` survived `drops_bias`",
        "`cuda_only_bug`: acts on cuda only",
    ])
    assert "mutation score: 1/5 (20.0%) killed; 1 pair(s) ERROR, not judged (not kills)" in result.output
    # every pair that ran is a record with its mutant (matrix runs are evidence too)
    records = records_by_pair(ws)
    assert len(records) == 6 and all(r.mutant for r in records.values())


def test_matrix_json_is_clean_on_stdout(ws):
    ws.generate()
    (ws.contracts / "demo-v1.yaml").write_text((ws.contracts / "demo-v1.yaml").read_text() + "\n")
    result = pv("--matrix", "--device", "cpu", "--format", "json", "--no-ledger")
    assert result.exit_code == 1
    data = json.loads(result.stdout)  # regeneration and progress lines went to stderr
    assert "regenerating" in result.stderr and "mutant drops_bias" in result.stderr
    assert data["mode"] == "matrix" and data["device"] == "cpu"
    assert data["score"] == {"killed": 1, "judged": 5, "ratio": 0.2, "errored": 1}
    assert data["declared_score"]["killed"] == 1 and data["declared_score"]["judged"] == 3
    assert data["declared_score"]["errored"] == 0  # crashes_checks is declared by no falsifier
    cells = {(c["falsifier"], c["mutant"]): c for c in data["cells"]}
    assert cells[("FALSIFY-DEMO-001", "drops_bias")]["result"] == KILLED
    assert cells[("FALSIFY-DEMO-001", "drops_bias")]["declared"] is True
    assert cells[("FALSIFY-DEMO-001", "does_nothing")]["result"] == SURVIVED
    assert cells[("FALSIFY-DEMO-001", "crashes_checks")]["result"] == "ERROR"
    assert "the runtime fell over" in cells[("FALSIFY-DEMO-001", "crashes_checks")]["message"]
    assert ("FALSIFY-DEMO-001", "cuda_only_bug") not in cells
    assert {"falsifier": "FALSIFY-DEMO-001", "mutant": "cuda_only_bug", "reason": "acts on cuda only"} in \
        data["not_applicable"]
    assert data["killed_by"]["drops_bias"] == ["FALSIFY-DEMO-001"]
    assert {(c["falsifier"], c["mutant"]) for c in data["not_killed"]} == {
        ("FALSIFY-DEMO-002", "drops_bias"), ("FALSIFY-DEMO-002", "does_nothing")}
    assert data["records"] == 0 and data["broken_runs"] == [] and data["unproven"] == []


def test_matrix_exits_zero_when_every_declared_pair_is_killed(ws):
    ws.add_contract("demo", [falsifier("FALSIFY-DEMO-001", mutants=["drops_bias"]),
                             falsifier("FALSIFY-DEMO-002", prediction="ok", check="vacuous:always",
                                       mutants=["crashes_checks"])])
    result = pv("--matrix", "--device", "cpu", "--mutant", "drops_bias", "--no-ledger")
    # 002 survives drops_bias, undeclared: reported, not a failure; crashes_checks was filtered out
    assert result.exit_code == 0, result.output
    assert "| `FALSIFY-DEMO-002` | · | 0 |" in result.output


def test_parallel_jobs_give_the_same_matrix(ws):
    serial = json.loads(pv("--matrix", "--device", "cpu", "--format", "json", "--no-ledger").stdout)
    parallel = json.loads(pv("--matrix", "--device", "cpu", "--format", "json", "--no-ledger", "-j", "3").stdout)
    for data in (serial, parallel):
        data.pop("seconds")
    assert serial == parallel


def test_a_broken_pytest_run_is_reported_and_never_a_kill(ws):
    (ws.root / "conftest.py").write_text("raise RuntimeError('conftest boom')\n")
    result = pv("FALSIFY-DEMO-001", "--device", "cpu")
    assert result.exit_code == 1
    assert "pytest run under drops_bias broke" in result.stderr and "conftest boom" in result.stderr
    assert "FALSIFY-DEMO-001  drops_bias  ERROR" in result.output
    assert "pytest runs broke under: drops_bias" in result.output


# ---- the pieces --------------------------------------------------------------------------------


@pytest.mark.parametrize("verdicts,expected", [
    ({"cpu": "FAIL", "cuda": "PASS"}, KILLED),   # a mutant of one path: killed where it shows
    ({"cpu": "PASS", "cuda": "ERROR"}, "ERROR"),
    ({"cpu": "PASS", "cuda": "SKIP"}, SURVIVED),
    ({"cuda": "SKIP"}, SKIPPED),
])
def test_cell_result_over_devices(verdicts, expected):
    assert cell_result(verdicts) == expected


def test_render_without_matrix_omits_matrix_only_sections():
    result = StrengthResult(falsifiers=["F-1", "F-2"], mutants=["m"], declared={"F-1": ["m"], "F-2": []},
                            unproven=["F-2"], device="cpu")
    result.verdicts[("F-1", "m")] = {"cpu": "FAIL"}
    text = render_matrix(result)
    assert "| `F-1` | **K** | 1 |" in text and "| `F-2` |  | 0 |" in text
    assert "exactly one falsifier" not in text and "## UNPROVEN falsifiers (declare no mutant)\n\n- `F-2`" in text
    assert "- mutation score: 1/1 (100.0%) (killed / (killed + survived), declared pairs)" in text
    assert textwrap.dedent(text).endswith("\n")


def test_from_ledger_rebuilds_the_result_without_running_anything(ws):
    assert pv("--device", "cpu").exit_code == 1  # records the three declared pairs
    before = ws.ledger.read_bytes()
    replay = pv("--device", "cpu", "--from-ledger", "--format", "json")
    assert ws.ledger.read_bytes() == before  # nothing run, nothing written
    data = json.loads(replay.stdout)
    results = {(c["falsifier"], c["mutant"]): c["result"] for c in data["cells"]}
    assert results == {("FALSIFY-DEMO-001", "drops_bias"): KILLED,
                       ("FALSIFY-DEMO-002", "drops_bias"): SURVIVED,
                       ("FALSIFY-DEMO-002", "does_nothing"): SURVIVED}
    assert replay.exit_code == 1  # a recorded survivor still fails


def test_from_ledger_leaves_cells_blank_when_the_code_changed_since(ws):
    assert pv("--device", "cpu").exit_code == 1
    mutants = ws.root / ws.package / "mutants.py"
    mutants.write_text(mutants.read_text() + "\nEXTRA = 1\n")  # the planted bugs' module changed
    data = json.loads(pv("--device", "cpu", "--from-ledger", "--format", "json").stdout)
    results = {(c["falsifier"], c["mutant"]): c["result"] for c in data["cells"]}
    assert KILLED not in results.values() and SURVIVED not in results.values(), results


# ---- runtimes: a planted bug is judged only on the runtimes it is planted in ------------------

RUNTIME_CHECKS = '''

BROKEN = set()  # the runtimes (adapter class names) a planted bug breaks right now


class Alpha:
    pass


class Beta:
    pass


def rt_loss(*, device, runtime):
    """observations: val_loss, vocab_size (what the runtime under test computes)"""
    return {"val_loss": 18.55 if type(runtime).__name__ in BROKEN else 2.0, "vocab_size": 1024}
'''

RUNTIME_MUTANTS = '''

@contextmanager
def _breaks(runtime):
    basic.BROKEN.add(runtime)
    try:
        yield
    finally:
        basic.BROKEN.discard(runtime)


@mutant("alpha_bug", runtimes="alpha")
def alpha_bug():
    """A bug in runtime alpha's code."""
    with _breaks("Alpha"):
        yield


@mutant("beta_bug", runtimes=("beta",))
def beta_bug():
    """A bug in runtime beta's adapter."""
    with _breaks("Beta"):
        yield


@mutant("default_bug")
def default_bug():
    """Left unsaid: planted in the project's default runtime, alpha (the first of the table)."""
    with _breaks("Alpha"):
        yield
'''


@pytest.fixture
def rws(tmp_path, monkeypatch):
    ws = make_workspace(tmp_path)
    basic = ws.root / ws.package / "basic.py"
    basic.write_text(basic.read_text(encoding="utf-8") + RUNTIME_CHECKS, encoding="utf-8")
    mutants = ws.root / ws.package / "mutants.py"
    mutants.write_text(mutants.read_text(encoding="utf-8") + RUNTIME_MUTANTS, encoding="utf-8")
    pyproject = ws.root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text(encoding="utf-8") + (
        f'runtimes = {{ alpha = "{ws.package}.basic:Alpha", beta = "{ws.package}.basic:Beta" }}\n'), encoding="utf-8")
    both = dict(check="basic:rt_loss", runtimes=["alpha", "beta"])
    ws.add_contract("rt", [
        falsifier("FALSIFY-RT-001", mutants=["alpha_bug", "beta_bug", "default_bug"], **both),
    ])
    return ws.enter(monkeypatch)


def test_each_bug_runs_only_on_the_cells_of_its_runtime_and_is_killed_there(rws):
    result = pv("--device", "cpu")
    assert result.exit_code == 0, result.output
    assert_contains(result.output, [
        "FALSIFY-RT-001  alpha_bug  KILLED  (cpu@alpha FAIL)",
        "FALSIFY-RT-001  beta_bug  KILLED  (cpu@beta FAIL)",
        "FALSIFY-RT-001  default_bug  KILLED  (cpu@alpha FAIL)",
        "mutation score: 3/3 (100.0%) killed (declared pairs)",
    ])
    # never run where the bug's code does not run: a pass there would be called blindness
    assert {(r.mutant, r.runtime, r.verdict.value) for r in rws.records()} == {
        ("alpha_bug", "alpha", "FAIL"), ("beta_bug", "beta", "FAIL"), ("default_bug", "alpha", "FAIL")}


def test_a_declared_bug_no_cell_of_the_falsifier_meets_is_a_finding_not_a_skip(rws):
    rws.add_contract("alpha-only", [falsifier("FALSIFY-RT-002", check="basic:rt_loss", runtimes=["alpha"],
                                              mutants=["beta_bug"])])
    validate = cli("validate")()
    assert validate.exit_code == 1 and "PV320 mutant 'beta_bug' is planted in beta only" in validate.output, \
        validate.output
    result = pv("FALSIFY-RT-002", "--device", "cpu", "--format", "json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["no_cell"] == [{"falsifier": "FALSIFY-RT-002", "mutant": "beta_bug",
                                "reason": "planted in beta only; the falsifier runs on alpha"}]
    assert data["cells"] == [] and not rws.ledger.exists()  # nothing run, nothing recorded
    text = pv("FALSIFY-RT-002", "--device", "cpu")
    assert "NO CELL: FALSIFY-RT-002 declares beta_bug, which it can never meet" in text.output


def test_an_off_runtime_record_counts_neither_way(rws):
    """What an attacker (or an older pv) leaves in the ledger: the bug run on a runtime it is not
    planted in. A PASS there must not turn a kill into a survivor; a FAIL there must not be a kill."""
    from pv import lifecycle
    from pv.identity import EvidenceCheck
    from pv.loader import load_contract

    run = cli("run")
    assert run("--all", "--device", "cpu", "--runtime", "beta", "--mutant", "alpha_bug").exit_code == 0  # PASS on beta
    loaded, _ = load_contract(rws.contracts / "rt-v1.yaml")

    def alpha_bug_state():
        status = lifecycle.contract_status(loaded.contract, rws.records(), EvidenceCheck(rws.workspace(), [loaded]))
        return next(m for m in status.falsifiers[0].mutants if m.mutant == "alpha_bug")

    replay = json.loads(pv("--device", "cpu", "--from-ledger", "--format", "json").stdout)
    assert replay["cells"] == [] and alpha_bug_state().state is lifecycle.MutantState.NOT_RUN  # not SURVIVED

    assert run("FALSIFY-RT-001", "--device", "cpu", "--runtime", "alpha").exit_code == 0  # alpha without the bug
    assert pv("--device", "cpu", "--mutant", "alpha_bug").exit_code == 0  # the kill, on alpha
    assert run("--all", "--device", "cpu", "--runtime", "beta", "--mutant", "alpha_bug").exit_code == 0  # a later PASS on beta
    replay = json.loads(pv("--device", "cpu", "--from-ledger", "--format", "json", "--mutant", "alpha_bug").stdout)
    assert [(c["mutant"], c["result"], c["devices"]) for c in replay["cells"]] == [
        ("alpha_bug", KILLED, {"cpu@alpha": "FAIL"})]
    state = alpha_bug_state()
    assert state.state is lifecycle.MutantState.KILLED and [d.runtime for d in state.devices] == ["alpha"]

    # and a FAIL on a runtime the bug is not planted in is no kill: the broken check is not the bug
    rws.ledger.unlink()
    with_beta_broken = rws.root / rws.package / "basic.py"
    with_beta_broken.write_text(with_beta_broken.read_text().replace("BROKEN = set()", 'BROKEN = {"Beta"}'))
    assert run("--all", "--device", "cpu", "--runtime", "beta", "--mutant", "alpha_bug").exit_code == 1  # FAIL on beta
    assert alpha_bug_state().state is lifecycle.MutantState.NOT_RUN


def test_a_fail_under_a_bug_planted_in_check_code_only_is_no_kill_in_the_live_report(capsys):
    """Red team 2026-12-03: pv status refused the kill of a bug planted in the adapter only (the
    instrument, not the runtime), but `pv strength`'s own report still printed KILLED. The live
    outcome is judged by the same rule before it is counted."""
    from types import SimpleNamespace

    from pv.commands.strength import ERROR, _print_summary, planted_in_checks_only

    ws = SimpleNamespace(check_packages=("mylib_checks",), code_packages=("mylib",),
                         mutants_module="mylib_checks.mutants")
    entry = (None, SimpleNamespace(runtimes=["mytrainer"]))
    in_adapter = SimpleNamespace(planted_at=["mylib_checks.adapter:Model.learning_rate"], runtime="mytrainer")
    why = planted_in_checks_only(in_adapter, entry, ws)
    assert why and why.startswith("the bug is planted in check code only")
    in_runtime = SimpleNamespace(planted_at=["mylib.train:lr_at"], runtime="mytrainer")
    assert planted_in_checks_only(in_runtime, entry, ws) is None
    unrecorded = SimpleNamespace(planted_at=None, runtime="mytrainer")  # records from before seams
    assert planted_in_checks_only(unrecorded, entry, ws) is None

    result = StrengthResult(falsifiers=["F-1"], mutants=["adapter_rate_late"], declared={"F-1": ["adapter_rate_late"]},
                            device="cpu")
    result.verdicts[("F-1", "adapter_rate_late")] = {"cpu": "ERROR"}
    result.messages[("F-1", "adapter_rate_late")] = why
    assert result.cell("F-1", "adapter_rate_late") == ERROR and result.score(declared_only=True) == (0, 0)
    _print_summary(result, None)
    out = capsys.readouterr().out
    assert "NOT A KILL: F-1 FAILed under adapter_rate_late, but the bug is planted in check code only" in out
    assert "1 pair(s) ERROR, not judged" in out and "KILLED" not in out
