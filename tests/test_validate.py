"""`pv validate` end to end: each error path asserts the exit code, the code and the line.

Every test runs in a throw-away workspace (the `vworkspace` fixture, tests/pv_validate_ws.py), never on
the repository's own contracts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pv_validate_ws import GOOD_NAME, codes, line_of, only, other_contract, parse_output


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
