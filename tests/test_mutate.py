"""`pv mutate` end to end on a tiny adopter project (pure Python, seconds): killed, survived,
timeout (a mutant that hangs), error (a mutant that kills the interpreter), resume, the tree
left byte for byte as it was (also after pv itself is killed mid-run), marked equivalents, the
`pv status` section, and bad input (no bound code, a module that does not parse, a results
path that cannot be written, a malformed equivalents file)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

LIBRARY = textwrap.dedent('''\
    import os


    def scale(x, factor):
        return x * factor


    def countdown(n):
        while n > 0:
            n -= 1
        return n


    def guarded(x):
        if x >= 0:
            return x
        os._exit(3)  # the interpreter dies: no traceback, no verdict


    def unchecked(x):
        return x + 1  # no falsifier calls this
''')

CHECKS = textwrap.dedent('''\
    from tinylib import core


    def scaling(*, device):
        return {"got": core.scale(3.0, 2.0)}


    def loop(*, device):
        return {"left": core.countdown(3)}


    def guard(*, device):
        return {"kept": core.guarded(0)}


    def unrelated(*, device):
        return {"ok": 1}
''')

CONTRACT = textwrap.dedent('''\
    metadata: {id: tiny, version: 1.0.0, kind: pattern, status: DRAFT, description: A tiny library.}
    falsification_tests:
      - {id: FALSIFY-TINY-001, rule: scale multiplies, prediction: "got == 6.0", check: "tiny_checks.checks:scaling",
         devices: [cpu], if_fails: look}
      - {id: FALSIFY-TINY-002, rule: countdown ends at 0, prediction: "left == 0", check: "tiny_checks.checks:loop",
         devices: [cpu], if_fails: look}
      - {id: FALSIFY-TINY-003, rule: zero passes the guard, prediction: "kept == 0", check: "tiny_checks.checks:guard",
         devices: [cpu], if_fails: look}
''')

UNBOUND = textwrap.dedent('''\
    metadata: {id: unbound, version: 1.0.0, kind: pattern, status: DRAFT, description: Binds no code.}
    falsification_tests:
      - {id: FALSIFY-UNBOUND-001, rule: nothing, prediction: "ok == 1", check: "tiny_checks.other:unrelated",
         devices: [cpu], if_fails: look}
''')


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT)
    env["PV_FORCE_NO_CUDA"] = "1"
    for key in ("PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PV_AUTOMUTANT", "PV_AUTOMUTATE_COVERAGE"):
        env.pop(key, None)
    return env


def _pv(root: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pv.cli", *args], cwd=root, env=_env(), capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "tiny"
    (root / "tinylib").mkdir(parents=True)
    (root / "tinylib" / "__init__.py").write_text("", encoding="utf-8")
    (root / "tinylib" / "core.py").write_text(LIBRARY, encoding="utf-8")
    (root / "tiny_checks").mkdir()
    (root / "tiny_checks" / "__init__.py").write_text("", encoding="utf-8")
    (root / "tiny_checks" / "checks.py").write_text(CHECKS, encoding="utf-8")
    (root / "tiny_checks" / "other.py").write_text("def unrelated(*, device):\n    return {'ok': 1}\n",
                                                    encoding="utf-8")
    (root / "contracts").mkdir()
    (root / "contracts" / "tiny-v1.yaml").write_text(CONTRACT, encoding="utf-8")
    (root / "contracts" / "unbound-v1.yaml").write_text(UNBOUND, encoding="utf-8")
    (root / "pyproject.toml").write_text(textwrap.dedent('''\
        [tool.pv]
        check_packages = ["tiny_checks"]
        code_packages = ["tinylib"]
    '''), encoding="utf-8")
    done = _pv(root, "generate")
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def tree_hash(root: Path, skip: tuple[str, ...] = ()) -> str:
    """Every file under root (names, bytes, modes), except the paths in `skip` (pv's own outputs)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel in skip:
            continue
        digest.update(rel.encode() + b"\0" + oct(path.stat().st_mode).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def results(path: Path) -> dict[tuple[int, str, str], dict]:
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return {(x["line"], x["original"], x["replacement"]): x for x in lines if x["kind"] == "mutant"}


def test_end_to_end_killed_survived_timeout_crash_resume_and_untouched_tree(project: Path, tmp_path: Path):
    out = tmp_path / "out" / "mutation.jsonl"
    before = tree_hash(project)
    run = _pv(project, "mutate", "--contract", "tiny", "--device", "cpu", "-j", "2", "--timeout", "8",
              "--operator", "arithmetic", "--operator", "compare", "--results", str(out))
    assert tree_hash(project) == before  # no mutant, no bytecode, no cache left in the user's tree
    assert run.returncode == 1, run.stdout + run.stderr  # survivors are findings
    assert "Traceback" not in run.stdout + run.stderr
    got = results(out)
    assert got[(5, "x * factor", "x / factor")]["result"] == "KILLED"
    assert got[(5, "x * factor", "x / factor")]["killed_by"] == "FALSIFY-TINY-001"
    assert got[(10, "n -= 1", "n += 1")]["result"] == "TIMEOUT"  # the loop never ends
    crash = got[(15, "x >= 0", "x > 0")]
    assert crash["result"] == "ERROR" and "exited with status 3" in crash["message"]
    assert got[(9, "n > 0", "n >= 0")]["result"] == "KILLED"  # countdown(3) ends at -1
    never = got[(21, "x + 1", "x - 1")]
    assert never["result"] == "SURVIVED" and never["executed"] is False  # no falsifier runs that line
    assert "-    return x + 1" in never["diff"] and "+    return x - 1" in never["diff"]
    assert "SURVIVED" in run.stdout and "tinylib/core.py:21" in run.stdout

    again = _pv(project, "mutate", "--contract", "tiny", "--device", "cpu", "--timeout", "8",
                "--operator", "arithmetic", "--operator", "compare", "--results", str(out))
    assert f"{len(got)} mutant(s) already have fresh results: skipped (resume)" in again.stdout
    assert "0 mutant(s) to run" in again.stdout

    # marked equivalent: out of the score; the dashboard shows the score and the survivors
    equivalents = tmp_path / "out" / "equivalent-mutants.toml"
    equivalents.write_text(f'[mutants.{never["id"]}]\nreason = "dead code in this example"\n', encoding="utf-8")
    from pv.automutate.report import section

    text = "\n".join(section(out, equivalents, project))
    assert "## Mutation score" in text and "`tinylib.core`" in text and "`tiny`" in text
    assert never["id"] in text.split("### Marked equivalent")[1] and "dead code in this example" in text
    assert never["id"] not in text.split("### Surviving mutants")[1].split("### Marked equivalent")[0]


def test_killing_pv_mid_run_leaves_the_tree_untouched_and_the_rerun_resumes(project: Path, tmp_path: Path):
    out = tmp_path / "mutation.jsonl"
    before = tree_hash(project)
    proc = subprocess.Popen([sys.executable, "-m", "pv.cli", "mutate", "--contract", "tiny", "--device", "cpu",
                             "--operator", "arithmetic", "--operator", "constant", "--results", str(out)],
                            cwd=project, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and (not out.exists() or '"kind": "mutant"' not in out.read_text()):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # pv and the mutant's pytest process, mid-run
    proc.wait()
    assert tree_hash(project) == before
    recorded = len(results(out))
    assert recorded >= 1
    rerun = _pv(project, "mutate", "--contract", "tiny", "--device", "cpu", "--operator", "arithmetic",
                "--operator", "constant", "--results", str(out), "--time-budget", "1")
    assert f"{recorded} mutant(s) already have fresh results: skipped (resume)" in rerun.stdout, rerun.stdout
    assert tree_hash(project) == before


def test_bad_input_is_a_clear_message_never_a_traceback(project: Path, tmp_path: Path):
    unbound = _pv(project, "mutate", "--contract", "unbound", "--device", "cpu", "--results", str(tmp_path / "r"))
    assert unbound.returncode == 2 and "bind no module of code_packages (tinylib)" in unbound.stderr

    blocked = tmp_path / "a-file"
    blocked.write_text("", encoding="utf-8")
    full = _pv(project, "mutate", "--contract", "tiny", "--results", str(blocked / "mutation.jsonl"))
    assert full.returncode == 2 and "cannot write the mutation results to" in full.stderr

    bad_toml = tmp_path / "eq.toml"
    bad_toml.write_text("[mutants.abc]\nwhy = 'no reason key'\n", encoding="utf-8")
    eq = _pv(project, "mutate", "--contract", "tiny", "--equivalents", str(bad_toml), "--list")
    assert eq.returncode == 2 and "needs a non-empty `reason`" in eq.stderr

    (project / "tinylib" / "broken.py").write_text("def f(:\n    pass\n", encoding="utf-8")
    (project / "tinylib" / "__init__.py").write_text("from . import broken  # noqa\n", encoding="utf-8")
    listed = _pv(project, "mutate", "--contract", "tiny", "--list")
    assert listed.returncode == 0
    assert "not mutated: tinylib/broken.py:1:" in listed.stderr and "cannot parse" in listed.stderr
    for done in (unbound, full, eq, listed):
        assert "Traceback" not in done.stdout + done.stderr


def test_a_baseline_the_time_budget_cuts_is_not_recorded_and_the_rerun_runs_it(project: Path, tmp_path: Path):
    # The budget (2 s) stops the baseline's pytest process while the slow check sleeps, before its
    # verdict. Recording that falsifier as MISSING would exclude it from every later run with the
    # same code ("does not PASS unmutated"): the rerun must run it instead, and judge mutants with it.
    (project / "tiny_checks" / "slow.py").write_text(
        "import time\n\nfrom tinylib import core\n\n\ndef slow_scaling(*, device):\n"
        "    time.sleep(6)\n    return {'got': core.scale(3.0, 2.0)}\n", encoding="utf-8")
    (project / "contracts" / "slow-v1.yaml").write_text(textwrap.dedent('''\
        metadata: {id: slow, version: 1.0.0, kind: pattern, status: DRAFT, description: A slow check.}
        falsification_tests:
          - {id: FALSIFY-SLOW-001, rule: scale multiplies, prediction: "got == 6.0",
             check: "tiny_checks.slow:slow_scaling", devices: [cpu], if_fails: look}
    '''), encoding="utf-8")
    assert _pv(project, "generate").returncode == 0
    out = tmp_path / "mutation.jsonl"
    cut = _pv(project, "mutate", "--contract", "slow", "--device", "cpu", "--operator", "arithmetic",
              "--results", str(out), "--time-budget", "2")
    assert "Traceback" not in cut.stdout + cut.stderr
    recorded = [json.loads(x) for x in out.read_text().splitlines() if x.strip()] if out.exists() else []
    assert not [x for x in recorded if x["kind"] == "baseline" and x["falsifier"] == "FALSIFY-SLOW-001"], recorded
    rerun = _pv(project, "mutate", "--contract", "slow", "--device", "cpu", "--operator", "arithmetic",
                "--results", str(out))
    assert "Traceback" not in rerun.stdout + rerun.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
    assert [x["verdicts"] for x in lines if x["kind"] == "baseline" and x["falsifier"] == "FALSIFY-SLOW-001"] \
        == [["PASS"]], rerun.stdout
    killed = [x for x in lines if x["kind"] == "mutant" and x["result"] == "KILLED"]
    assert "FALSIFY-SLOW-001" in {x["killed_by"] for x in killed}, rerun.stdout


def test_only_keeps_the_chosen_mutants_of_the_sample_and_refuses_an_id_outside_it(project: Path):
    listed = _pv(project, "mutate", "--contract", "tiny", "--list", "--sample", "4", "--seed", "3")
    ids = [line.split()[0] for line in listed.stdout.splitlines()[1:]]
    assert len(ids) == 4, listed.stdout
    chosen = _pv(project, "mutate", "--contract", "tiny", "--list", "--sample", "4", "--seed", "3",
                 "--only", ids[2], "--only", ids[0])
    assert chosen.returncode == 0, chosen.stderr
    assert [line.split()[0] for line in chosen.stdout.splitlines()[1:]] == [ids[0], ids[2]]  # the sample's order
    everything = _pv(project, "mutate", "--contract", "tiny", "--list")
    outside = next(line.split()[0] for line in everything.stdout.splitlines()[1:] if line.split()[0] not in ids)
    refused = _pv(project, "mutate", "--contract", "tiny", "--list", "--sample", "4", "--seed", "3", "--only", outside)
    assert refused.returncode == 2 and f"--only {outside}: not a mutant of this selection" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_the_baseline_runs_only_the_falsifiers_that_judge_a_selected_mutant(project: Path, tmp_path: Path):
    (project / "tinylib" / "extra.py").write_text("def double(x):\n    return 2 * x\n", encoding="utf-8")
    (project / "tiny_checks" / "extra_checks.py").write_text(
        "from tinylib import extra\n\n\ndef doubling(*, device):\n    return {'got': extra.double(2)}\n",
        encoding="utf-8")
    (project / "contracts" / "extra-v1.yaml").write_text(textwrap.dedent('''\
        metadata: {id: extra, version: 1.0.0, kind: pattern, status: DRAFT, description: Doubles.}
        falsification_tests:
          - {id: FALSIFY-EXTRA-001, rule: double doubles, prediction: "got == 4", check: "tiny_checks.extra_checks:doubling",
             devices: [cpu], if_fails: look}
    '''), encoding="utf-8")
    assert _pv(project, "generate").returncode == 0
    listed = _pv(project, "mutate", "--all", "--list")
    core = next(line.split()[0] for line in listed.stdout.splitlines()[1:] if "tinylib/core.py" in line)
    out = tmp_path / "m.jsonl"
    done = _pv(project, "mutate", "--all", "--device", "cpu", "--only", core, "--results", str(out), timeout=300)
    assert "Traceback" not in done.stderr, done.stderr
    baselined = {json.loads(x)["falsifier"] for x in out.read_text().splitlines() if '"baseline"' in x}
    assert baselined and baselined <= {"FALSIFY-TINY-001", "FALSIFY-TINY-002", "FALSIFY-TINY-003"}, baselined


def test_skip_subject_names_a_declared_subject_or_is_refused(project: Path):
    refused = _pv(project, "mutate", "--contract", "tiny", "--list", "--skip-subject", "no-such-subject")
    assert refused.returncode == 2 and "--skip-subject 'no-such-subject': no falsifier declares it" in refused.stderr
    assert "Traceback" not in refused.stderr
