"""examples/welford end to end, as an adopter runs it, in a temporary copy and a fresh git
repository: pv init → the contract → validate → generate → run → strength (the planted bug is
killed) → plain `pytest generated_tests/` → status (+ promote) → the real pre-commit tool
committing the project and then blocking a misspelt contract key.

Every step is a subprocess of the console scripts in this venv (`pv`, `pytest`, `pre-commit`),
run from the project root with only pv's repository on PYTHONPATH (so the example imports its
own packages the way an adopter's checkout does: through pv, not through the test). Offline:
the hooks are `repo: local`; HOME and PRE_COMMIT_HOME point into tmp_path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = REPO_ROOT / "examples" / "welford"
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (BIN / "pv").exists() or not (BIN / "pytest").exists(),
    reason="needs git and the pv and pytest console scripts in this venv",
)


class Project:
    def __init__(self, root: Path, home: Path):
        self.root = root
        self.env = {
            **os.environ,
            "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
            # pv's own sources (this checkout), never the example's root: the plugin must add it
            "PYTHONPATH": str(REPO_ROOT),
            "HOME": str(home),
            "PRE_COMMIT_HOME": str(home / "pre-commit"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "pv test", "GIT_AUTHOR_EMAIL": "pv@example.invalid",
            "GIT_COMMITTER_NAME": "pv test", "GIT_COMMITTER_EMAIL": "pv@example.invalid",
        }
        for key in ("GIT_DIR", "GIT_INDEX_FILE", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER", "PV_FORCE_NO_CUDA"):
            self.env.pop(key, None)

    def run(self, *args: str, expect: int | None = 0, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(args, cwd=self.root, env=self.env, capture_output=True, text=True, timeout=timeout)
        if expect is not None and done.returncode != expect:
            raise AssertionError(f"{' '.join(args)}: exit {done.returncode}, expected {expect}\n"
                                 f"{done.stdout}\n{done.stderr}")
        return done

    def ledger(self) -> list[dict]:
        path = self.root / "evidence" / "ledger.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def project(tmp_path: Path) -> Project:
    root = tmp_path / "welford"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
    (tmp_path / "home").mkdir()
    proj = Project(root, tmp_path / "home")
    proj.run("git", "init", "-q", "-b", "main")
    proj.run("git", "config", "commit.gpgsign", "false")
    return proj


def test_welford_example_end_to_end(project: Project):
    root = project.root
    assert "[tool.pv]" not in (root / "pyproject.toml").read_text()  # the project starts without pv

    # 1. pv init: the default check package is named after the project
    init = project.run("pv", "init")
    assert "created  welford_checks/mutants.py" in init.stdout, init.stdout
    project.run("pv", "validate")  # the scaffold validates as it is

    # 2. the adopter's contract, check and planted bug replace the demo
    shutil.copytree(root / "adoption", root, dirs_exist_ok=True)
    shutil.rmtree(root / "adoption")
    for demo in ("contracts/demo-softmax-v1.yaml", "welford_checks/softmax.py", "welford_checks/checks.py"):
        (root / demo).unlink()

    # 3. validate and generate
    validate = project.run("pv", "validate")
    assert "1 contracts, 1 falsifiers: 0 errors, 0 warnings" in validate.stdout, validate.stdout
    project.run("pv", "generate")
    project.run("pv", "generate", "--check")
    assert (root / "generated_tests" / "test_welford_variance.py").is_file()

    # 4. run: the library passes, measured against exact arithmetic
    run = project.run("pv", "run", "--all", "--device", "cpu")
    assert "1 passed, 0 falsified, 0 errored" in run.stdout, run.stdout
    [record] = project.ledger()
    assert (record["falsifier"], record["verdict"], record["mutant"]) == ("FALSIFY-WELFORD-VARIANCE-001", "PASS", None)
    assert 0 < record["observations"]["variance_rel_error"] < 1e-6

    # 5. strength: the textbook formula is killed, by a wide margin
    strength = project.run("pv", "strength", "--device", "cpu")
    assert re.search(r"FALSIFY-WELFORD-VARIANCE-001\s+textbook_one_pass_variance\s+KILLED", strength.stdout), strength.stdout
    killed = [r for r in project.ledger() if r["mutant"] == "textbook_one_pass_variance"]
    assert [r["verdict"] for r in killed] == ["FAIL"] and killed[0]["observations"]["variance_rel_error"] > 1.0

    # 6. plain pytest imports the adopter's packages (the plugin puts the project root on sys.path)
    plain = project.run("pytest", "-q", "-p", "no:cacheprovider", "generated_tests/")
    assert "1 passed" in plain.stdout, plain.stdout
    assert [r["verdict"] for r in project.ledger() if r["mutant"] is None] == ["PASS", "PASS"]

    # 7. status, promotion (flow-style changelog), and every check green afterwards
    status = project.run("pv", "status")
    assert "welford-variance: ACTIVE_RUNTIME (declared DRAFT)" in status.stdout, status.stdout
    promote = project.run("pv", "status", "--promote")
    assert "promoted DRAFT → ACTIVE_RUNTIME" in promote.stdout + promote.stderr
    contract = (root / "contracts" / "welford-variance-v1.yaml").read_text()
    assert "status: ACTIVE_RUNTIME" in contract and "- {version: 1.1.0, date: " in contract
    project.run("pv", "validate")
    project.run("pv", "generate", "--check")
    project.run("pv", "status", "--check")

    # 8. the real pre-commit: the adopted project commits; a misspelt key is blocked
    project.run(sys.executable, "-m", "pre_commit", "install")
    project.run("git", "add", "-A")
    commit = project.run("git", "commit", "-q", "-m", "adopt pv")
    assert "Failed" not in commit.stdout + commit.stderr
    contract_path = root / "contracts" / "welford-variance-v1.yaml"
    contract_path.write_text(contract.replace("    prediction: ", "    predicton: ", 1))
    project.run("git", "add", "contracts/welford-variance-v1.yaml")
    blocked = project.run("git", "commit", "-m", "typo", expect=1)
    output = blocked.stdout + blocked.stderr
    assert re.search(r"contracts/welford-variance-v1\.yaml:\d+:5: PV201 unknown key "
                     r"falsification_tests\[0\]\.predicton", output), output
    assert "did you mean 'prediction'?" in output
    assert project.run("git", "log", "--format=%s").stdout.split("\n")[0] == "adopt pv"

    # 9. CI: the workflow's own steps (.github/workflows/pv.yml, what `pv init --ci github`
    # writes), on the committed tree, are green and record nothing
    project.run("git", "checkout", "HEAD", "--", "contracts/")  # undo the blocked typo
    ledger_before = (root / "evidence" / "ledger.jsonl").read_text()
    steps = yaml.safe_load((root / ".github" / "workflows" / "pv.yml").read_text())["jobs"]["pv"]["steps"]
    ci = [s["run"] for s in steps if "run" in s and s.get("name") != "install"]  # pv is installed here
    assert len(ci) == 5 and any("--require-fresh" in line for line in ci)
    for line in ci:
        project.run("bash", "-c", line)
    assert (root / "evidence" / "ledger.jsonl").read_text() == ledger_before
    junit = (root / "pv-junit.xml").read_text()
    assert 'tests="1" failures="0" errors="0"' in junit and "FALSIFY-WELFORD-VARIANCE-001[cpu]" in junit


def guide_commands(sections: tuple[str, ...]) -> list[str]:
    """The shell lines of docs/adopting.md's ```bash blocks in the named sections, comments cut."""
    text = (REPO_ROOT / "docs" / "adopting.md").read_text(encoding="utf-8")
    lines = []
    for section in re.split(r"\n## ", text)[1:]:
        if not section.startswith(sections):
            continue
        for block in re.findall(r"```bash\n(.*?)```", section, re.S):
            lines += [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines()]
    return [line for line in lines if line]


def test_adopting_guide_followed_literally(tmp_path: Path):
    """docs/adopting.md sections 2-4 (init, the loop, commit with the hooks), command by command,
    in a fresh git repository of a project that has only a [project] table. (Section 1 installs
    pv, which this venv has.)"""
    root = tmp_path / "my-lib"
    root.mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "my-lib"\nversion = "0.1.0"\n')
    (tmp_path / "home").mkdir()
    project = Project(root, tmp_path / "home")
    project.run("git", "init", "-q", "-b", "main")
    project.run("git", "config", "commit.gpgsign", "false")

    commands = guide_commands(("2.", "3.", "4."))
    assert commands[0] == "pv init" and "pre-commit install" in commands and "pv status --promote" in commands
    for line in commands:
        project.run("bash", "-c", line.replace("pre-commit ", f"{sys.executable} -m pre_commit ", 1))

    assert project.run("git", "log", "--format=%s").stdout.split() == ["Adopt", "pv"]
    assert "status: ACTIVE_RUNTIME" in (root / "contracts" / "demo-softmax-v1.yaml").read_text()
    assert project.run("git", "status", "--porcelain").stdout == ""  # everything pv wrote was committed


# ---- examples/nanotrainer: an outside trainer under the falsifier pack's seed checks ------------

NANOTRAINER = REPO_ROOT / "examples" / "nanotrainer"
NANO_MUTANTS = ("nano_checkpoint_keys_not_loaded", "nano_fused_qkv_drops_bias", "nano_fast_attention_not_causal",
                "nano_loss_ignores_reduction", "nano_loss_targets_not_shifted", "nano_evaluate_averages_batch_means",
                "nano_trainer_reinitialises_weights", "nano_generate_samples", "nano_warmup_never_warms",
                "nano_lr_set_after_step", "nano_reference_mask_sees_next_key", "nano_adam_l2_weight_decay",
                "nano_heads_merged_across_rows", "nano_clip_per_parameter", "nano_tied_head_detached")
# the eleventh (blind) batch's bugs that a falsifier declares (docs/independent-mutants.md, "Eleventh batch"):
# the five that survived before FALSIFY-NANO-EVAL-004, -HELDOUT-001, -ADAMW-002 and -DECODE-001 (and one more
# that EVAL-004 also kills); the batch's other eight are killed by falsifiers that do not declare them
NANO_BLIND_DECLARED = ("nano_block_mlp_skips_norm", "nano_mlp_gelu_tanh_approximation",
                       "nano_rope_frequencies_over_head_dim", "nano_corpus_train_includes_heldout",
                       "nano_decay_on_norms_and_biases", "nano_generate_window_keeps_oldest")


def adopt_nanotrainer(project: Project) -> None:
    """What docs/adopting.md ("Point pv's falsifiers at your runtime") has an adopter do after
    `pv init`: the adapter, the subject provider, the planted bugs and the seed contract from
    adoption/, the demo removed, and [tool.pv] told about the pack and the runtime."""
    root = project.root
    init = project.run("pv", "init")
    assert "created  nanotrainer_checks/mutants.py" in init.stdout, init.stdout
    shutil.copytree(root / "adoption", root, dirs_exist_ok=True)
    shutil.rmtree(root / "adoption")
    for demo in ("contracts/demo-softmax-v1.yaml", "nanotrainer_checks/softmax.py", "nanotrainer_checks/checks.py"):
        (root / demo).unlink()
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    assert 'check_packages = ["nanotrainer_checks"]\n' in text
    text = text.replace('check_packages = ["nanotrainer_checks"]\n',
                        'check_packages = ["nanotrainer_checks", "pvpack.checks"]\n')
    text += ('runtimes = { nanotrainer = "nanotrainer_checks.adapter:NanoTrainerAdapter" }\n'
             'subject_provider = "nanotrainer_checks.subjects:subject_directory"\n')
    pyproject.write_text(text)


@pytest.fixture
def nanotrainer(tmp_path: Path) -> Project:
    root = tmp_path / "nanotrainer"
    shutil.copytree(NANOTRAINER, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pv-cache"))
    (tmp_path / "home").mkdir()
    proj = Project(root, tmp_path / "home")
    # a model this small runs fastest on one thread; under `-n 2` more threads only contend
    proj.env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proj.run("git", "init", "-q", "-b", "main")
    adopt_nanotrainer(proj)
    return proj


@pytest.mark.slow  # trains nano-trained (seconds), then one pytest process per planted bug
def test_nanotrainer_example_end_to_end(nanotrainer: Project):
    """The seed falsifiers (and the reproduction of the recorded held-out loss, the disjoint
    held-out split), pv's learning-rate falsifier and more of the pack's claims (causality, the
    AdamW update and nanotrainer's decay policy, the save/load round trip, independent rows,
    clipping, gradient correctness, decoding across the context window) PASS on nanotrainer on
    the cpu (its
    subjects built by itself), each planted bug is KILLED by the falsifier that declares it, and
    the dashboard says so (the seed contract stays DRAFT_PARTIAL_DISCHARGE until its cuda cells
    run on a GPU; the schedule's is cpu-only)."""
    project = nanotrainer
    validate = project.run("pv", "validate")
    assert "3 contracts, 19 falsifiers: 0 errors, 0 warnings" in validate.stdout, validate.stdout
    project.run("pv", "generate")
    project.run("pv", "generate", "--check")

    run = project.run("pv", "run", "--all", "--device", "cpu", timeout=900)  # trains nano-trained first
    assert "19 passed, 0 falsified, 0 errored" in run.stdout, run.stdout
    records = project.ledger()
    assert {(r["runtime"], r["runtime_version"], r["verdict"]) for r in records} == {
        ("nanotrainer", "nanotrainer 0.1.0", "PASS")}
    parity = next(r for r in records if r["falsifier"] == "FALSIFY-NANO-PARITY-001")
    assert parity["observations"]["same_backend"] == 0  # the fast path against the reference, not itself
    schedule = next(r for r in records if r["falsifier"] == "FALSIFY-NANO-LR-SCHEDULE-001")
    assert schedule["observations"]["warmup_first_lr_ratio"] == pytest.approx(0.25)  # 1 / warmup_steps

    strength = project.run("pv", "strength", "--device", "cpu", "-j", "2", timeout=900)
    for mutant in NANO_MUTANTS + NANO_BLIND_DECLARED:
        assert re.search(rf"\s{mutant}\s+FALSIFY-NANO-[A-Z-]+-00\d\s+cpu\[nano-\w+\]@nanotrainer\s+KILLED", strength.stdout), \
            (mutant, strength.stdout)
    assert "SURVIVED" not in strength.stdout, strength.stdout
    killed = [r for r in project.ledger() if r["mutant"] is not None]
    assert killed and {r["verdict"] for r in killed} == {"FAIL"}
    # the warmup bug zeroes the warmup; the rate set after the update starts at the peak
    first_lr = {r["mutant"]: r["observations"]["warmup_first_lr_ratio"] for r in killed
                if r["falsifier"] == "FALSIFY-NANO-LR-SCHEDULE-001"}
    assert first_lr == {"nano_warmup_never_warms": 0.0, "nano_lr_set_after_step": pytest.approx(1.0)}, first_lr

    # every cpu cell discharged and every planted bug killed; the cuda cells wait for a GPU
    status = project.run("pv", "status")
    assert "falsifiers discharged: cpu 19/19, cuda 0/15; mutants killed 25/25 (100%)" in status.stdout, status.stdout
    assert "nanotrainer-pack: DRAFT_PARTIAL_DISCHARGE (declared DRAFT)" in status.stdout, status.stdout
    assert "nanotrainer-seeds: DRAFT_PARTIAL_DISCHARGE (declared DRAFT)" in status.stdout, status.stdout
    assert "nanotrainer-lr-schedule: ACTIVE_RUNTIME (declared DRAFT)" in status.stdout, status.stdout


BROKEN_CONTRACT = """\
# yaml-language-server: $schema=../.pv/contract.schema.json
metadata:
  id: broken-adapters
  version: 1.0.0
  kind: pattern
  status: DRAFT
  description: The forward-sanity seed falsifier on adapters that break the protocol.
falsification_tests:
  - id: FALSIFY-BROKEN-001
    rule: The untrained model's logits are finite
    prediction: "nonfinite_logits == 0"
    check: pvpack.checks.forward:forward_sanity
    runtimes: [nano-no-logits, nano-claims-logits, nano-wrong-shape, nano-wrong-dtype, nano-raises, nano-no-load]
    subjects: [nano-random]
    devices: [cpu]
    if_fails: the adapter
"""


def test_broken_adapters_are_named_errors_never_passes(nanotrainer: Project):
    """From the adopter's side: adapters missing a method, answering with the wrong shape or
    dtype, or raising — each cell is an ERROR that names the adapter and the capability; no
    PASS, no traceback from pv."""
    project, root = nanotrainer, nanotrainer.root
    shutil.copy(Path(__file__).parent / "examples_data" / "broken_adapters.py",
                root / "nanotrainer_checks" / "broken_adapters.py")
    (root / "contracts" / "broken-adapters-v1.yaml").write_text(BROKEN_CONTRACT)
    broken = {"nano-no-logits": "NoLogitsAdapter", "nano-claims-logits": "ClaimsLogitsAdapter",
              "nano-wrong-shape": "WrongShapeAdapter", "nano-wrong-dtype": "WrongDtypeAdapter",
              "nano-raises": "RaisingAdapter", "nano-no-load": "NoLoadAdapter"}
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        'runtimes = { nanotrainer = "nanotrainer_checks.adapter:NanoTrainerAdapter" }',
        "runtimes = { " + ", ".join(f'{name} = "nanotrainer_checks.broken_adapters:{cls}"'
                                    for name, cls in broken.items()) + " }"))
    project.run("pv", "generate")

    run = project.run("pv", "run", "--contract", "broken-adapters", "--device", "cpu", expect=1, timeout=600)
    output = run.stdout + run.stderr
    assert "Traceback" not in output, output
    by_runtime = {r["runtime"]: r for r in project.ledger()}
    assert set(by_runtime) == set(broken), by_runtime.keys()
    assert all(r["verdict"] != "PASS" for r in by_runtime.values())

    def message(name: str) -> str:
        return by_runtime[name].get("message") or ""

    # never claimed: a SKIP naming the capability (not evidence, never a pass)
    # nano-random is an untrained subject: the check loads it through the random_init capability
    expected_errors = {
        "nano-no-logits": "adapter 'nano-no-logits', capability 'logits': the adapter has no method logits()",
        "nano-claims-logits": "adapter 'nano-claims-logits', capability 'logits': the adapter has no method logits()",
        "nano-wrong-shape": "adapter 'nano-wrong-shape', capability 'logits': returned a (1, 64) float32 tensor",
        "nano-wrong-dtype": "adapter 'nano-wrong-dtype', capability 'logits': returned a (1, 32, 64) int64 tensor, "
                            "not a floating tensor",
        "nano-raises": "adapter 'nano-raises', capability 'random_init': raised OutOfMemoryError: CUDA out of memory",
        "nano-no-load": "adapter 'nano-no-load', capability 'random_init': the adapter has no method load()",
    }
    for name, text in expected_errors.items():
        assert by_runtime[name]["verdict"] == "ERROR", (name, by_runtime[name])
        assert text in message(name), (name, message(name))


def test_nanotrainer_blind_batch_changes_what_it_plants():
    """Each bug of nanotrainer's blind batch (docs/independent-mutants.md, "Eleventh batch")
    changes what nanotrainer computes while planted and nothing after (probes in
    tests/examples_data/nanotrainer_blind_probes.py, run in a process of their own)."""
    script = REPO_ROOT / "tests" / "examples_data" / "nanotrainer_blind_probes.py"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, str(script)], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    lines = dict(line.split() for line in done.stdout.splitlines() if line.strip())
    planted = re.findall(r'^@mutant\("(nano_\w+)"\)', (NANOTRAINER / "adoption" / "nanotrainer_checks" /
                                                      "mutants.py").read_text(), flags=re.M)
    blind = [name for name in planted if name not in NANO_MUTANTS]
    assert len(blind) >= 10 and sorted(lines) == sorted(blind), (blind, done.stdout, done.stderr)
    assert set(lines.values()) == {"changed"} and done.returncode == 0, (done.stdout, done.stderr)
