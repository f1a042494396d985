"""`pv status`: the dashboard, --check, --stdout, --format json (temporary workspaces only)."""

from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from pv.cli import main
from pv.ledger import append, make_record
from pv.loader import load_contract
from pv.markdown import md_code, md_text
from pv.statusmarkdown import render_markdown
from pv.statusreport import build_report
from pv_workspace import what_ran

PYPROJECT = """\
[tool.pv]
contracts_dir = "contracts"
ledger = "evidence/ledger.jsonl"
status_file = "docs/STATUS.md"
"""

ALPHA = """\
metadata:
  id: alpha
  version: 1.0.0
  kind: pattern
  status: DRAFT
  description: The alpha path works.
falsification_tests:
  - id: FALSIFY-ALPHA-001
    rule: loss is finite
    prediction: loss < 10
    check: demo_checks:loss
    devices: [cpu, cuda]
    if_fails: The alpha path diverges; run pv bisect.
    ship_blocking: true
    mutants: [alpha_bug]
  - id: FALSIFY-ALPHA-002
    rule: accuracy is high
    prediction: acc > 0.5
    check: demo_checks:loss
    devices: [cpu]
    if_fails: Accuracy collapsed.
"""

BETA = """\
metadata:
  id: beta
  version: 2.0.0
  kind: kernel
  status: DRAFT
  description: The beta kernel matches.
falsification_tests:
  - id: FALSIFY-BETA-001
    rule: matches reference
    prediction: err <= 0.001
    check: demo_checks:loss
    devices: [cpu]
    if_fails: Beta kernel is wrong.
    ship_blocking: true
    mutants: [beta_bug]
"""

_clock = itertools.count(1)


def _time() -> str:
    n = next(_clock)
    return f"2026-03-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z"


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "contracts").mkdir()
    (tmp_path / "contracts" / "alpha-v1.yaml").write_text(ALPHA)
    (tmp_path / "contracts" / "beta-v2.yaml").write_text(BETA)
    (tmp_path / "demo_checks.py").write_text(DEMO_CHECKS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


# The code the hand-made records say they ran (bound by digest, as pv run records it).
DEMO_CHECKS = '''"""Demo checks."""


def loss(*, device):
    return {"loss": 2.5}
'''


def code_digests(root: Path) -> dict[str, str]:
    from pv.codebind import digest_file

    return {"demo_checks": digest_file(root / "demo_checks.py")}


def record(root: Path, cid: str, fid: str, verdict: str, device: str = "cpu", mutant: str | None = None,
           observations: dict | None = None, time: str | None = None, message: str = ""):
    path = next((root / "contracts").glob(f"{cid}-v*.yaml"))
    loaded, _ = load_contract(path)
    f = loaded.contract.falsifier(fid)
    return make_record(
        contract=cid, contract_version=loaded.contract.metadata.version, falsifier=f.id,
        falsifier_sha256=f.definition_sha256(), device=device, mutant=mutant, verdict=verdict,
        observations={} if observations is None else observations, prediction=f.prediction,
        margin=0.25 if verdict in ("PASS", "FAIL") else None, message=message, duration_s=0.5,
        time_utc=time or _time(), git_commit="0123456789abcdef", git_dirty=False,
        code_digests=code_digests(root), **what_ran(root, loaded, fid, device),
    )


def add(root: Path, *records) -> None:
    append(root / "evidence" / "ledger.jsonl", records)


def pv(*args: str):
    return CliRunner().invoke(main, ["status", *args], catch_exceptions=False)


def cells(line: str) -> list[str]:
    """Split a markdown table row on unescaped pipes."""
    return re.split(r"(?<!\\)\|", line.strip())[1:-1]


def evidence_all_green(root: Path) -> None:
    add(root,
        record(root, "alpha", "FALSIFY-ALPHA-001", "PASS", "cpu", observations={"loss": 2.5}),
        record(root, "alpha", "FALSIFY-ALPHA-001", "PASS", "cuda", observations={"loss": 2.75}),
        record(root, "alpha", "FALSIFY-ALPHA-001", "FAIL", "cuda", mutant="alpha_bug", observations={"loss": 18.5}),
        record(root, "alpha", "FALSIFY-ALPHA-002", "PASS", "cpu", observations={"acc": 0.9, "unrelated": 3}),
        record(root, "beta", "FALSIFY-BETA-001", "FAIL", "cpu", observations={"err": 0.5}),
        )


# --- writing ---------------------------------------------------------------------------------------


def test_writes_dashboard_and_prints_summary(ws: Path):
    evidence_all_green(ws)
    result = pv()
    assert result.exit_code == 0, result.output
    text = (ws / "docs" / "STATUS.md").read_text()
    for heading in ("# Contract status", "## Summary", "## Open ship-blocking falsifiers", "## Contracts",
                    "### alpha", "### beta", "## Kill matrix"):
        assert heading + "\n" in text
    assert "| cpu | 2/3 |" in text and "| cuda | 1/1 |" in text
    assert "| DRAFT_PARTIAL_DISCHARGE | 1 |" in text and "| DRAFT_RED | 1 |" in text
    # observed values are those the prediction names; margin, date and short commit of the evidence
    assert "| cuda | PASS | loss=2.75 | " in text and "2026-03-01 `0123456` |" in text
    assert "acc=0.9 |" in text and "unrelated" not in text
    # ship-blocking and open: beta is falsified, with its if_fails text
    open_section = text.split("## Open ship-blocking falsifiers")[1].split("## Contracts")[0]
    assert "`FALSIFY-BETA-001`" in open_section and "Beta kernel is wrong." in open_section
    assert "FALSIFY-ALPHA-001" not in open_section  # discharged
    # kill matrix
    assert "| `FALSIFY-ALPHA-001` | 1/1 | KILLED |   |" in text
    assert "| `FALSIFY-BETA-001` | 0/1 |   | — |" in text
    assert "| `FALSIFY-ALPHA-002` | UNPROVEN |   |   |" in text
    assert "alpha: DRAFT_PARTIAL_DISCHARGE (declared DRAFT)" in result.output
    assert "! beta: DRAFT_RED" in result.output
    assert "wrote docs/STATUS.md" in result.output
    # nothing machine-specific leaks in
    assert str(ws) not in text


def test_check_detects_drift(ws: Path):
    missing = pv("--check")
    assert missing.exit_code == 1 and "does not exist" in missing.output and "run `pv status`" in missing.output
    assert pv().exit_code == 0
    assert pv("--check").exit_code == 0
    add(ws, record(ws, "beta", "FALSIFY-BETA-001", "PASS"))
    drift = pv("--check")
    assert drift.exit_code == 1
    assert "out of date" in drift.output and "run `pv status` and commit docs/STATUS.md" in drift.output
    assert pv().exit_code == 0 and pv("--check").exit_code == 0
    # editing a falsifier makes its evidence stale: also drift
    path = ws / "contracts" / "beta-v2.yaml"
    path.write_text(path.read_text().replace("err <= 0.001", "err <= 0.0001"))
    stale = pv("--check")
    assert stale.exit_code == 1
    # a new dashboard would only display the stale row: the re-run is what is owed
    assert "1 falsifier x device row(s) are STALE: re-run them first (`pv run --stale`" in stale.output
    assert "STALE" in pv("--stdout").output


def test_two_renders_are_byte_identical_whatever_the_ledger_order(ws: Path):
    evidence_all_green(ws)
    first = pv("--stdout").output
    assert pv("--stdout").output == first
    lines = (ws / "evidence" / "ledger.jsonl").read_text().splitlines(keepends=True)
    random.Random(7).shuffle(lines)
    (ws / "evidence" / "ledger.jsonl").write_text("".join(lines))
    assert pv("--stdout").output == first
    assert not (ws / "docs" / "STATUS.md").exists()  # --stdout writes nothing


def test_markdown_escaping_of_hostile_text(ws: Path):
    hostile = ALPHA.replace(
        "description: The alpha path works.",
        'description: "pipe | here\\n## Injected heading\\n<script>alert(1)</script> [x](http://e) `tick`"',
    ).replace(
        "if_fails: The alpha path diverges; run pv bisect.",
        'if_fails: "a | b | c\\n| fake | row |"',
    ).replace("prediction: loss < 10", "prediction: loss < 10 or loss == 99")
    (ws / "contracts" / "alpha-v1.yaml").write_text(hostile)
    add(ws, record(ws, "alpha", "FALSIFY-ALPHA-001", "FAIL", "cpu",
                   observations={"loss": "nan | x\n| y", "junk": 1}),
        record(ws, "alpha", "FALSIFY-ALPHA-001", "ERROR", "cuda", message="boom | bang\n<b>x</b>"))
    text = pv("--stdout").output
    assert "<script>" not in text and "<b>" not in text
    assert "\n## Injected" not in text and "\n| fake" not in text
    for line in text.splitlines():
        if line.startswith("|"):
            assert line.endswith("|"), line
    # every row of every table has as many cells as its header
    tables = re.findall(r"((?:^\|.*\|\n)+)", text, flags=re.M)
    assert tables
    for table in tables:
        rows = table.splitlines()
        widths = {len(cells(r)) for r in rows}
        assert len(widths) == 1, table
    assert r"a \| b \| c<br>\| fake \| row \|" in text
    assert r"nan \| x<br>\| y" in text


def test_md_helpers():
    assert md_text("a|b\nc<d>") == r"a\|b<br>c\<d\>"
    assert md_code("a | b") == r"`a \| b`"
    assert md_code("x `y` z") == "``x `y` z``"
    assert md_code("`edge") == "`` `edge ``"
    assert md_code("") == ""


def test_skip_shown_but_not_discharged(ws: Path):
    add(ws, record(ws, "alpha", "FALSIFY-ALPHA-001", "PASS", "cpu", observations={"loss": 1.0}),
        record(ws, "alpha", "FALSIFY-ALPHA-001", "SKIP", "cuda", message="CUDA not available"))
    text = pv("--stdout").output
    assert "| cuda | SKIP | CUDA not available |" in text
    assert "| cuda | 0/1 |" in text
    assert "PARTIAL" in text


def test_ledger_problems_warn_on_top_and_on_stderr(ws: Path):
    evidence_all_green(ws)
    with open(ws / "evidence" / "ledger.jsonl", "ab") as handle:
        handle.write(b'{"schema_version": 1, "contr')
    result = CliRunner().invoke(main, ["status"])
    assert result.exit_code == 0
    text = (ws / "docs" / "STATUS.md").read_text()
    head = text.split("## Summary")[0]
    assert "**Warning:**" in head and "line 6: torn last line" in head
    assert "evidence/ledger.jsonl:6: torn last line" in result.stderr


def test_unloadable_contract_is_reported(ws: Path):
    (ws / "contracts" / "broken-v1.yaml").write_text("metadata: [unclosed\n")
    result = pv("--stdout")
    # the dashboard still shows what loaded, and says which file did not; the exit status says
    # the dashboard is incomplete (a green CI step must not hide a contract that broke)
    assert result.exit_code == 1
    assert "`contracts/broken-v1.yaml`" in result.output and "pv validate" in result.output
    for mode in ([], ["--check"], ["--format", "json"], ["--require-fresh"]):
        assert pv(*mode).exit_code == 1, mode


def test_two_files_declaring_one_contract_id_are_neither_judged(ws: Path):
    """An attack: a second file declares `beta` again with a looser prediction. pv validate
    rejects it (PV301), but pv status judged the records against whichever file loaded last, so
    beta's honest FAIL showed as STALE (a re-run would do) instead of FALSIFIED."""
    add(ws, record(ws, "beta", "FALSIFY-BETA-001", "FAIL", "cpu", observations={"err": 0.5}))
    (ws / "contracts" / "beta-v3.yaml").write_text(BETA.replace("err <= 0.001", "err <= 10"))
    result = pv("--stdout")
    assert result.exit_code == 1
    for path in ("contracts/beta-v2.yaml", "contracts/beta-v3.yaml"):
        assert f"`{path}`" in result.output
    assert "PV301" in result.output
    assert not [line for line in result.output.splitlines() if "FALSIFY-BETA-001" in line and "STALE" in line]
    data = json.loads(pv("--format", "json").stdout)   # the warnings go to stderr
    assert {f["path"] for f in data["load_failures"]} == {"contracts/beta-v2.yaml", "contracts/beta-v3.yaml"}
    assert pv("--require-fresh").exit_code == 1


def test_format_json(ws: Path):
    evidence_all_green(ws)
    result = CliRunner().invoke(main, ["status", "--format", "json", "beta"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert [c["id"] for c in data["contracts"]] == ["beta"]
    beta = data["contracts"][0]
    assert beta["evidence"] == "DRAFT_RED" and beta["declared"] == "DRAFT"
    assert beta["falsifiers"][0]["devices"]["cpu"]["state"] == "FAIL"
    assert beta["falsifiers"][0]["mutants"] == {"beta_bug": {"state": "NOT_RUN", "devices": {}, "stale_because": {}}}
    assert data["summary"]["open_ship_blocking"] == ["FALSIFY-BETA-001"]
    assert data["summary"]["overclaims"] == ["beta"]  # DRAFT while red
    assert not (ws / "docs" / "STATUS.md").exists()


def test_usage_errors(ws: Path):
    assert pv("nope").exit_code == 2
    assert pv("--check", "--stdout").exit_code == 2
    assert pv("--allow-demote").exit_code == 2


def test_render_is_pure(ws: Path):
    loaded = [load_contract(p, f"contracts/{p.name}")[0] for p in sorted((ws / "contracts").glob("*.yaml"))]
    report = build_report(loaded, [], [], "evidence/ledger.jsonl", [])
    assert render_markdown(report) == render_markdown(build_report(list(reversed(loaded)), [], [],
                                                                   "evidence/ledger.jsonl", []))
    assert "| DRAFT | 2 |" in render_markdown(report)


def test_cuda_evidence_names_the_accelerator_cpu_evidence_does_not():
    from pv.ledger import Verdict, make_record
    from pv.statusmarkdown import _evidence_cell

    def record(device, name):
        return make_record(contract="c", contract_version="1.0.0", falsifier="FALSIFY-X-001", falsifier_sha256="0",
                           device=device, device_name=name, verdict=Verdict.PASS, prediction="x < 1",
                           duration_s=0.1, time_utc="2026-11-22T00:00:00Z", git_commit="abcdef0123")

    assert "on NVIDIA H100 80GB HBM3" in _evidence_cell(record("cuda", "NVIDIA H100 80GB HBM3"))
    assert " on " not in _evidence_cell(record("cpu", "Intel Xeon"))


# --- freshness: evidence bound to the code it ran (issue 18) ----------------------------------------


def test_a_record_made_before_code_binding_is_stale_never_discharged(ws: Path):
    old = record(ws, "beta", "FALSIFY-BETA-001", "PASS").model_copy(update={"code_digests": None})
    add(ws, old)
    text = pv("--stdout").output
    assert "| cpu | STALE (last PASS) | recorded before code binding (no digest of the code it ran) |" in text
    assert "| `FALSIFY-BETA-001` | — | cpu | PASS | recorded before code binding (no digest of the code it ran) |" in text
    assert "| cpu | 0/3 |" in text


def test_a_code_edit_stales_the_record_and_says_which_module(ws: Path):
    add(ws, record(ws, "beta", "FALSIFY-BETA-001", "PASS"))
    assert "| `FALSIFY-BETA-001`<br>ship-blocking | DISCHARGED |" in pv("--stdout").output
    assert pv().exit_code == 0
    # the attacker's edit: change the code and keep the committed dashboard
    checks = ws / "demo_checks.py"
    checks.write_text(checks.read_text().replace("2.5", "25"))
    result = pv("--check")
    assert result.exit_code == 1 and "docs/STATUS.md is out of date" in result.output
    text = pv("--stdout").output
    assert "| cpu | STALE (last PASS) | code changed since: demo_checks |" in text
    assert "| `FALSIFY-BETA-001`<br>ship-blocking | STALE |" in text


def test_a_docstring_edit_stales_nothing(ws: Path):
    add(ws, record(ws, "beta", "FALSIFY-BETA-001", "PASS"))
    assert pv().exit_code == 0
    checks = ws / "demo_checks.py"
    checks.write_text(checks.read_text().replace('"""Demo checks."""', '"""Demo checks, reworded."""\n# a comment'))
    assert pv("--check").exit_code == 0


def test_a_stale_fail_is_not_shown_as_current(ws: Path):
    add(ws, record(ws, "beta", "FALSIFY-BETA-001", "FAIL"))
    (ws / "demo_checks.py").write_text(DEMO_CHECKS.replace("2.5", "3.5"))
    data = json.loads(pv("--format", "json").stdout)
    beta = next(c for c in data["contracts"] if c["id"] == "beta")
    device = beta["falsifiers"][0]["devices"]["cpu"]
    assert device["state"] == "STALE" and device["stale_because"] == ["demo_checks"]
    assert data["summary"]["stale"] == [{"falsifier": "FALSIFY-BETA-001", "subject": None, "device": "cpu", "why": ["demo_checks"]}]


def test_require_fresh_fails_on_stale_ship_blocking_evidence(ws: Path):
    add(ws, record(ws, "beta", "FALSIFY-BETA-001", "PASS"),
        record(ws, "alpha", "FALSIFY-ALPHA-001", "PASS", "cpu"),
        record(ws, "alpha", "FALSIFY-ALPHA-001", "PASS", "cuda"))
    result = pv("--require-fresh")
    assert result.exit_code == 0 and "fresh: every ship-blocking falsifier is DISCHARGED" in result.output
    (ws / "demo_checks.py").write_text(DEMO_CHECKS.replace("2.5", "3.5"))
    result = pv("--require-fresh")
    assert result.exit_code == 1
    assert "FALSIFY-ALPHA-001 on cuda: STALE (code changed since: demo_checks)" in result.output
    assert "FALSIFY-BETA-001 on cpu: STALE (code changed since: demo_checks)" in result.output
    assert "pv run --stale" in result.output
    assert not (ws / "docs" / "STATUS.md").exists()  # a gate writes nothing
    assert pv("--require-fresh", "--check").exit_code == 2


@pytest.mark.parametrize("latest, shown", [
    ("FAIL", "FALSIFY-BETA-001 on cpu: FAIL"), ("ERROR", "FALSIFY-BETA-001 on cpu: ERROR (it broke)"),
    ("SKIP", "FALSIFY-BETA-001 on cpu: SKIP"), (None, "FALSIFY-BETA-001 on cpu: PENDING (no evidence)"),
])
def test_the_release_gate_fails_on_every_ship_blocking_cell_that_is_not_a_fresh_pass(ws: Path, latest, shown):
    """Not only STALE: a ship-blocking falsifier FALSIFIED, ERROR, SKIP or PENDING blocks too."""
    add(ws, record(ws, "alpha", "FALSIFY-ALPHA-001", "PASS", "cpu"),
        record(ws, "alpha", "FALSIFY-ALPHA-001", "PASS", "cuda"))
    if latest is not None:
        add(ws, record(ws, "beta", "FALSIFY-BETA-001", "PASS"),
            record(ws, "beta", "FALSIFY-BETA-001", latest, message="it broke" if latest == "ERROR" else ""))
    result = pv("--require-fresh")
    assert result.exit_code == 1, result.output
    assert shown in result.output
    assert "FALSIFY-ALPHA-001" not in result.output  # discharged: not a blocker


def test_a_replayed_pass_after_a_fail_is_flagged_and_decides_nothing(ws: Path):
    """The attack: a real PASS, then a real FAIL, then the PASS line copied to the end."""
    passed = record(ws, "beta", "FALSIFY-BETA-001", "PASS")
    add(ws, passed, record(ws, "beta", "FALSIFY-BETA-001", "FAIL"))
    ledger_file = ws / "evidence" / "ledger.jsonl"
    with open(ledger_file, "ab") as handle:
        handle.write(passed.to_line())
    data = json.loads(pv("--format", "json").stdout)
    beta = next(c for c in data["contracts"] if c["id"] == "beta")["falsifiers"][0]
    assert beta["state"] == "FALSIFIED"
    assert any(p["line"] == 3 and p["message"].startswith("replayed record") for p in data["ledger"]["problems"])
    markdown = pv("--stdout").output
    assert "line 3: replayed record: repeats the record of line 1" in markdown
    # the copy with a new record id (same run, time and content) is a replay too
    with open(ledger_file, "ab") as handle:
        handle.write(passed.model_copy(update={"record_id": "f" * 32}).to_line())
    assert "line 4: replayed record" in pv("--stdout").output


DUPLICATED = ALPHA.replace("    prediction: loss < 10\n", "    prediction: loss < 10\n    prediction: loss < 1e9\n")


def test_a_contract_with_a_duplicate_key_is_flagged_not_judged(ws: Path):
    """YAML keeps the last of two `prediction:` keys; validate refuses the file, and status must
    not judge it silently either: it is a load failure (exit 1, named on the dashboard)."""
    assert DUPLICATED != ALPHA
    (ws / "contracts" / "alpha-v1.yaml").write_text(DUPLICATED)
    result = pv()
    assert result.exit_code == 1
    assert "duplicate key 'prediction'" in result.output
    text = (ws / "docs" / "STATUS.md").read_text()
    assert "alpha-v1.yaml" in text and "PV205" in text
