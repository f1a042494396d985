"""The real `pre-commit` tool, in a temporary git repository, runs `pv validate` and
`pv status --check` as hooks: a bad contract is blocked with its path:line:col error, a good one
is blocked until docs/STATUS.md is written, then committed.

Offline: the hooks are `repo: local` + `language: system` with this venv's `pv` as entry, and
PRE_COMMIT_HOME / HOME point into tmp_path so neither ~/.cache nor ~/.gitconfig is touched.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pv_workspace import hand_written_contract, what_ran

REPO_ROOT = Path(__file__).resolve().parents[1]
PV = Path(sys.executable).with_name("pv")

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not PV.exists(), reason="needs git and the pv console script in this venv"
)

PYPROJECT = """\
[tool.pv]
contracts_dir = "contracts"
check_packages = ["checks"]
"""

CHECKS = '''\
def loss(*, device: str) -> dict[str, float]:
    """Measures nothing real; observations: loss."""
    return {"loss": 0.5}
'''

GOOD = "# yaml-language-server: $schema=https://example.invalid/contract.schema.json\n" + hand_written_contract(
    check="checks.basic:loss")

BAD = GOOD.replace("    prediction: loss < 1\n", "    predicton: loss < 1\n")  # misspelt key, line 11


def config() -> str:
    hooks = [
        {"id": "pv-validate", "name": "pv validate", "entry": f"{PV} validate", "language": "system",
         "files": r"^contracts/.*\.ya?ml$", "pass_filenames": False},
        {"id": "pv-status-check", "name": "pv status --check", "entry": f"{PV} status --check",
         "language": "system", "files": r"^(contracts/.*\.ya?ml|evidence/.*\.jsonl|docs/STATUS\.md|.*\.py)$",
         "pass_filenames": False},
        {"id": "pv-ledger-check", "name": "pv ledger check", "entry": f"{PV} ledger check",
         "language": "system", "files": r"^(contracts/.*\.ya?ml|evidence/.*\.jsonl)$", "pass_filenames": False},
    ]
    return yaml.safe_dump({"repos": [{"repo": "local", "hooks": hooks}]}, sort_keys=False)


@pytest.fixture
def repo(tmp_path: Path):
    root = tmp_path / "repo"
    root.mkdir()
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "pv test", "GIT_AUTHOR_EMAIL": "pv@example.invalid",
        "GIT_COMMITTER_NAME": "pv test", "GIT_COMMITTER_EMAIL": "pv@example.invalid",
    }
    env.pop("GIT_DIR", None)
    env.pop("GIT_INDEX_FILE", None)
    (tmp_path / "home").mkdir()

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        return done

    run("git", "init", "-q", "-b", "main")
    run("git", "config", "commit.gpgsign", "false")
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "checks").mkdir()
    (root / "checks" / "__init__.py").write_text("")
    (root / "checks" / "basic.py").write_text(CHECKS)
    (root / "contracts").mkdir()
    (root / ".pre-commit-config.yaml").write_text(config())
    run(sys.executable, "-m", "pre_commit", "install")
    run(str(PV), "status")  # the status hook runs on Python files too: start with a dashboard
    run("git", "add", "pyproject.toml", "checks", ".pre-commit-config.yaml", "docs/STATUS.md")
    run("git", "commit", "-q", "-m", "workspace")
    return root, run


def test_bad_contract_blocked_good_one_committed(repo):
    root, run = repo
    contract = root / "contracts" / "demo-v1.yaml"

    contract.write_text(BAD)
    run("git", "add", "contracts/demo-v1.yaml")
    blocked = run("git", "commit", "-m", "add demo contract", check=False)
    output = blocked.stdout + blocked.stderr
    assert blocked.returncode != 0, output
    assert "pv validate" in output and "Failed" in output
    assert re.search(r"contracts/demo-v1\.yaml:11:5: PV201 unknown key falsification_tests\[0\]\.predicton", output), output
    assert "did you mean 'prediction'?" in output
    assert run("git", "log", "--format=%s").stdout.splitlines() == ["workspace"]

    # valid now, but the dashboard is missing: the status hook blocks and says how to fix it
    contract.write_text(GOOD)
    run("git", "add", "contracts/demo-v1.yaml")
    stale = run("git", "commit", "-m", "add demo contract", check=False)
    output = stale.stdout + stale.stderr
    assert stale.returncode != 0 and "docs/STATUS.md is out of date" in output and "run `pv status`" in output, output
    run(str(PV), "status")
    run("git", "add", "docs/STATUS.md")
    done = run("git", "commit", "-m", "add demo contract")
    assert "pv validate" in done.stdout + done.stderr and "Passed" in done.stdout + done.stderr
    assert run("git", "log", "--format=%s").stdout.splitlines() == ["add demo contract", "workspace"]
    assert run("git", "show", "--name-only", "--format=", "HEAD").stdout.split() == [
        "contracts/demo-v1.yaml", "docs/STATUS.md"]
    assert "Failed" not in done.stdout + done.stderr


def test_hook_manifest_and_own_config_are_valid():
    """.pre-commit-hooks.yaml offers the three hooks; this repo's config uses them locally."""
    for args in (["validate-manifest", ".pre-commit-hooks.yaml"], ["validate-config", ".pre-commit-config.yaml"]):
        done = subprocess.run([sys.executable, "-m", "pre_commit", *args], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
    manifest = yaml.safe_load((REPO_ROOT / ".pre-commit-hooks.yaml").read_text())
    offered = {h["id"]: h for h in manifest}
    assert set(offered) == {"pv-validate", "pv-generate-check", "pv-status-check", "pv-ledger-check"}
    assert offered["pv-ledger-check"]["entry"] == "pv ledger check"
    assert all(h["language"] == "python" for h in manifest)
    assert offered["pv-validate"]["entry"] == "pv validate"
    assert offered["pv-status-check"]["entry"] == "pv status --check"
    local = yaml.safe_load((REPO_ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {h["id"]: h for r in local["repos"] if r["repo"] == "local" for h in r["hooks"]}
    assert set(hooks) == set(offered)
    for hook_id, hook in hooks.items():
        assert hook["entry"] == offered[hook_id]["entry"] and hook["files"] == offered[hook_id]["files"]


def _record(root: Path, **fields):
    from pv.codebind import bind
    from pv.ledger import make_record
    from pv.loader import load_contract

    loaded, _ = load_contract(root / "contracts" / "demo-v1.yaml")
    f = loaded.contract.falsification_tests[0]
    base = dict(contract="demo", contract_version="1.0.0", falsifier=f.id, falsifier_sha256=f.definition_sha256(),
                device="cpu", verdict="PASS", observations={"loss": 0.5}, prediction=f.prediction, margin=0.5,
                duration_s=0.1, time_utc="2026-11-22T00:00:00Z",
                code_digests=bind(["checks.basic"], ["checks"], [root], loaded={}), **what_ran(root, loaded, f.id))
    base.update(fields)
    return make_record(**base)


def test_code_change_and_orphan_records_are_blocked(repo):
    """The attacks: edit the code a PASS was recorded on and commit without re-running (the
    dashboard would go on claiming the discharge); slip a FAIL for a falsifier that no contract
    has into the ledger (nothing would show it)."""
    from pv.ledger import append

    root, run = repo
    (root / "contracts" / "demo-v1.yaml").write_text(GOOD)
    append(root / "evidence" / "ledger.jsonl", [_record(root)])
    run(str(PV), "status")
    assert "| cpu | PASS |" in (root / "docs" / "STATUS.md").read_text()
    run("git", "add", "-A")
    run("git", "commit", "-q", "-m", "evidence")

    # a docstring edit is no code change: nothing is stale, the commit passes
    basic = root / "checks" / "basic.py"
    basic.write_text(CHECKS.replace("Measures nothing real", "Measures nothing at all"))
    run("git", "add", "-A")
    run("git", "commit", "-q", "-m", "docstring")

    basic.write_text(CHECKS.replace('{"loss": 0.5}', '{"loss": 0.25}'))
    run("git", "add", "-A")
    blocked = run("git", "commit", "-m", "change the check", check=False)
    output = blocked.stdout + blocked.stderr
    assert blocked.returncode != 0 and "pv status --check" in output and "Failed" in output, output
    assert "+| `FALSIFY-DEMO-001` | — | cpu | PASS | code changed since: checks.basic |" in output, output
    run(str(PV), "status")
    run("git", "add", "-A")
    run("git", "commit", "-q", "-m", "change the check, dashboard shows it stale")
    assert "STALE" in (root / "docs" / "STATUS.md").read_text()

    append(root / "evidence" / "ledger.jsonl", [_record(root, falsifier="FALSIFY-GHOST-001", verdict="FAIL")])
    run(str(PV), "status")
    run("git", "add", "-A")
    blocked = run("git", "commit", "-m", "an orphan", check=False)
    output = blocked.stdout + blocked.stderr
    assert blocked.returncode != 0 and "pv ledger check" in output, output
    assert "orphan record: contract demo has no falsifier FALSIFY-GHOST-001 (FAIL on cpu)" in output, output
