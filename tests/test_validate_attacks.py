"""`pv validate` against hostile input (issue #18): each attack refused or flagged with its own
code while the rest of the run still reports, and never a traceback (an internal error is PV199)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pv_validate_ws import PV, GOOD_NAME, codes, line_of, only, other_contract, parse_output


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
