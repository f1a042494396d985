"""pv.identity: a record counts only if the falsifier's own generated test ran the contract's
current definition. The attacks are written as an attacker would try them: edit the generated
test to a weaker prediction and restore it, plant a marker test elsewhere, pass extra test paths
to `pv run`."""

from __future__ import annotations

import json

import pytest

from pv import identity
from pv.ledger import Verdict, make_record
from pv_workspace import cli

from identity_demo import (DEMO, HONEST, NEW_CHECK, THIRD, as_test3, defined_test4, demo_workspace,
                           keep_only, regenerate, status_of)


# --- the attacks, end to end ---------------------------------------------------------------------



@pytest.fixture
def ws(tmp_path, monkeypatch):
    return demo_workspace(tmp_path, monkeypatch)


def test_attack_a_generated_test_edited_to_a_weaker_prediction_then_restored(ws):
    """An honest FAIL; then the generated test is edited to judge `val_loss < 100` (its marker,
    with the contract's hash, left alone), run (a PASS is recorded), and restored, so that
    `generate --check` is green. The dashboard must keep the FAIL, and the release gate fail."""
    module = ws.generated / "test_demo.py"
    honest = module.read_text()
    assert ws.pytest("generated_tests", "-k", "demo_001").returncode == 1  # FAIL recorded
    judged = f"prediction={HONEST!r}, params={{'loss': 9.0}}"
    assert honest.count(judged) == 1
    module.write_text(honest.replace(judged, "prediction='val_loss < 100', params={'loss': 9.0}"))
    edited = ws.pytest("generated_tests", "-k", "demo_001")
    assert edited.returncode == 0, edited.stdout
    module.write_text(honest)
    assert cli("generate")("--check").exit_code == 0

    records = ws.records()
    assert [r.verdict.value for r in records] == ["FAIL", "PASS"]
    assert records[1].falsifier_sha256 == records[0].falsifier_sha256  # the marker claims the contract's hash
    assert records[1].prediction == "val_loss < 100"  # but the record says what was judged
    assert records[1].test_sha256 != records[0].test_sha256
    state = status_of(ws, "FALSIFY-DEMO-001")
    assert state["state"] == "FALSIFIED"
    assert state["devices"]["cpu"]["record"]["record_id"] == records[0].record_id
    gate = cli("status")("--require-fresh")
    assert gate.exit_code == 1


def test_attack_a_weaker_params_edit_alone_is_refused(ws):
    """The prediction kept, the params changed so the check observes a small loss."""
    module = ws.generated / "test_demo.py"
    honest = module.read_text()
    module.write_text(honest.replace("params={'loss': 9.0}", "params={'loss': 0.5}"))
    assert ws.pytest("generated_tests", "-k", "demo_001").returncode == 0
    module.write_text(honest)
    record = ws.records()[-1]
    assert record.verdict.value == "PASS" and record.judged_params == {"loss": 0.5}
    state = status_of(ws, "FALSIFY-DEMO-001")
    assert state["state"] == "STALE"
    assert "not what `pv generate` renders" in state["devices"]["cpu"]["stale_because"][0]


def test_the_honest_generated_test_counts(ws):
    assert ws.pytest("generated_tests", "-k", "demo_002").returncode == 0
    record = ws.records()[-1]
    assert record.test_node == "generated_tests/test_demo.py::test_falsify_demo_002[cpu]"
    assert record.judged_params == {} and record.judged_tolerance is None
    assert status_of(ws, "FALSIFY-DEMO-002")["state"] == "DISCHARGED"


def test_pvs_plugin_records_the_test4_digest_and_the_templates_of_what_ran(ws):
    assert ws.pytest("generated_tests", "-k", "demo_002").returncode == 0
    source = (ws.generated / "test_demo.py").read_text()
    record = ws.records()[-1]
    assert (record.test_sha256, record.test_templates) == defined_test4(source, "test_falsify_demo_002")
    assert record.test_sha256 != identity.test_sha256(source, "test_falsify_demo_002")  # not "test3"
    assert len(record.test_templates) == 1  # 001 and 002 call one check the same way
    assert status_of(ws, "FALSIFY-DEMO-002")["state"] == "DISCHARGED"


# --- a falsifier added to or removed from a contract ---------------------------------------------


@pytest.mark.parametrize("digest", ["test4", "test3"])
@pytest.mark.parametrize("change", ["added", "removed"])
def test_a_falsifier_added_or_removed_leaves_the_other_falsifiers_records_counting(ws, change, digest):
    """The FAIL of 001 and the PASS of 002 were recorded by the module as rendered before; a
    falsifier of the same template added to the contract (or removed from it) changes what `pv
    generate` renders, but not what 001's and 002's records are evidence for (records made
    before "test4" included)."""
    if change == "removed":
        regenerate(ws, [*DEMO, THIRD])
    assert ws.pytest("generated_tests").returncode == 1  # 001 FAILs
    verdicts = {r.falsifier: r.verdict.value for r in ws.records()}
    assert (verdicts["FALSIFY-DEMO-001"], verdicts["FALSIFY-DEMO-002"]) == ("FAIL", "PASS")
    before = (ws.generated / "test_demo.py").read_text()
    if digest == "test3":
        keep_only(ws, [as_test3(ws, r, before) for r in ws.records() if r.falsifier != THIRD["id"]])
    regenerate(ws, [*DEMO, THIRD] if change == "added" else DEMO)
    assert (ws.generated / "test_demo.py").read_text() != before
    assert status_of(ws, "FALSIFY-DEMO-001")["state"] == "FALSIFIED"
    assert status_of(ws, "FALSIFY-DEMO-002")["state"] == "DISCHARGED"
    if change == "added":
        assert status_of(ws, "FALSIFY-DEMO-003")["state"] == "PENDING"


@pytest.mark.parametrize("digest", ["test4", "test3"])
def test_a_record_made_while_another_falsifiers_test_ran_extra_code_never_counts(ws, digest):
    """The generated module edited so that 001's test also sets a global (it could patch the
    runtime 002's check runs), 002 run, the module restored: 002's PASS is refused. ("test4":
    as pv's plugin writes it now; "test3": a record made before, judged as before.)"""
    module = ws.generated / "test_demo.py"
    honest = module.read_text()
    line = "    falsify(loss, device=device, falsifier='FALSIFY-DEMO-001'"
    assert honest.count(line) == 1
    patched = honest.replace(line, "    import os\n    os.environ['PATCHED'] = '1'\n" + line)
    module.write_text(patched)
    assert ws.pytest("generated_tests", "-k", "demo_002").returncode == 0
    module.write_text(honest)
    assert cli("generate")("--check").exit_code == 0
    record = ws.records()[-1]
    if digest == "test3":
        keep_only(ws, [as_test3(ws, record, patched)])
    else:  # its own test ran as rendered: only the sibling's template is not the module's
        assert record.test_sha256 == identity.test4_sha256(honest, "test_falsify_demo_002")
        assert not set(record.test_templates) <= set(identity.template_digests(honest))
    state = status_of(ws, "FALSIFY-DEMO-002")
    assert state["state"] == "STALE"
    assert state["devices"]["cpu"]["stale_because"][0] == "not counted: " + (
        identity.SIBLING_OTHER if digest == "test4" else identity.RENDERS_OTHER)


def test_a_test4_record_keeps_counting_when_a_falsifier_with_a_new_check_is_added(ws):
    """The subset rule: 001's FAIL and 002's PASS ran with the module's templates then; the
    falsifier added since brings a template that did not run with them (so cannot have changed
    their verdicts). "test3" records of the same runs go STALE, as before."""
    assert ws.pytest("generated_tests").returncode == 1
    before = (ws.generated / "test_demo.py").read_text()
    fail, pass_ = ws.records()
    assert fail.test_templates == pass_.test_templates and len(fail.test_templates) == 1
    regenerate(ws, [*DEMO, NEW_CHECK])
    after = (ws.generated / "test_demo.py").read_text()
    assert len(identity.template_digests(after)) == 2  # a new template
    assert identity.test_sha256(after, "test_falsify_demo_002") != identity.test_sha256(before, "test_falsify_demo_002")
    assert status_of(ws, "FALSIFY-DEMO-001")["state"] == "FALSIFIED"
    assert status_of(ws, "FALSIFY-DEMO-002")["state"] == "DISCHARGED"
    assert status_of(ws, "FALSIFY-DEMO-004")["state"] == "PENDING"
    keep_only(ws, [as_test3(ws, fail, before), as_test3(ws, pass_, before)])  # records pv made before "test4"
    for fid in ("FALSIFY-DEMO-001", "FALSIFY-DEMO-002"):
        state = status_of(ws, fid)
        assert state["state"] == "STALE" and state["devices"]["cpu"]["stale_because"][0] == "not counted: " + identity.RENDERS_OTHER


def test_a_test4_record_is_refused_once_a_sibling_whose_template_ran_is_removed(ws):
    """The falsifier of the new check ran beside 002 (in the same module, so in the same
    session), then was removed from the contract: its code is no longer pv's, so 002's PASS no
    longer counts; re-added, the PASS counts again."""
    regenerate(ws, [*DEMO, NEW_CHECK])
    assert ws.pytest("generated_tests", "-k", "demo_002").returncode == 0
    assert len(ws.records()[-1].test_templates) == 2
    assert status_of(ws, "FALSIFY-DEMO-002")["state"] == "DISCHARGED"
    regenerate(ws, DEMO)
    state = status_of(ws, "FALSIFY-DEMO-002")
    assert state["state"] == "STALE"
    assert state["devices"]["cpu"]["stale_because"][0] == "not counted: " + identity.SIBLING_OTHER
    regenerate(ws, [*DEMO, NEW_CHECK])
    assert status_of(ws, "FALSIFY-DEMO-002")["state"] == "DISCHARGED"


@pytest.mark.parametrize("change", [{"prediction": "val_loss < 0.5 * ln(vocab_size)"}, {"params": {"loss": 0.5}}])
def test_a_test4_record_is_refused_when_its_own_falsifier_changes(ws, change):
    """002's own test changed (a new bound or params): its record ran another own test, whatever
    the templates say (002 keeps its template: only its literals changed)."""
    from pv.loader import load_contract

    assert ws.pytest("generated_tests", "-k", "demo_002").returncode == 0
    record = ws.records()[-1]
    regenerate(ws, [DEMO[0], {**DEMO[1], **change}])
    after = (ws.generated / "test_demo.py").read_text()
    assert set(record.test_templates) == set(identity.template_digests(after))
    loaded, _ = load_contract(ws.contracts / "demo-v1.yaml")
    check = identity.EvidenceCheck(ws.workspace(), [loaded])
    assert check.refuses(record, loaded.contract.falsifier("FALSIFY-DEMO-002")) == identity.RENDERS_OTHER
    assert status_of(ws, "FALSIFY-DEMO-002")["state"] == "STALE"


def test_a_ledger_with_test_templates_round_trips_through_reading_and_merging(tmp_path):
    from pv import ledger, ledgermerge

    base = dict(contract="c", contract_version="1", falsifier="FALSIFY-X-001", falsifier_sha256="0",
                device="cpu", verdict="PASS", prediction="x < 1", duration_s=0.0)
    old = make_record(**base, schema_version=7, test_node="n", test_sha256="3" * 64, time_utc="2026-01-01T00:00:00Z")
    new = make_record(**base, test_node="n", test_sha256="4" * 64, test_templates=["a" * 64, "b" * 64],
                      time_utc="2026-01-02T00:00:00Z")
    assert new.schema_version == ledger.LEDGER_SCHEMA_VERSION == 10 and old.test_templates is None
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, [old])
    common = path.read_bytes()
    ledger.append(path, [new])
    ours = path.read_bytes()
    assert ledger.read(path).records == [old, new]
    merged = ledgermerge.merge(common, ours, common + old.model_copy(update={"record_id": "t" * 32}).to_line())
    path.write_bytes(merged)
    records = ledger.read(path).records
    assert new in records and records[records.index(new)].test_templates == ["a" * 64, "b" * 64]
    line = json.loads(new.to_line())
    del line["test_templates"]  # a line written before the field existed
    assert ledger.parse_record(json.dumps({**line, "schema_version": 7}).encode()).test_templates is None


def test_a_record_made_before_test3_digests_counts_as_before(ws):
    """A PASS an older pv recorded carries the "test2" digest: it counts while the module is
    the one it ran, and, as before, not once a falsifier is added (its digest counted each test
    of the module in its place)."""
    from pv.ledger import append

    assert ws.pytest("generated_tests", "-k", "demo_002").returncode == 0
    honest = ws.records()[-1]
    source = (ws.generated / "test_demo.py").read_text()
    ws.ledger.write_text("")
    append(ws.ledger, [honest.model_copy(update={
        "record_id": "z" * 32, "test_templates": None,
        "test_sha256": identity.test2_sha256(source, "test_falsify_demo_002")})])
    assert status_of(ws, "FALSIFY-DEMO-002")["state"] == "DISCHARGED"
    regenerate(ws, [*DEMO, THIRD])
    state = status_of(ws, "FALSIFY-DEMO-002")
    assert state["state"] == "STALE"
    assert "not what `pv generate` renders" in state["devices"]["cpu"]["stale_because"][0]


PLANTED = '''\
import pytest

from pv.harness import falsify


def fake(*, device, **params):
    return {{"val_loss": 0.1, "vocab_size": 1024}}


@pytest.mark.pv_falsifier(contract="demo", contract_version="1.0.0", falsifier="FALSIFY-DEMO-001",
                          sha256="{sha}", prediction="{prediction}")
@pytest.mark.parametrize("device", ["cpu"])
def test_falsify_demo_001(device):
    falsify(fake, device=device, falsifier="FALSIFY-DEMO-001", prediction="{prediction}", params={{"loss": 9.0}})
'''


def planted(ws) -> str:
    from pv.loader import load_contract

    loaded, _ = load_contract(ws.contracts / "demo-v1.yaml")
    f = loaded.contract.falsifier("FALSIFY-DEMO-001")
    return PLANTED.format(sha=f.definition_sha256(), prediction=f.prediction)


@pytest.mark.parametrize("where", ["tests/test_planted.py", "other/generated_tests/test_demo.py"])
def test_attack_a_marker_test_planted_elsewhere_records_nothing(ws, where):
    """A real FAIL, then a test elsewhere carrying pv's marker for the falsifier (its real hash)
    and a fake check: it runs, but records no evidence, and the FAIL keeps deciding."""
    assert ws.pytest("generated_tests", "-k", "demo_001").returncode == 1
    path = ws.root / where
    path.parent.mkdir(parents=True)
    path.write_text(planted(ws))
    run = ws.pytest(where, "-rA")
    assert run.returncode == 0, run.stdout  # the planted test passes as a plain pytest test...
    assert "not evidence, not recorded" in run.stdout and "not the generated test module" in run.stdout
    assert [r.verdict.value for r in ws.records()] == ["FAIL"]  # ...and no PASS reaches the ledger
    assert status_of(ws, "FALSIFY-DEMO-001")["state"] == "FALSIFIED"


def test_a_record_from_a_test_elsewhere_never_counts(ws):
    """A record that names another test (an older pv wrote it, or a hand edit): refused."""
    from pv.ledger import append
    from pv.loader import load_contract
    from pv_workspace import what_ran

    assert ws.pytest("generated_tests", "-k", "demo_001").returncode == 1
    loaded, _ = load_contract(ws.contracts / "demo-v1.yaml")
    fields = what_ran(ws.root, loaded, "FALSIFY-DEMO-001")
    fields["test_node"] = "tests/test_planted.py::test_falsify_demo_001[cpu]"
    fail = ws.records()[0]
    append(ws.ledger, [fail.model_copy(update={"verdict": Verdict.PASS, "record_id": "x" * 32, **fields})])
    state = status_of(ws, "FALSIFY-DEMO-001")
    assert state["state"] == "FALSIFIED"


def test_pv_run_records_only_the_falsifiers_it_selected(ws):
    """Extra paths after `--` run, but only the selected falsifier is recorded."""
    planted_path = ws.root / "tests" / "test_planted.py"
    planted_path.parent.mkdir()
    planted_path.write_text(planted(ws))
    result = cli("run")("FALSIFY-DEMO-002", "--device", "cpu", "--", "tests/test_planted.py",
                        "generated_tests/test_demo.py::test_falsify_demo_001")
    records = ws.records()
    assert [r.falsifier for r in records] == ["FALSIFY-DEMO-002"], result.output
    assert result.exit_code == 0, result.output


def test_an_old_record_without_test_identity_reads_but_never_counts(ws):
    from pv.ledger import append
    from pv.loader import load_contract

    loaded, _ = load_contract(ws.contracts / "demo-v1.yaml")
    f = loaded.contract.falsifier("FALSIFY-DEMO-002")
    from pv.codebind import bind

    append(ws.ledger, [make_record(
        schema_version=3, contract="demo", contract_version="1.0.0", falsifier=f.id,
        falsifier_sha256=f.definition_sha256(), device="cpu", verdict="PASS", prediction=f.prediction,
        duration_s=0.1, time_utc="2026-01-01T00:00:00Z",
        code_digests=bind([f"{ws.package}.basic"], [ws.package], [ws.root], loaded={}))])
    state = status_of(ws, "FALSIFY-DEMO-002")
    assert state["state"] == "STALE"
    assert "no test identity" in state["devices"]["cpu"]["stale_because"][0]


def test_judged_differs_names_what_differs():
    from pv.schema import FalsificationTest

    f = FalsificationTest.model_validate({"id": "FALSIFY-X-001", "rule": "r", "prediction": "x < 1",
                                          "check": "a.b:c", "devices": ["cpu"], "if_fails": "f",
                                          "params": {"n": 1}})
    base = dict(contract="c", contract_version="1", falsifier=f.id, falsifier_sha256="0", device="cpu",
                duration_s=0.0, time_utc="2026-01-01T00:00:00Z")
    same = make_record(**base, verdict="PASS", prediction="x < 1", judged_params={"n": 1})
    assert identity.judged_differs(same, f) is None
    weaker = make_record(**base, verdict="PASS", prediction="x < 9", judged_params={"n": 2})
    assert identity.judged_differs(weaker, f) == "the harness judged another prediction and params than the contract's"
    silent = make_record(**base, verdict="PASS", prediction="x < 1")
    assert identity.judged_differs(silent, f) == "the record does not say what the harness judged"
    errored = make_record(**base, verdict="ERROR", prediction="x < 1")
    assert identity.judged_differs(errored, f) is None
    tol = make_record(**base, verdict="FAIL", prediction="x < 1", judged_params={"n": 1},
                      judged_tolerance={"float32": {"rtol": 1.0}})
    assert "tolerance" in identity.judged_differs(tol, f)


@pytest.mark.parametrize("python, counts", [("3.12.3", True), ("3.11.7", False), (None, False)])
def test_a_pass_recorded_on_python_312_before_test2_digests_counts_only_as_312s(ws, python, counts):
    """The GPU machine ran 3.12: its records carry 3.12's ast.dump digest of the same generated
    test. It counts when the record says 3.12; the same digest claimed by another Python does not."""
    from pv.codegen import function_name
    from pv.ledger import append
    from pv.loader import load_contract
    from pv_workspace import what_ran

    assert ws.pytest("generated_tests", "-k", "demo_002").returncode == 0
    honest = ws.records()[-1]
    loaded, _ = load_contract(ws.contracts / "demo-v1.yaml")
    fields = what_ran(ws.root, loaded, "FALSIFY-DEMO-002")
    source = (ws.root / "generated_tests" / "test_demo.py").read_text()
    fields["test_sha256"] = identity.legacy_test_sha256(source, function_name("FALSIFY-DEMO-002"), "3.12.3")
    fields["test_templates"] = None  # made before "test4"
    ws.ledger.write_text("")
    append(ws.ledger, [honest.model_copy(update={**fields, "record_id": "y" * 32,
                                                 "versions": {**honest.versions, "python": python}})])
    assert (status_of(ws, "FALSIFY-DEMO-002")["state"] == "DISCHARGED") is counts


def test_the_evidence_check_answers_code_changes_from_the_trees_digests():
    from types import SimpleNamespace

    tree = SimpleNamespace(changes=lambda recorded: tuple(sorted(recorded or {"(none)": ""})))
    check = identity.EvidenceCheck(SimpleNamespace(root="."), [], tree=tree)
    assert check.changes({"pkg.b": "1", "pkg.a": "2"}) == ("pkg.a", "pkg.b")
    assert check.changes(None) == ("(none)",)




def test_a_contract_pv_cannot_render_has_no_generated_test_to_match(monkeypatch):
    from types import SimpleNamespace

    from pv import codegen

    def broken(loaded, workspace):
        raise RuntimeError("a renderer bug")

    monkeypatch.setattr(codegen, "render", broken)
    loaded = SimpleNamespace(contract=SimpleNamespace(metadata=SimpleNamespace(id="demo")))
    check = identity.EvidenceCheck(SimpleNamespace(root="."), [loaded], tree=SimpleNamespace())
    assert check.expected("demo", "FALSIFY-A") is None
    assert check.expected("demo", "FALSIFY-B") is None  # asked again: the same answer, remembered


def test_a_record_judged_under_the_contracts_own_tolerance_matches_it():
    from pv.schema import FalsificationTest

    f = FalsificationTest.model_validate({"id": "FALSIFY-X-001", "rule": "r", "prediction": "x < 1",
                                          "check": "a.b:c", "devices": ["cpu"], "if_fails": "f",
                                          "tolerance": {"source": "measured", "float32": {"rtol": 1e-3, "atol": 1e-4}}})
    base = dict(contract="c", contract_version="1", falsifier=f.id, falsifier_sha256="0", device="cpu",
                duration_s=0.0, time_utc="2026-01-01T00:00:00Z", verdict="PASS", prediction="x < 1", judged_params={})
    same = make_record(**base, judged_tolerance={"float32": {"rtol": 1e-3, "atol": 1e-4}})
    assert identity.judged_differs(same, f) is None
    assert identity.judged_differs(make_record(**base), f) == "the harness judged another tolerance than the contract's"


def test_an_evidence_check_not_yet_built_has_no_attributes_instead_of_recursing():
    bare = object.__new__(identity.EvidenceCheck)  # as copy and pickle make one, before its state
    with pytest.raises(AttributeError):
        bare.changes_of_anything  # noqa: B018 - the lookup is the test


def _adapter_pass(executed: dict, **fields) -> object:
    base = dict(contract="c", contract_version="1.0.0", falsifier="FALSIFY-X-001", falsifier_sha256="0" * 64,
                device="cpu", verdict="PASS", prediction="x < 1", duration_s=0.1, time_utc="2026-01-01T00:00:00Z",
                runtime="mytrainer", executed_code=executed)
    return make_record(**{**base, **fields})


def test_attack_an_adapter_that_never_drives_the_runtime_discharges_nothing():
    """Red team 2026-12-03: an adapter answering the learning-rate check with the pack's own
    formula (the runtime imported, never called) PASSed, and a bug planted in the adapter made
    the contract ACTIVE_RUNTIME. A PASS through a runtime whose run executed no function of the
    code under test is refused; one that ran a function of it counts; FAILs, planted-bug records,
    falsifiers without runtimes and projects naming no code package are not judged."""
    from types import SimpleNamespace

    ws = SimpleNamespace(check_packages=("mylib_checks", "pvpack.checks"), code_packages=("mylib",))
    falsifier = SimpleNamespace(runtimes=["mytrainer"])
    imported_only = {"mylib": {"<module>": "a"}, "mylib.train": {"<module>": "b"},
                     "mylib_checks.adapter": {"<module>": "c", "Fixed.learning_rate": "d"}}
    why = identity.runtime_not_driven(_adapter_pass(imported_only), falsifier, ws)
    assert why and "drove no code under test" in why and "mylib" in why
    driven = {**imported_only, "mylib.train": {"<module>": "b", "lr_at": "e"}}
    assert identity.runtime_not_driven(_adapter_pass(driven), falsifier, ws) is None
    assert identity.runtime_not_driven(_adapter_pass(imported_only, verdict="FAIL"), falsifier, ws) is None
    assert identity.runtime_not_driven(_adapter_pass(imported_only, mutant="m"), falsifier, ws) is None
    assert identity.runtime_not_driven(_adapter_pass(imported_only, runtime=None), SimpleNamespace(runtimes=None),
                                       ws) is None
    # the runtime's record without a runtime name still drives one: the falsifier lists it
    assert identity.runtime_not_driven(_adapter_pass(imported_only, runtime=None), falsifier, ws)
    unnamed = SimpleNamespace(check_packages=("mylib_checks",), code_packages=())
    assert identity.runtime_not_driven(_adapter_pass(imported_only), falsifier, unnamed) is None
    # a code package inside a check package is the instrument, not the code under test
    inside = SimpleNamespace(check_packages=("mylib_checks",), code_packages=("mylib_checks.adapter",))
    assert identity.runtime_not_driven(_adapter_pass(imported_only), falsifier, inside) is None


def test_attack_a_kill_of_a_bug_planted_in_the_adapter_is_no_kill():
    """Red team 2026-12-03: an adapter whose learning_rate returns the pack's formula (the runtime
    loaded, its schedule never read) survives the runtime's schedule bugs; the adopter declared a
    bug planted in the adapter instead (NanoModel.learning_rate one step late), it was KILLED, and
    the contract ACTIVE_RUNTIME. A FAIL under a bug whose seams are all in the check packages is
    refused; one seam in the code under test, seams outside the workspace (torch, a library
    runtime: no seam recorded), the bug's own module, and records without `planted_at` count;
    falsifiers without runtimes (pv init's demo checks code in its check package) and projects
    with no code package outside the check packages are not judged."""
    from types import SimpleNamespace

    ws = SimpleNamespace(check_packages=("mylib_checks", "pvpack.checks"), code_packages=("mylib",),
                         mutants_module="mylib_checks.mutants")
    falsifier = SimpleNamespace(runtimes=["mytrainer"])

    def kill(planted_at, **fields):
        return _adapter_pass({}, **{"verdict": "FAIL", "mutant": "adapter_rate_late", "planted_at": planted_at,
                                    **fields})

    def judged(record, f=falsifier, w=ws):
        return identity.planted_in_checks(record, f, w)

    in_adapter = kill(["mylib_checks.adapter:NanoModel.learning_rate"])
    why = judged(in_adapter)
    assert why and why.startswith(identity.PLANTED_IN_CHECKS) and "NanoModel.learning_rate" in why
    assert judged(kill(["mylib_checks.adapter:NanoModel.learning_rate", "mylib.train:lr_at"])) is None
    assert judged(kill(["mylib.train:lr_at"])) is None
    assert judged(kill([])) is None and judged(kill(None)) is None
    assert judged(kill(["mylib_checks.mutants:_state"])) is None
    assert judged(kill(["mylib_checks.adapter:X"], verdict="PASS")) is None
    assert judged(_adapter_pass({}, verdict="FAIL", planted_at=["mylib_checks.adapter:X"])) is None  # no bug
    demo = kill(["mylib_checks.softmax:softmax"], runtime=None)
    assert judged(demo, SimpleNamespace(runtimes=None)) is None          # no runtime: the demo's bug counts
    library = SimpleNamespace(check_packages=("mylib_checks",), code_packages=(), mutants_module=None)
    assert judged(in_adapter, w=library) is None                          # the runtime is outside the workspace


def test_attack_a_runtime_name_repointed_at_another_adapter_keeps_no_cell_discharged():
    """Red team 2026-12-03: `transformers = "pvpack.adapters.liger:LigerAdapter"` in [tool.pv]
    runtimes changed nothing on this repository's dashboard, and nanotrainer's name repointed at
    an adapter that never drives it kept ACTIVE_RUNTIME: the records ran through the old adapter,
    whose code is unchanged. A record whose binding is not the table's now is refused; one made
    before records carried their binding, or of a runtime no longer in the table, is not judged."""
    from types import SimpleNamespace

    ws = SimpleNamespace(runtimes={"mytrainer": "mylib_checks.bypass:BypassAdapter"})
    old = _adapter_pass({}, runtime_binding="mylib_checks.adapter:MyAdapter")
    why = identity.runtime_rebound(old, ws)
    assert why and "mylib_checks.adapter:MyAdapter" in why and "mylib_checks.bypass:BypassAdapter now" in why
    assert identity.runtime_rebound(_adapter_pass({}, runtime_binding="mylib_checks.bypass:BypassAdapter"), ws) is None
    assert identity.runtime_rebound(_adapter_pass({}), ws) is None                       # before schema 10
    assert identity.runtime_rebound(old, SimpleNamespace(runtimes={"other": "x:Y"})) is None
