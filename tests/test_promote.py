"""`pv status --promote`: declared status from evidence, edited in place (pv.promote)."""

from __future__ import annotations

import datetime
import difflib
import itertools
from pathlib import Path

import pytest
from click.testing import CliRunner

from pv.cli import main
from pv.codebind import digest_file
from pv.ledger import append, make_record
from pv.declared import declared_status_diagnostics
from pv.lifecycle import contract_status
from pv.loader import load_contract
from pv.promote import PromotionError, _verify, bump_minor, rewrite
from pv.schema import LifecycleStatus
from pv_workspace import what_ran

PYPROJECT = '[tool.pv]\ncontracts_dir = "contracts"\nledger = "evidence/ledger.jsonl"\n'

CONTRACT = """\
# yaml-language-server: $schema=../pv/schema/contract.schema.json
# The demo contract. This comment must survive promotion.
metadata:
  id: demo
  version: 1.2.3          # semver; promotion bumps the minor
  kind: pattern
  status: DRAFT           # declared; pv checks it
  description: >
    A folded description
    over two lines.

  references: ["somewhere"]
  changelog:
    - version: 1.0.0
      date: 2026-01-01
      change: first version   # hand-written

  # a comment between sections
falsification_tests:
  - id: FALSIFY-DEMO-001
    rule: loss is small
    prediction: loss < 1     # the bound
    devices: [cpu]
    if_fails: look here
    ship_blocking: true
    mutants: [demo_bug]
"""

_clock = itertools.count(1)


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "contracts").mkdir()
    (tmp_path / "contracts" / "demo-v1.yaml").write_text(CONTRACT)
    (tmp_path / "demo_checks.py").write_text("def loss(*, device):\n    return {'loss': 0.5}\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def contract_file(root: Path) -> Path:
    return root / "contracts" / "demo-v1.yaml"


def evidence(root: Path, verdict: str, mutant: str | None = None) -> None:
    loaded, _ = load_contract(contract_file(root))
    f = loaded.contract.falsification_tests[0]
    n = next(_clock)
    append(root / "evidence" / "ledger.jsonl", [make_record(
        contract="demo", contract_version=loaded.contract.metadata.version, falsifier=f.id,
        falsifier_sha256=f.definition_sha256(), device="cpu", mutant=mutant, verdict=verdict,
        # observations that give the verdict (pv refuses a record they contradict: pv.identity)
        observations={"loss": 0.5 if verdict == "PASS" else 1.5}, prediction=f.prediction,
        margin=0.5 if verdict == "PASS" else -0.5, duration_s=0.1,
        time_utc=f"2026-02-01T00:{n // 60 % 60:02d}:{n % 60:02d}Z",
        code_digests={"demo_checks": digest_file(root / "demo_checks.py")},  # the code it ran: fresh
        **what_ran(root, loaded, f.id),  # its own generated test ran it
    )])


def pv(*args: str):
    return CliRunner().invoke(main, ["status", *args], catch_exceptions=False)


def test_bump_minor():
    assert bump_minor("1.2.3") == "1.3.0"
    assert bump_minor("0.9.12") == "0.10.0"
    assert bump_minor("2.0.0-rc.1+build") == "2.1.0"
    with pytest.raises(PromotionError):
        bump_minor("1.2")


def test_refused_when_evidence_is_missing(ws: Path):
    before = contract_file(ws).read_bytes()
    result = pv("--promote", "demo")
    assert result.exit_code == 1
    assert "refused" in result.output and "no fresh evidence" in result.output
    assert contract_file(ws).read_bytes() == before
    # without naming it, nothing to do is not an error
    assert pv("--promote").exit_code == 0
    assert contract_file(ws).read_bytes() == before


def test_promotion_keeps_comments_bumps_version_and_appends_changelog(ws: Path):
    evidence(ws, "PASS")
    evidence(ws, "FAIL", mutant="demo_bug")
    before = contract_file(ws).read_text()
    sha_before = load_contract(contract_file(ws))[0].contract.falsification_tests[0].definition_sha256()

    result = pv("--promote", "demo")
    assert result.exit_code == 0, result.output
    after = contract_file(ws).read_text()
    today = datetime.date.today().isoformat()
    change = "promoted DRAFT → ACTIVE_RUNTIME: 1/1 falsifiers discharged on cpu; 1/1 mutants killed"
    assert change in result.output

    # only the status and version lines changed; three changelog lines were inserted in place
    removed = [d[2:] for d in difflib.ndiff(before.splitlines(), after.splitlines()) if d.startswith("- ")]
    added = [d[2:] for d in difflib.ndiff(before.splitlines(), after.splitlines()) if d.startswith("+ ")]
    assert removed == ["  version: 1.2.3          # semver; promotion bumps the minor",
                       "  status: DRAFT           # declared; pv checks it"]
    assert added == ["  version: 1.3.0          # semver; promotion bumps the minor",
                     "  status: ACTIVE_RUNTIME           # declared; pv checks it",
                     "    - version: 1.3.0",
                     f"      date: {today}",
                     f'      change: "{change}"']
    assert after.index("change: first version   # hand-written") < after.index("- version: 1.3.0") < after.index(
        "# a comment between sections")

    loaded, problems = load_contract(contract_file(ws))
    assert problems == []
    meta = loaded.contract.metadata
    assert meta.status is LifecycleStatus.ACTIVE_RUNTIME and meta.version == "1.3.0"
    assert meta.changelog[-1].version == "1.3.0" and str(meta.changelog[-1].date) == today
    assert meta.changelog[-1].change == change

    # the evidence stays fresh: the falsifier's definition (and so its sha) did not change
    from pv.ledger import read

    records = read(ws / "evidence" / "ledger.jsonl").records
    assert loaded.contract.falsification_tests[0].definition_sha256() == sha_before
    assert contract_status(loaded.contract, records).evidence is LifecycleStatus.ACTIVE_RUNTIME
    assert declared_status_diagnostics([loaded], records) == []
    # and the dashboard was rewritten to match
    assert pv("--check").exit_code == 0
    # promoting again is a no-op
    again = pv("--promote", "demo")
    assert again.exit_code == 0 and "already ACTIVE_RUNTIME" in again.output
    assert contract_file(ws).read_text() == after


def test_demotion_needs_allow_demote(ws: Path):
    contract_file(ws).write_text(CONTRACT.replace("status: DRAFT ", "status: ACTIVE_RUNTIME "))
    evidence(ws, "FAIL")
    before = contract_file(ws).read_bytes()
    refused = pv("--promote", "demo")
    assert refused.exit_code == 1
    assert "would demote ACTIVE_RUNTIME → DRAFT_RED" in refused.output and "--allow-demote" in refused.output
    assert contract_file(ws).read_bytes() == before
    done = pv("--promote", "--allow-demote", "demo")
    assert done.exit_code == 0, done.output
    meta = load_contract(contract_file(ws))[0].contract.metadata
    assert meta.status is LifecycleStatus.DRAFT_RED
    assert meta.changelog[-1].change.startswith("demoted ACTIVE_RUNTIME → DRAFT_RED: 0/1 falsifiers discharged")
    assert "FALSIFY-DEMO-001 FAIL on cpu" in meta.changelog[-1].change


def test_unproven_falsifier_refuses_active_runtime(ws: Path):
    contract_file(ws).write_text(CONTRACT.replace("    mutants: [demo_bug]\n", ""))
    evidence(ws, "PASS")
    result = pv("--promote", "--to", "ACTIVE_RUNTIME", "demo")
    assert result.exit_code == 1
    assert "UNPROVEN: FALSIFY-DEMO-001" in result.output
    # what the evidence does support is allowed
    ok = pv("--promote", "demo")
    assert ok.exit_code == 0, ok.output
    assert load_contract(contract_file(ws))[0].contract.metadata.status is LifecycleStatus.DRAFT_PARTIAL_DISCHARGE


def test_hand_set_status_is_kept(ws: Path):
    contract_file(ws).write_text(CONTRACT.replace("status: DRAFT ", "status: RETIRED "))
    evidence(ws, "PASS")
    assert pv("--promote").exit_code == 0
    named = pv("--promote", "demo")
    assert named.exit_code == 1 and "set by hand" in named.output
    assert "status: RETIRED" in contract_file(ws).read_text()


# --- the text edit on unusual layouts --------------------------------------------------------------

EDIT = dict(status="DRAFT_RED", version="1.1.0", date=datetime.date(2026, 5, 6), change='marked red: a "quoted" thing')

LAYOUTS = {
    "no changelog, no trailing newline": (
        "metadata:\n    id: demo\n    version: '1.0.0'\n    kind: pattern\n    status: \"DRAFT\"\n"
        "    description: |\n      literal\n\nfalsification_tests:\n- {id: FALSIFY-DEMO-001, rule: r, "
        "prediction: x < 1, devices: [cpu], if_fails: f}"
    ),
    "empty flow changelog": (
        "metadata:\n  id: demo\n  version: 1.0.0\n  kind: pattern\n  status: DRAFT\n  description: d\n"
        "  changelog: []   # none yet\nfalsification_tests:\n  - {id: FALSIFY-DEMO-001, rule: r, "
        "prediction: x < 1, devices: [cpu], if_fails: f}\n"
    ),
    "indentless changelog, block scalar last": (
        "metadata:\n  id: demo\n  version: 1.0.0\n  kind: pattern\n  status: DRAFT\n  description: d\n"
        "  changelog:\n  - version: 1.0.0\n    date: '2026-01-01'\n    change: |\n      multi\n      line\n\n"
        "falsification_tests:\n  - {id: FALSIFY-DEMO-001, rule: r, prediction: x < 1, devices: [cpu], if_fails: f}\n"
    ),
    "CRLF line endings": CONTRACT.replace("\n", "\r\n"),
    "flow-mapping entries in a block list": (
        "metadata:\n  id: demo\n  version: 1.0.0\n  kind: pattern\n  status: DRAFT\n  description: d\n"
        "  changelog:\n    - {version: 1.0.0, date: 2026-01-01, change: \"First version.\"}\n"
        "equations:\n  e:\n    formula: x < 1\nfalsification_tests:\n  - {id: FALSIFY-DEMO-001, rule: r, "
        "prediction: x < 1, devices: [cpu], if_fails: f}\n"
    ),
    # a tab before a comment: libyaml (what pv validate reads with) accepts it, PyYAML's
    # pure-Python scanner does not; and non-ASCII text before the edits (marks index characters)
    "tab before a comment, non-ASCII": (
        "metadata:\n  id: demo\n  version: 1.0.0\n  kind: pattern\n  status: DRAFT\t# declared\n"
        "  description: \"é€ — 😀\"\n  changelog:\n    - version: 1.0.0\n      date: '2026-01-01'\n"
        "      change: première\nfalsification_tests:\n  - {id: FALSIFY-DEMO-001, rule: r, prediction: x < 1, "
        "devices: [cpu], if_fails: f}\n"
    ),
    "flow list with entries": (
        "metadata:\n  id: demo\n  version: 1.0.0\n  kind: pattern\n  status: DRAFT\n  description: d\n"
        "  changelog: [{version: 1.0.0, date: 2026-01-01, change: first}]  # inline\n"
        "falsification_tests:\n  - {id: FALSIFY-DEMO-001, rule: r, prediction: x < 1, devices: [cpu], if_fails: f}\n"
    ),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_rewrite_layouts_verify(name: str):
    text = LAYOUTS[name]
    out = rewrite(text, **EDIT)
    _verify(text, out, **EDIT)  # raises if anything but status/version/changelog changed
    if "\r\n" in text:
        assert "\n" not in out.replace("\r\n", "")
    assert "status: DRAFT" not in out.replace("DRAFT_RED", "")


def test_rewrite_refuses_flow_metadata():
    text = "metadata: {id: demo, version: 1.0.0, kind: pattern, status: DRAFT, description: d}\n"
    with pytest.raises(PromotionError, match="block"):
        rewrite(text, **EDIT)


def test_flow_style_entries_get_a_flow_style_entry():
    out = rewrite(LAYOUTS["flow-mapping entries in a block list"], **EDIT)
    assert '    - {version: 1.1.0, date: 2026-05-06, change: "marked red: a \\"quoted\\" thing"}\n' in out
    out = rewrite(LAYOUTS["flow list with entries"], **EDIT)
    assert "change: first}, {version: 1.1.0, date: 2026-05-06, " in out and out.count("]  # inline") == 1


def test_the_documented_example_contract_can_be_promoted():
    """docs/contract-format.md's example is what users copy: its changelog style must promote."""
    import re

    doc = (Path(__file__).resolve().parents[1] / "docs" / "contract-format.md").read_text(encoding="utf-8")
    example = re.search(r"## A contract\n\n```yaml\n(.*?)```", doc, re.S).group(1)
    assert "changelog:" in example
    edit = dict(EDIT, status="DRAFT_PARTIAL_DISCHARGE")
    _verify(example, rewrite(example, **edit), **edit)


def test_promotion_keeps_generated_tests_in_step(ws: Path):
    """The generated module records the contract's sha256 and version: promote rewrites it, so
    `pv generate --check` (a pre-commit hook) passes right after a promotion."""
    generate = CliRunner().invoke(main, ["generate"], catch_exceptions=False)
    assert generate.exit_code == 0, generate.output
    module = ws / "generated_tests" / "test_demo.py"
    assert "contract_version='1.2.3'" in module.read_text()
    evidence(ws, "PASS")
    evidence(ws, "FAIL", mutant="demo_bug")

    result = pv("--promote")
    assert result.exit_code == 0, result.output
    assert "updated generated_tests/test_demo.py" in result.output
    assert "contract_version='1.3.0'" in module.read_text()
    check = CliRunner().invoke(main, ["generate", "--check"], catch_exceptions=False)
    assert check.exit_code == 0, check.output
