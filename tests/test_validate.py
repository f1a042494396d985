"""`pv validate` end to end: each error path asserts the exit code, the code and the line.

Every test runs in a throw-away workspace (the `vworkspace` fixture, tests/pv_validate_ws.py), never on
the repository's own contracts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pv_validate_ws import GOOD_NAME, line_of, parse_output

PV = [sys.executable, "-c", "from pv.cli import main; main()"]


def only(result, code: str):
    """The diagnostics with `code`, asserting there is at least one."""
    found = [d for d in parse_output(result.output) if d.code == code]
    assert found, f"no {code} in:\n{result.output}"
    return found


def codes(result) -> set[str]:
    return {d.code for d in parse_output(result.output)}


# --- the good contract -------------------------------------------------------------------------


def test_good_contract_is_valid(vworkspace):
    vworkspace.contract()
    result = vworkspace.run()
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "1 files, 1 contracts, 1 falsifiers: 0 errors, 0 warnings"


def test_summary_counts_files_contracts_falsifiers(vworkspace):
    vworkspace.contract()
    vworkspace.contract(("id: demo-forward", "id: demo-other"), ("DEMO-BND-001", "OTHER-BND-001"),
                        ("FALSIFY-DEMO-FORWARD-001]", "FALSIFY-OTHER-001]"),
                        ("- id: FALSIFY-DEMO-FORWARD-001", "- id: FALSIFY-OTHER-001"), name="demo-other-v1.yaml")
    result = vworkspace.run()
    assert result.exit_code == 0, result.output
    assert "2 files, 2 contracts, 2 falsifiers: 0 errors, 0 warnings" in result.output


# --- loading (PV1xx) -----------------------------------------------------------------------------


def test_yaml_syntax_error(vworkspace):
    path, text = vworkspace.contract(("  references: [\"pv tests\"]", "  references: [\"pv tests\""))
    result = vworkspace.run()
    assert result.exit_code == 1
    [d] = only(result, "PV101")
    assert d.line == line_of(text, "depends_on")  # where the parser notices the missing ]
    assert d.path == f"contracts/{GOOD_NAME}"


def test_python_tag_is_never_constructed(vworkspace, tmp_path):
    marker = tmp_path / "pwned"
    path, text = vworkspace.contract(
        ("  kind: pattern", f"  kind: !!python/object/apply:os.system ['touch {marker}']"))
    result = vworkspace.run()
    assert result.exit_code == 1
    [d] = only(result, "PV102")
    assert d.line == line_of(text, "python/object")
    assert not marker.exists()


def test_alias_bomb_is_rejected(vworkspace):
    lines = ['lol0: &lol0 "lol"'] + [
        f"lol{i}: &lol{i} [" + ", ".join([f"*lol{i - 1}"] * 10) + "]" for i in range(1, 10)]
    vworkspace.write("contracts/bomb-v1.yaml", "\n".join(lines) + "\n")
    result = vworkspace.run()
    assert result.exit_code == 1
    [d] = only(result, "PV103")
    assert 1 <= d.line <= 10


def test_empty_file(vworkspace):
    vworkspace.write("contracts/empty-v1.yaml", "")
    vworkspace.write("contracts/comments-v1.yaml", "# nothing but a comment\n\n")
    result = vworkspace.run()
    assert result.exit_code == 1
    found = only(result, "PV106")
    assert {d.path for d in found} == {"contracts/empty-v1.yaml", "contracts/comments-v1.yaml"}
    assert all(d.line == 0 for d in found)  # 0: the file as a whole


def test_binary_file(vworkspace):
    vworkspace.write("contracts/binary-v1.yaml", b"metadata:\n\x00\x01\x02\xff")
    result = vworkspace.run()
    assert result.exit_code == 1
    [d] = only(result, "PV105")
    assert d.line == 2  # the line of the first NUL byte


def test_not_utf8(vworkspace):
    vworkspace.write("contracts/latin-v1.yaml", b"metadata:\n  description: caf\xe9\n")
    result = vworkspace.run()
    [d] = only(result, "PV105")
    assert (result.exit_code, d.line) == (1, 2)


def test_oversized_file(vworkspace):
    from pv.loader import MAX_BYTES

    vworkspace.write("contracts/huge-v1.yaml", "a: " + "x" * MAX_BYTES + "\n")
    result = vworkspace.run()
    assert result.exit_code == 1 and only(result, "PV104")


def test_an_empty_path_argument_is_a_usage_error(vworkspace):
    vworkspace.contract()
    result = vworkspace.run("")
    assert result.exit_code == 2 and "an empty PATH was given" in result.output


def test_top_level_not_a_mapping(vworkspace):
    vworkspace.write("contracts/list-v1.yaml", "- metadata\n- falsification_tests\n")
    result = vworkspace.run()
    [d] = only(result, "PV107")
    assert (result.exit_code, d.line) == (1, 1)


def test_deep_nesting_is_rejected_without_crashing(vworkspace):
    depth = 200_000  # libyaml's composer would overflow the C stack on this
    vworkspace.write("contracts/deep-v1.yaml", "a: " + "[" * depth + "]" * depth + "\n")
    result = vworkspace.run()
    assert result.exit_code == 1 and only(result, "PV108")


# --- schema (PV2xx) ------------------------------------------------------------------------------


def test_misspelt_key(vworkspace):
    path, text = vworkspace.contract(("    prediction:", "    predicton:"))
    result = vworkspace.run()
    assert result.exit_code == 1
    [d] = only(result, "PV201")
    assert (d.line, d.col) == (line_of(text, "predicton:"), 5)
    assert "predicton" in d.message
    assert "did you mean 'prediction'?" in result.output
    [missing] = only(result, "PV202")  # and the real key is reported missing
    assert "prediction" in missing.message


def test_missing_required_key(vworkspace):
    path, text = vworkspace.contract(("    if_fails: The forward drops a bias or another structural defect.\n", ""))
    result = vworkspace.run()
    [d] = only(result, "PV202")
    assert result.exit_code == 1
    assert d.line == line_of(text, "- id: FALSIFY-DEMO-FORWARD-001") and "if_fails" in d.message


def test_wrong_types(vworkspace):
    path, text = vworkspace.contract(("devices: [cpu]", "devices: cpu"), ("batches: 2", "batches: [1, {a: 2}]"),
                                     ("  description: The forward", "  description: 12\n  x_description: The"))
    result = vworkspace.run()
    assert result.exit_code == 1
    found = only(result, "PV203")
    lines = {d.line for d in found}
    assert line_of(text, "devices: cpu") in lines
    assert line_of(text, "batches: [1, {a: 2}]") in lines  # one diagnostic for the union, the deepest
    assert len([d for d in found if "params" in d.message]) == 1
    assert line_of(text, "description: 12") in lines
    assert only(result, "PV201")  # x_description


def test_schema_comment_missing_is_a_warning(vworkspace):
    path, text = vworkspace.contract(("# yaml-language-server: $schema=", "# schema: "))
    result = vworkspace.run()
    [d] = only(result, "PV207")
    assert (result.exit_code, d.line, d.warning) == (0, 1, True)


def test_schema_comment_naming_a_missing_file_is_a_warning(vworkspace):
    vworkspace.write(f"contracts/{GOOD_NAME}", vworkspace.good_text().replace(
        vworkspace.schema, "../nowhere/contract.schema.json"))
    result = vworkspace.run()
    [d] = only(result, "PV208")
    assert (result.exit_code, d.line, d.warning) == (0, 1, True)


# --- cross-checks (PV3xx) -------------------------------------------------------------------------


def other_contract(vworkspace, cid: str = "demo-other", *extra: tuple[str, str]):
    return vworkspace.contract(("id: demo-forward", f"id: {cid}"), ("DEMO-BND-001", "OTHER-BND-001"),
                               ("FALSIFY-DEMO-FORWARD-001]", "FALSIFY-OTHER-001]"),
                               ("- id: FALSIFY-DEMO-FORWARD-001", "- id: FALSIFY-OTHER-001"), *extra,
                               name=f"{cid}-v1.yaml")


def test_duplicate_contract_id_reports_both_files(vworkspace):
    path, text = vworkspace.contract()
    vworkspace.write("contracts/demo-forward-copy-v1.yaml", text.replace("DEMO-", "COPY-"))
    result = vworkspace.run()
    assert result.exit_code == 1
    found = only(result, "PV301")
    assert {d.path for d in found} == {f"contracts/{GOOD_NAME}", "contracts/demo-forward-copy-v1.yaml"}
    assert all(d.line == line_of(text, "id: demo-forward") for d in found)
    assert all("also at contracts/" in d.message for d in found)


def test_duplicate_falsifier_and_obligation_ids_across_files(vworkspace):
    path, text = vworkspace.contract()
    vworkspace.write("contracts/demo-copy-v1.yaml", text.replace("id: demo-forward", "id: demo-copy"))
    result = vworkspace.run()
    assert result.exit_code == 1
    [a, b] = only(result, "PV302")
    assert a.line == b.line == line_of(text, "- id: FALSIFY-DEMO-FORWARD-001")
    assert f"contracts/{GOOD_NAME}:{a.line}:" in b.message or f"contracts/{GOOD_NAME}:{a.line}:" in a.message
    assert len(only(result, "PV303")) == 2


def test_duplicate_seen_when_validating_one_file(vworkspace):
    """Paths narrow what is reported, not what the cross-checks see."""
    path, text = vworkspace.contract()
    vworkspace.write("contracts/demo-forward-copy-v1.yaml", text.replace("DEMO-", "COPY-"))
    result = vworkspace.run(f"contracts/{GOOD_NAME}")
    assert result.exit_code == 1
    [d] = only(result, "PV301")
    assert d.path == f"contracts/{GOOD_NAME}" and "demo-forward-copy-v1.yaml" in d.message
    assert result.output.strip().endswith("1 files, 1 contracts, 1 falsifiers: 1 errors, 0 warnings")


def test_file_name_must_match_id_and_major(vworkspace):
    path, text = vworkspace.contract(name="demo-forward-v2.yaml")
    result = vworkspace.run()
    [d] = only(result, "PV304")
    assert (result.exit_code, d.line) == (1, line_of(text, "id: demo-forward"))
    assert "demo-forward-v1.yaml" in d.message


def test_depends_on_a_file_name_gets_a_hint(vworkspace):
    vworkspace.contract(("depends_on: []", "depends_on: [demo-other-v1]"))
    other_contract(vworkspace)
    result = vworkspace.run()
    only(result, "PV306")
    assert "'demo-other'" in result.output


def test_depends_on_cycle_reports_the_path(vworkspace):
    path, text = vworkspace.contract(("depends_on: []", "depends_on: [demo-other]"))
    other_contract(vworkspace, "demo-other", ("depends_on: []", "depends_on: [demo-third]"))
    other_contract(vworkspace, "demo-third", ("depends_on: []", "depends_on: [demo-forward]"))
    result = vworkspace.run()
    assert result.exit_code == 1
    found = only(result, "PV307")
    assert len(found) == 3
    assert all("demo-forward -> demo-other -> demo-third -> demo-forward" in d.message for d in found)
    assert all(d.line == line_of(text, "depends_on") for d in found)


def test_depends_on_itself(vworkspace):
    path, text = vworkspace.contract(("depends_on: []", "depends_on: [demo-forward]"))
    result = vworkspace.run()
    [d] = only(result, "PV307")
    assert "demo-forward -> demo-forward" in d.message


def test_unbound_falsifier_warns_while_draft(vworkspace):
    path, text = vworkspace.contract(("    check: falsifiers.demo:measure\n", ""))
    result = vworkspace.run()
    [d] = only(result, "PV308")
    assert (result.exit_code, d.warning, d.line) == (0, True, line_of(text, "- id: FALSIFY-DEMO-FORWARD-001"))


def test_unbound_falsifier_is_an_error_above_draft(vworkspace):
    path, text = vworkspace.contract(("    check: falsifiers.demo:measure\n", ""), ("status: DRAFT", "status: DRAFT_RED"))
    result = vworkspace.run()
    [d] = [d for d in only(result, "PV308")]
    assert (result.exit_code, d.warning) == (1, False)


def test_strict_bindings_switch(vworkspace):
    vworkspace.contract(("    check: falsifiers.demo:measure\n", ""))
    result = vworkspace.run("--strict-bindings")
    [d] = only(result, "PV308")
    assert (result.exit_code, d.warning) == (1, False)


def test_mutants_module_missing(vworkspace):
    (vworkspace.root / "falsifiers" / "mutants.py").unlink()
    vworkspace.contract()
    result = vworkspace.run()
    [d] = only(result, "PV309")
    assert result.exit_code == 1 and "does not exist yet" in result.output


def test_check_prefix_is_not_a_package(vworkspace):
    vworkspace.write("falsifiers_evil/__init__.py", "def measure(*, device, checkpoint, batches):\n    pass\n")
    vworkspace.contract(("check: falsifiers.demo:measure", "check: falsifiers_evil:measure"))
    result = vworkspace.run()
    assert result.exit_code == 1 and only(result, "PV310")


def test_check_signature_required_param_unfilled(vworkspace):
    path, text = vworkspace.contract(("check: falsifiers.demo:measure", "check: falsifiers.demo:needs_extra"),
                                     ("batches: 2", "extra: 2"))
    result = vworkspace.run()
    assert result.exit_code == 0, result.output
    path, text = vworkspace.contract(("check: falsifiers.demo:measure", "check: falsifiers.demo:needs_extra"),
                                     (", batches: 2", ""))
    result = vworkspace.run()
    [d] = only(result, "PV314")
    assert (result.exit_code, d.line) == (1, line_of(text, "check: falsifiers.demo:needs_extra"))


def test_tolerance_override_needs_a_tolerance_parameter(vworkspace):
    override = "    tolerance: {source: measured, float32: {rtol: 0.001, atol: 0.001}}\n"
    path, text = vworkspace.contract(("    mutants: [drops_bias]\n", "    mutants: [drops_bias]\n" + override))
    assert vworkspace.run().exit_code == 0  # measure() names tolerance
    path, text = vworkspace.contract(("    mutants: [drops_bias]\n", "    mutants: [drops_bias]\n" + override),
                                     ("check: falsifiers.demo:measure", "check: falsifiers.demo:anything"))
    result = vworkspace.run()
    [d] = only(result, "PV317")
    assert (result.exit_code, d.warning, d.line) == (0, True, line_of(text, "tolerance: {source"))


# --- expressions (PV4xx) --------------------------------------------------------------------------


@pytest.mark.parametrize("prediction, culprit", [
    ('"val_loss < 0.7 * ln(vocab_size) or __import__(\'os\')"', "__import__"),
    (">\n      val_loss < 0.7 *\n      ln(vocab_size) and x.real", "x.real"),  # inside a folded value
])
def test_unsafe_expression_points_at_the_culprit(vworkspace, prediction, culprit):
    _, text = vworkspace.contract(('prediction: "val_loss < 0.7 * ln(vocab_size)"', f"prediction: {prediction}"))
    result = vworkspace.run()
    [d] = only(result, "PV401")
    line = line_of(text, culprit)
    assert (result.exit_code, d.line) == (1, line)
    assert d.col == text.splitlines()[line - 1].index(culprit) + 1  # the column inside the value
    assert culprit.split(".")[-1] in d.message


# --- one problem, reported at its line (each case: the edit to the good contract, the code, the
#     line it must point at, and a phrase the message or hint must hold) ------------------------------


ONE_PROBLEM = [
    pytest.param([('status: DRAFT', 'status: DONE')], 'PV204', 'status: DONE', "'DONE' is not one of DRAFT", id='unknown_status'),
    pytest.param([('version: 1.0.0', 'version: 1.0.0.1')], 'PV204', 'version: 1.0.0.1', 'semantic version', id='bad_semver'),
    pytest.param([('version: 1.0.0', 'version: 1.0')], 'PV203', 'version: 1.0', 'quote the value', id='unquoted_number_where_text_is_expected'),
    pytest.param([('    rule: Eval', '    rule: first\n    rule: Eval')], 'PV205', 'rule: Eval', None, id='duplicate_key'),
    pytest.param([('falsifiers: [FALSIFY-DEMO-FORWARD-001]', 'falsifiers: [FALSIFY-DEMO-FORWARD-002]')], 'PV305', 'falsifiers: [FALSIFY-DEMO-FORWARD-002]', "did you mean 'FALSIFY-DEMO-FORWARD-001'?", id='dangling_obligation_to_falsifier'),
    pytest.param([('depends_on: []', 'depends_on: [demo-missing]')], 'PV306', 'depends_on', None, id='dangling_depends_on'),
    pytest.param([('mutants: [drops_bias]', 'mutants: [drop_bias]')], 'PV309', 'mutants: [drop_bias]', "did you mean 'drops_bias'?", id='unknown_mutant'),
    pytest.param([('check: falsifiers.demo:measure', 'check: elsewhere.checks:measure')], 'PV310', 'check: elsewhere', None, id='check_outside_allowed_packages'),
    pytest.param([('check: falsifiers.demo:measure', 'check: falsifiers.nope:measure')], 'PV311', 'check: falsifiers.nope', None, id='unknown_check_module'),
    pytest.param([('check: falsifiers.demo:measure', 'check: falsifiers.demo:mesure')], 'PV312', 'check: falsifiers.demo:mesure', "did you mean 'measure'?", id='unknown_check_function'),
    pytest.param([('batches: 2', 'batches: 2, seeds: 3')], 'PV313', 'seeds: 3', "'seeds'", id='check_signature_missing_a_param'),
    pytest.param([('batches: 2', 'batches: 2, device: cuda')], 'PV316', 'device: cuda', None, id='params_must_not_set_device'),
    pytest.param([('prediction: "val_loss < 0.7 * ln(vocab_size)"', 'prediction: "val_loss * 2"')], 'PV402', 'val_loss * 2', None, id='prediction_must_be_boolean'),
    pytest.param([('prediction: "val_loss < 0.7 * ln(vocab_size)"', 'prediction: "1 < 2"')], 'PV404', '"1 < 2"', None, id='prediction_that_cannot_fail'),
]


@pytest.mark.parametrize("edits, code, at, says", ONE_PROBLEM)
def test_one_problem_at_its_line(vworkspace, edits, code, at, says):
    _, text = vworkspace.contract(*edits)
    result = vworkspace.run()
    [d] = only(result, code)
    assert (result.exit_code, d.line) == (1, line_of(text, at))
    assert says is None or says in d.message or says in result.output


def test_a_formula_is_documentation_in_ordinary_notation(vworkspace):
    """`equations.formula` is prose for readers: norms, sums, approximations and Greek letters
    validate with no diagnostic at all; the prediction is what pv judges."""
    vworkspace.contract(('formula: "val_loss < 0.7 * ln(vocab_size)"',
                         'formula: "‖∇L‖₂ ≈ √(∑ᵢ gᵢ²) and L ≤ 0.7·ln|V|"'))
    result = vworkspace.run()
    assert result.exit_code == 0, result.output
    assert "PV403" not in result.output and "PV406" not in result.output and "0 warnings" in result.output


# --- the whole run --------------------------------------------------------------------------------


def test_all_problems_of_all_files_in_one_run(vworkspace):
    vworkspace.contract(("    prediction:", "    predicton:"))
    other_contract(vworkspace, "demo-other", ("check: falsifiers.demo:measure", "check: falsifiers.demo:nope"))
    vworkspace.write("contracts/empty-v1.yaml", "")
    result = vworkspace.run()
    assert result.exit_code == 1
    assert {"PV201", "PV202", "PV312", "PV106"} <= codes(result)
    assert "3 files, 1 contracts, 1 falsifiers: 4 errors, 0 warnings" in result.output


def test_schema_failure_does_not_hide_other_problems(vworkspace):
    vworkspace.contract(("status: DRAFT", "status: DONE"), ("check: falsifiers.demo:measure", "check: falsifiers.demo:nope"))
    result = vworkspace.run()
    assert {"PV204", "PV312"} <= codes(result)


def test_json_format(vworkspace):
    path, text = vworkspace.contract(("status: DRAFT", "status: DONE"))
    result = vworkspace.run("--format", "json")
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert (report["files"], report["contracts"], report["errors"], report["warnings"]) == (1, 0, 1, 0)
    [d] = report["diagnostics"]
    assert (d["code"], d["line"], d["severity"], d["path"]) == ("PV204", line_of(text, "status:"), "error",
                                                                 f"contracts/{GOOD_NAME}")


def test_quiet_hides_warnings_but_counts_them(vworkspace):
    vworkspace.contract(("    check: falsifiers.demo:measure\n", ""))
    result = vworkspace.run("-q")
    assert result.exit_code == 0 and "PV308" not in result.output
    assert "0 errors, 1 warnings" in result.output


def test_directory_and_glob_arguments(vworkspace):
    vworkspace.contract()
    assert vworkspace.run("contracts").exit_code == 0
    result = vworkspace.run("contracts/*.yaml")  # a quoted glob, expanded by pv
    assert result.exit_code == 0 and "1 files" in result.output


def test_a_missing_path_among_others_is_reported(vworkspace):
    vworkspace.contract()
    result = vworkspace.run(f"contracts/{GOOD_NAME}", "contracts/absent-v1.yaml")
    [d] = only(result, "PV100")
    assert (result.exit_code, d.path) == (1, "contracts/absent-v1.yaml")


def test_file_outside_the_contracts_dir(vworkspace):
    path, text = vworkspace.contract()
    vworkspace.write("elsewhere/demo-forward-v1.yaml", text)
    result = vworkspace.run("elsewhere/demo-forward-v1.yaml")
    assert result.exit_code == 1  # the same ids as the contract in contracts/
    assert {d.path for d in parse_output(result.output)} == {"elsewhere/demo-forward-v1.yaml"}
    assert "PV301" in codes(result)


# --- usage errors (exit 2) ------------------------------------------------------------------------


def test_no_files_matched(vworkspace):
    result = vworkspace.run()
    assert result.exit_code == 2 and "no contract files matched" in result.output
    result = vworkspace.run("contracts/nothing-*.yaml")
    assert result.exit_code == 2 and "no contract files matched" in result.output


def test_unreadable_workspace_config(vworkspace):
    vworkspace.write("pyproject.toml", "[tool.pv\ncontracts_dir = 1\n")
    assert vworkspace.run().exit_code == 2
    vworkspace.write("pyproject.toml", "[tool.pv]\ncontract_dir = 'contracts'\n")
    result = vworkspace.run()
    assert result.exit_code == 2 and "contract_dir" in result.output


def test_bad_option(vworkspace):
    vworkspace.contract()
    assert vworkspace.run("--format", "xml").exit_code == 2
    assert vworkspace.run("--no-such-option").exit_code == 2


# --- attacks (issue #18): each refused or flagged with its own code, the rest still reported ---------


@pytest.mark.parametrize("where, written, read_as", [
    ('prediction: "val_loss < 0.7 * ln(vocab_size)"', "\uff56al_loss", "val_loss"),  # fullwidth v
    ('prediction: "val_loss < 0.7 * ln(vocab_size)"', "val_lo\u017fs", "val_loss"),  # long s
    ('prediction: "val_loss < 0.7 * ln(vocab_size)"', "\ufb01t", "fit"),  # the fi ligature
])
def test_non_ascii_names_are_refused_not_folded(vworkspace, where, written, read_as):
    new = where.replace("val_loss", written, 1)
    _, text = vworkspace.contract((where, new))
    result = vworkspace.run()
    assert result.exit_code == 1
    [d] = only(result, "PV406")
    line = line_of(text, new)
    assert (d.line, d.col) == (line, text.splitlines()[line - 1].index(written) + 1)  # at the name itself
    assert repr(written) in d.message and repr(read_as) in d.message


def test_an_ascii_name_is_not_flagged(vworkspace):
    vworkspace.contract(('prediction: "val_loss < 0.7 * ln(vocab_size)"', 'prediction: "val_loss < 0.7 * ln(vocab_size) and vocab_size >= 2"'))
    assert vworkspace.run().exit_code == 0


CHANGELOG = "  changelog:\n    - {{version: 1.0.0, date: {date}, change: first}}"


@pytest.mark.parametrize("date, why", [
    ("0", "is not a date"),  # lax pydantic: 1970-01-01
    ("1700000000", "is not a date"),  # lax pydantic: a Unix time
    ("20261122", "is not a date"),
    ('"22/11/2026"', "is not a date"),
    ('"2026-11-22\\n"', "is not a date"),  # a trailing newline
    ("2026-11-22 10:00:00", "is not a date"),  # YAML 1.1 reads a datetime; lax pydantic kept its day
    ("2026-1-5", "is not a date"),  # YAML 1.1 reads a date
    ("2026-13-45", "cannot read"),  # YAML itself cannot build it (PV101)
])
def test_changelog_dates_are_iso_days_only(vworkspace, date, why):
    _, text = vworkspace.contract(("  depends_on: []", "  depends_on: []\n" + CHANGELOG.format(date=date)))
    result = vworkspace.run()
    assert result.exit_code == 1
    [d] = [d for d in parse_output(result.output) if d.code in ("PV204", "PV101")]
    assert why in d.message and d.line == line_of(text, "changelog:") + 1


@pytest.mark.parametrize("date", ["2026-11-22", '"2026-11-22"'])
def test_iso_dates_are_accepted(vworkspace, date):
    vworkspace.contract(("  depends_on: []", "  depends_on: []\n" + CHANGELOG.format(date=date)))
    result = vworkspace.run()
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("word, meant", [("yes", "true"), ("No", "false"), ("on", "true"), ("OFF", "false")])
def test_yaml11_booleans_are_warned_about(vworkspace, word, meant):
    _, text = vworkspace.contract(("    mutants: [drops_bias]", f"    mutants: [drops_bias]\n    ship_blocking: {word}"))
    result = vworkspace.run()
    assert result.exit_code == 0, result.output  # a warning: the value is still read
    [d] = only(result, "PV209")
    assert d.warning and (d.line, d.col) == (line_of(text, "ship_blocking:"), len("    ship_blocking: ") + 1)
    assert f"{word!r} is read as the boolean {meant}" in d.message
    assert f'write {meant} for a boolean, or quote it ("{word}")' in result.output


def test_true_false_and_quoted_words_are_not_warned_about(vworkspace):
    vworkspace.contract(("    mutants: [drops_bias]", "    mutants: [drops_bias]\n    ship_blocking: true"),
                        ("rule: Eval loss of a trained checkpoint is well below uniform", 'rule: "yes"'))
    result = vworkspace.run()
    assert "PV209" not in result.output and result.exit_code == 0, result.output


def test_a_yaml11_boolean_key_is_warned_about_too(vworkspace):
    _, text = vworkspace.contract(("    mutants: [drops_bias]", "    mutants: [drops_bias]\n    on: 1"))
    result = vworkspace.run()
    assert result.exit_code == 1
    assert only(result, "PV209")[0].line == line_of(text, "    on: 1")
    assert "Keys should be strings" in only(result, "PV204")[0].message  # and the schema refuses the key


BROKEN_FILE = ("status: DRAFT", "status: DONE")  # PV204: must still be reported beside the binding's problem


DEEP_MODULE = "def measure(*, device, checkpoint, batches=1):\n    return {}\n"


@pytest.mark.parametrize("module, source, code, says", [
    ("a" * 253, None, "PV311", "File name too long"),  # was PV199, hiding the file's other problems
    ("b" * 300 + ".x", None, "PV311", "is 300 characters; no file name can be that long"),
    ("deep", "x = " + "-" * 3000 + "1\n" + DEEP_MODULE, "PV315", "nests too deeply"),  # RecursionError
    ("deep", "x = " + "(" * 3000 + "1" + ")" * 3000 + "\n" + DEEP_MODULE, "PV315", "too many nested parentheses"),
    ("deep", "x = [" + "[" * 3000 + "]" * 3000 + "]\n" + DEEP_MODULE, "PV315", "cannot be parsed"),
    ("broken", "def measure(*, device:\n", "PV315", "cannot be parsed (line 1)"),  # a plain syntax error
], ids=["253-char-name", "300-char-part", "3000-minus", "3000-parens", "3000-lists", "syntax-error"])
def test_a_hostile_check_module_is_that_bindings_problem_only(vworkspace, module, source, code, says):
    if source is not None:
        vworkspace.write(f"falsifiers/{module}.py", source)
    _, text = vworkspace.contract(("check: falsifiers.demo:measure", f"check: falsifiers.{module}:measure"),
                                  BROKEN_FILE)
    result = vworkspace.run()
    assert result.exit_code == 1
    assert "PV199" not in codes(result)
    [d] = only(result, code)
    assert d.line == line_of(text, f"check: falsifiers.{module[:8]}") and says in d.message
    assert only(result, "PV204")  # the file's other problem is still reported


def test_a_deeply_nested_mutants_module_declares_nothing_and_crashes_nothing(vworkspace):
    vworkspace.write("falsifiers/mutants.py", "x = " + "-" * 3000 + "1\n")
    vworkspace.contract(BROKEN_FILE)
    result = vworkspace.run()
    assert "PV199" not in codes(result)
    assert "drops_bias" in only(result, "PV309")[0].message and only(result, "PV204")


def test_one_failing_check_keeps_the_other_checks_of_the_file(vworkspace, monkeypatch):
    from pv import crosscheck

    def explode(loaded, ctx):
        raise RuntimeError("boom")

    monkeypatch.setattr(crosscheck, "bindings", explode)
    vworkspace.contract(('prediction: "val_loss < 0.7 * ln(vocab_size)"', 'prediction: "val_loss +"'), BROKEN_FILE)
    result = vworkspace.run()
    [d] = only(result, "PV199")
    assert "in the explode check: RuntimeError: boom" in d.message
    assert only(result, "PV401") and only(result, "PV204")


# --- never a traceback -----------------------------------------------------------------------------


def test_internal_error_becomes_pv199_and_other_files_still_report(vworkspace, monkeypatch):
    from pv import crosscheck

    vworkspace.contract()
    other_contract(vworkspace, "demo-other", ("status: DRAFT", "status: DONE"))
    real = crosscheck.file_name

    def explode(loaded):
        if loaded.path.name == GOOD_NAME:
            raise RuntimeError("boom")
        return real(loaded)

    monkeypatch.setattr(crosscheck, "file_name", explode)
    result = vworkspace.run()
    assert result.exit_code == 1
    [d] = only(result, "PV199")
    assert d.path == f"contracts/{GOOD_NAME}" and "RuntimeError: boom" in d.message
    assert "PV204" in codes(result)  # the other file's problem is still reported


def test_subprocess_reports_without_traceback(vworkspace):
    vworkspace.contract(("status: DRAFT", "status: DONE"))
    vworkspace.write("contracts/bomb-v1.yaml", "a: &a [*a]\n")
    vworkspace.write("contracts/binary-v1.yaml", b"\x00" * 64)
    done = subprocess.run([*PV, "validate"], cwd=vworkspace.root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert {"PV204", "PV103", "PV105"} <= {d.code for d in parse_output(done.stdout)}


def test_real_pv_entry_point(vworkspace):
    exe = Path(sys.executable).with_name("pv")
    if not exe.exists():
        pytest.skip("the pv console script is not installed next to this interpreter")
    vworkspace.contract()
    done = subprocess.run([str(exe), "validate"], cwd=vworkspace.root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_validate_imports_no_torch_jinja2_or_pytest(vworkspace):
    """A pre-commit hook must start fast: the bound check modules import torch, pv must not."""
    vworkspace.contract()
    probe = ("import sys\nfrom pv.cli import main\n"
             "try:\n    main(['validate'])\nexcept SystemExit as exc:\n    code = exc.code\n"
             "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'jinja2', 'pytest'))\n"
             "print('HEAVY', heavy, code)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=vworkspace.root, capture_output=True, text=True,
                          timeout=60, env=env)
    assert "HEAVY [] 0" in done.stdout, done.stdout + done.stderr


# --- the provable-contracts dialect ----------------------------------------------------------------

FOREIGN = """\
metadata:
  version: "1.0.0"
  description: "A kernel written for another toolchain"
  author: "someone"
equations:
  norm:
    formula: "y = x / √(Σ x² / n + ε)"
proof_obligations:
  - type: bound
    property: "output is finite"
    applies_to: all
falsification_tests:
  - id: FALSIFY-NORM-001
    rule: "finite"
    prediction: "norm(x) is finite for all finite x"
    test: "property test"
    if_fails: "division by zero"
  - id: FALSIFY-NORM-002
    rule: "bounded"
    prediction: "max_abs < 10"
    test: "direct"
    if_fails: "overflow"
kani_harnesses:
  - id: KANI-1
qa_gate:
  id: GATE-1
"""


def test_dialect_reads_foreign_contracts_leniently(vworkspace):
    vworkspace.write("corpus/norm-v1.yaml", FOREIGN)
    vworkspace.write("corpus/sub/broken-v1.yaml", "metadata: [\n")
    strict = vworkspace.run("corpus")
    assert strict.exit_code == 1 and "PV201" in codes(strict)
    result = vworkspace.run("--dialect", "provable-contracts", "corpus")
    assert result.exit_code == 1  # the broken file does not load: an error even in this dialect
    found = parse_output(result.output)
    assert {d.code for d in found if not d.warning} == {"PV101"}
    assert "PV201" not in codes(result)  # unknown sections and keys are read past
    [pred] = [d for d in found if d.code == "PV401"]
    assert pred.warning and pred.line == line_of(FOREIGN, "is finite for all")
    assert "YAML loads (mapping):            1 of 2" in result.output
    assert "predictions parse in pv:         1 of 2" in result.output
    assert "kani_harnesses (1)" in result.output and "metadata.author (1)" in result.output
    assert "prose" in result.output


def test_dialect_json_report(vworkspace):
    vworkspace.write("corpus/norm-v1.yaml", FOREIGN)
    result = vworkspace.run("--dialect", "provable-contracts", "--format", "json", "corpus")
    assert result.exit_code == 0
    report = json.loads(result.output)
    d = report["dialect"]
    assert (d["files"], d["loaded"], d["falsifiers"], d["predictions_parse"], d["formulas_parse"]) == (1, 1, 2, 1, 0)
    assert d["sections_ignored"] == {"kani_harnesses": 1, "qa_gate": 1}
    assert d["ids_missing"] == {"metadata.id": 1, "proof_obligations[].id": 1}


CORPUS = Path("/work/shared/corpus")


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the measurement corpus is not on this machine")
def test_dialect_on_the_shared_corpus(vworkspace):
    result = vworkspace.run("--dialect", "provable-contracts", "-q", str(CORPUS))
    assert result.exit_code == 0, result.output
    assert "YAML loads (mapping):            114 of 114" in result.output


# --- the bad-contract fixtures (tests/fixtures/*.yaml, each listing what it must report) -----------

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*.yaml")), ids=lambda p: p.name)
def test_fixture(vworkspace, fixture):
    text = fixture.read_text(encoding="utf-8")
    expected = sorted(tuple(item.split("@")) for line in text.splitlines() if line.startswith("# expect:")
                      for item in line.split(":", 1)[1].split())
    text = text.replace("../pv/schema/contract.schema.json", vworkspace.schema, 1)
    vworkspace.write(f"contracts/{fixture.name}", text)
    result = vworkspace.run(f"contracts/{fixture.name}")
    found = sorted((d.code, str(d.line)) for d in parse_output(result.output))
    assert found == expected, result.output
    errors = any(not d.warning for d in parse_output(result.output))
    assert result.exit_code == (1 if errors else 0)


def test_directory_argument_skips_hidden_files_and_folders(vworkspace):
    vworkspace.contract()
    vworkspace.write("contracts/.hidden/broken-v1.yaml", "a: [\n")
    vworkspace.write("contracts/.editor-backup.yaml", "a: [\n")
    result = vworkspace.run("contracts")
    assert result.exit_code == 0 and "1 files" in result.output


def test_hidden_files_in_the_contracts_dir_are_not_contracts(vworkspace):
    vworkspace.contract()
    vworkspace.write("contracts/.#demo-forward-v1.yaml", "a: [\n")  # an editor's lock file
    result = vworkspace.run()
    assert result.exit_code == 0 and "1 files" in result.output


@pytest.mark.parametrize("table", ['check_packages = "falsifiers"', 'check_packages = ["../evil"]',
                                   "mutants_module = 3", 'mutants_module = "a/b"'])
def test_malformed_settings_are_a_usage_error(vworkspace, table):
    vworkspace.contract()
    vworkspace.write("pyproject.toml", f"[tool.pv]\n{table}\n")
    result = vworkspace.run()
    assert result.exit_code == 2 and "[tool.pv]" in result.output


def test_parallel_workers_report_exactly_what_one_process_does(vworkspace, monkeypatch):
    """Many files are checked in forked workers; positions needed afterwards (duplicate ids,
    cycles) come from re-composing the text, and must match."""
    path, text = vworkspace.contract(("depends_on: []", "depends_on: [demo-other]"))
    other_contract(vworkspace, "demo-other", ("depends_on: []", "depends_on: [demo-forward]"),
                   ("status: DRAFT", "status: DONE"))
    vworkspace.write("contracts/demo-copy-v1.yaml", text.replace("id: demo-forward", "id: demo-copy")
                     .replace("    prediction:", "    predicton:"))
    vworkspace.write("contracts/merge-v1.yaml", "a: &a {x: 1}\nb: {<<: *a, y: 2, y: 3}\n")
    vworkspace.write("contracts/empty-v1.yaml", "")
    monkeypatch.setenv("PV_JOBS", "1")
    serial = vworkspace.run()
    monkeypatch.setenv("PV_JOBS", "2")
    parallel = vworkspace.run()
    assert serial.exit_code == parallel.exit_code == 1
    assert parallel.output == serial.output
    assert {"PV302", "PV303", "PV307", "PV201", "PV204", "PV205", "PV106"} <= codes(parallel)


def test_jobs_for(monkeypatch):
    from pv.validation import PARALLEL_MIN_FILES, jobs_for

    monkeypatch.delenv("PV_JOBS", raising=False)
    assert jobs_for(3) == 1 and jobs_for(PARALLEL_MIN_FILES - 1) == 1
    assert 1 <= jobs_for(10_000) <= 8


def test_a_version_that_is_not_text_is_left_to_the_schema_not_to_the_file_name_check(vworkspace):
    vworkspace.contract(("version: 1.0.0", "version: 1"))
    result = vworkspace.run()
    assert result.exit_code == 1
    assert not {"PV199", "PV304"} & codes(result), result.output  # no internal error, no name complaint


def test_a_non_ascii_combining_mark_is_named_as_written(vworkspace):
    # "e" + U+0301 (a decomposed é) is a valid name that Python folds to "é": the message must
    # quote non-ASCII text, never the ASCII word before the mark
    where = 'prediction: "val_loss < 0.7 * ln(vocab_size)"'
    vworkspace.contract((where, where.replace("val_loss", "vale\u0301_loss", 1)))
    result = vworkspace.run()
    [d] = only(result, "PV406")
    quoted = d.message.split("the name ", 1)[1].split(" is not ASCII", 1)[0]
    assert not quoted.strip("'").isascii(), d.message


def test_depends_on_a_misspelt_contract_id_gets_a_hint(vworkspace):
    vworkspace.contract(("depends_on: []", "depends_on: [demo-othr]"))
    other_contract(vworkspace)
    result = vworkspace.run()
    only(result, "PV306")
    assert "did you mean 'demo-other'?" in result.output


def test_a_check_that_is_not_module_colon_function_is_left_to_the_schema(vworkspace):
    vworkspace.contract(("check: falsifiers.demo:measure", "check: falsifiers.demo.measure"))
    result = vworkspace.run()
    assert result.exit_code == 1 and "PV199" not in codes(result), result.output


def test_files_pv_remembers_are_checked_in_one_process_and_the_rest_in_workers(vworkspace, monkeypatch, tmp_path):
    """After an edit among many files nearly every file's YAML is remembered, so forking workers
    costs more than it saves; a first run, a run with the caches off and a set with more than
    one file in ten changed keep the workers (an explicit PV_JOBS is always obeyed)."""
    from pv import crosscheck
    from pv.config import load_workspace
    from pv.validation import _mostly_remembered, display

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache-home"))
    monkeypatch.delenv("PV_NO_CACHE", raising=False)
    paths = [vworkspace.contract(("id: demo-forward", f"id: demo-{n}"), name=f"demo-{n}-v1.yaml")[0]
             for n in range(10)]

    def remembered() -> bool:
        ctx = crosscheck.Context(load_workspace())
        return _mostly_remembered([(p, p, display(p), True) for p in sorted(paths)], ctx)

    assert not remembered()  # nothing read yet
    vworkspace.run()
    assert remembered()
    paths[0].write_text(paths[0].read_text() + "# edited\n")
    assert remembered()  # 9 of 10
    paths[1].write_text(paths[1].read_text() + "# edited\n")
    assert not remembered()  # 8 of 10
    vworkspace.run()
    monkeypatch.setenv("PV_NO_CACHE", "1")
    assert not remembered()


def test_a_first_run_writes_each_cache_file_once(vworkspace, monkeypatch):
    """A run on empty caches writes each of pv's cache files once (the stored run and each
    contract's PV501 share are files of their own), never once per fact or per contract."""
    from pv import atomic

    for n in (1, 2, 3):
        vworkspace.contract(("id: demo-forward", f"id: demo-{n}"), ("status: DRAFT", "status: ACTIVE_RUNTIME"),
                            ("DEMO-BND-001", f"DEMO-BND-00{n}"), ("FALSIFY-DEMO-FORWARD-001", f"FALSIFY-DEMO-{n}00-001"),
                            ("FALSIFY-DEMO-FORWARD-001", f"FALSIFY-DEMO-{n}00-001"), name=f"demo-{n}-v1.yaml")
    written: list[tuple[str, bool]] = []
    real = atomic.write_bytes

    def counting(path, data, durable=True):
        written.append((os.path.relpath(path, vworkspace.root), durable))
        return real(path, data, durable)

    monkeypatch.setattr(atomic, "write_bytes", counting)
    result = vworkspace.run()
    assert result.output.count("PV501") == 3, result.output
    names = [name for name, _ in written]
    assert len(names) == len(set(names)), names
    assert not any(durable for _, durable in written)  # a cache is never worth an fsync
    assert "falsifiers" not in " ".join(names) and any("module-facts" in n for n in names), names


def test_a_process_that_ends_without_teardown_keeps_what_the_run_built(vworkspace, monkeypatch):
    """pv.validation.KEPT (set by `pv validate` itself, which ends with os._exit): the run's
    structures are kept there instead of freed one by one, and the report is the same."""
    import gc

    from pv import validation
    from pv.config import load_workspace

    vworkspace.contract(("status: DRAFT", "status: ACTIVE_RUNTIME"))  # PV501 judges it (no ledger: no evidence)
    monkeypatch.setenv("PV_NO_CACHE", "1")
    monkeypatch.setenv("PV_JOBS", "1")
    ws = load_workspace(Path.cwd())
    freed = validation.checked_report(ws, ws.contract_files(), [], None, "pv")
    monkeypatch.setattr(validation, "KEPT", [])
    try:
        kept = validation.checked_report(ws, ws.contract_files(), [], None, "pv")
    finally:
        gc.unfreeze()
    assert validation.render(kept) == validation.render(freed)
    assert "PV501" in validation.render(kept) and kept.loaded == {}
    assert any(isinstance(part, dict) and len(part) == 1 for built in validation.KEPT for part in built)  # the loaded files
