"""pv.harness: what a generated test calls. In-process, pure Python, no torch."""

from __future__ import annotations

import contextlib
import math

import pytest

from pv import harness, provenance


@pytest.fixture(autouse=True)
def _clean():
    harness.reset()
    harness.set_mutant(None)
    yield
    harness.set_mutant(None)


def loss_check(*, device, val_loss=2.0, vocab_size=1024):
    return {"val_loss": val_loss, "vocab_size": vocab_size}


PRED = "val_loss < 0.7 * ln(vocab_size)"


def test_pass_returns_the_outcome_with_margin_and_seed():
    outcome = harness.falsify(loss_check, {"val_loss": 2.0}, PRED, "cpu", falsifier="FALSIFY-X-001")
    assert outcome.verdict == "PASS"
    assert outcome.margin == pytest.approx(0.7 * math.log(1024) - 2.0)
    assert outcome.observations == {"val_loss": 2.0, "vocab_size": 1024}
    assert outcome.device_name == provenance.cpu_name()
    assert harness.take_outcome() is outcome and harness.take_outcome() is None
    seeded = harness.falsify(lambda *, device, seed: {"val_loss": 1.0, "vocab_size": 10}, {"seed": 5}, PRED, "cpu")
    assert seeded.seed == 5


def test_false_prediction_fails_with_observed_bound_and_margin():
    with pytest.raises(harness.Falsified) as info:
        harness.falsify(loss_check, {"val_loss": 18.55}, PRED, "cpu", falsifier="FALSIFY-X-001",
                        if_fails="biases dropped")
    text = str(info.value)
    assert "FALSIFIED FALSIFY-X-001 on cpu: prediction `val_loss < 0.7 * ln(vocab_size)` is false" in text
    assert "observed: val_loss=18.55, vocab_size=1024" in text
    assert "bound:    val_loss < 0.7 * ln(vocab_size)  ->  18.55 < 4.85203" in text
    assert "margin:   -13.698" in text
    assert "if it fails: biases dropped" in text
    outcome = harness.take_outcome()
    assert outcome.verdict == "FAIL" and outcome.margin == pytest.approx(0.7 * math.log(1024) - 18.55)


@pytest.mark.parametrize("check, prediction, fragment", [
    (lambda *, device: 1 / 0, "x > 1", "check raised ZeroDivisionError: division by zero"),
    (lambda *, device: [1, 2], "x > 1", "check returned list, not a mapping"),
    (lambda *, device: {"y": 1}, "x > 1", "no observation named 'x'"),
    (lambda *, device: {"x": "text"}, "x > 1", "is str, not a number"),
    (lambda *, device: {"x": 1}, "x + 1", "gives 2, not true/false"),
    (lambda *, device: {"x": 0}, "1 / x > 1", "arithmetic error"),
    (5, "x > 1", "the check is int, not a function"),
])
def test_anything_that_cannot_measure_or_judge_is_an_error(check, prediction, fragment):
    with pytest.raises(harness.FalsifierError, match="on cpu"):
        harness.falsify(check, {}, prediction, "cpu")
    outcome = harness.take_outcome()
    assert outcome.verdict == "ERROR" and fragment in outcome.message


def test_params_may_not_set_the_device():
    with pytest.raises(harness.FalsifierError, match="must not set 'device'"):
        harness.falsify(loss_check, {"device": "cuda"}, PRED, "cpu")


def test_device_unavailable_from_the_check_is_a_skip():
    def check(*, device):
        raise harness.DeviceUnavailable("needs two GPUs")

    with pytest.raises(pytest.skip.Exception, match="device absent: needs two GPUs — not evidence"):
        harness.falsify(check, {}, "x > 1", "cpu")
    assert harness.take_outcome().verdict == "SKIP"


def test_absent_cuda_is_a_skip_and_the_check_never_runs(monkeypatch):
    called = []
    monkeypatch.setattr(provenance, "cuda_available", lambda: (False, "cuda requested but no GPU"))
    with pytest.raises(pytest.skip.Exception):
        harness.falsify(lambda *, device: called.append(device) or {"x": 2}, {}, "x > 1", "cuda")
    assert called == []
    outcome = harness.take_outcome()
    assert outcome.verdict == "SKIP" and outcome.verdict != "PASS"


def test_unknown_device_is_an_error():
    with pytest.raises(harness.FalsifierError, match="unknown device 'tpu'"):
        harness.falsify(loss_check, {}, PRED, "tpu")


def test_tolerance_reaches_only_checks_that_ask_for_it():
    seen = {}

    def wants(*, device, tolerance):
        seen["tolerance"] = tolerance
        return {"x": 2}

    harness.falsify(wants, {}, "x > 1", "cpu", tolerance={"source": "s", "float32": {"rtol": 0.01, "atol": 0.05}})
    assert seen["tolerance"]["float32"] == {"rtol": 0.01, "atol": 0.05}
    assert seen["tolerance"]["bfloat16"] == {"rtol": 1.6e-2, "atol": 1e-5}
    harness.falsify(lambda *, device, **kw: {"x": 2 if "tolerance" not in kw else 0}, {}, "x > 1", "cpu",
                    tolerance={"source": "s"})


def test_bad_tolerance_is_an_error():
    with pytest.raises(harness.FalsifierError, match="bad tolerance"):
        harness.falsify(lambda *, device, tolerance: {"x": 2}, {}, "x > 1", "cpu", tolerance={"float8": {}})


def test_mutant_wraps_the_check_call():
    events = []

    @contextlib.contextmanager
    def planted():
        events.append("enter")
        yield
        events.append("exit")

    harness.set_mutant("planted", planted)
    outcome = harness.falsify(lambda *, device: events.append("check") or {"x": 2}, {}, "x > 1", "cpu")
    assert events == ["enter", "check", "exit"] and outcome.mutant == "planted"


def test_unbound_always_errors():
    with pytest.raises(harness.Unbound, match="unbound falsifier FALSIFY-X-009"):
        harness.unbound("FALSIFY-X-009", device="cuda", prediction="x > 1")
    outcome = harness.take_outcome()
    assert outcome.verdict == "ERROR" and outcome.device == "cuda"
    assert issubclass(harness.Unbound, harness.FalsifierError)
    assert not issubclass(harness.Unbound, AssertionError)  # pytest shows it as an error, not a failure


def test_observations_become_plain_data():
    class Scalar:
        def item(self):
            return 0.5

    outcome = harness.falsify(lambda *, device: {"x": Scalar(), "v": (1, 2), "o": object()}, {}, "x < 1", "cpu")
    assert outcome.observations["x"] == 0.5 and outcome.observations["v"] == [1, 2]
    assert outcome.observations["o"].startswith("<object object")


def test_load_check_resolves_bindings():
    assert harness.load_check("math:sqrt") is math.sqrt
    with pytest.raises(harness.FalsifierError, match="has no function 'nope'"):
        harness.load_check("math:nope")


def test_provenance_does_not_import_torch(monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    versions = provenance.versions()
    assert "torch" not in sys.modules
    assert set(versions) == {"python", "pv", "torch", "cuda"}


class _FakeCuda:
    def __init__(self, available):
        self.available = available

    def is_available(self):
        return self.available

    def current_device(self):
        return 0

    def get_device_name(self, index):
        return "Fake GPU 80GB"


class _FakeTorch:
    __version__ = "9.9.9"

    def __init__(self, available):
        self.cuda = _FakeCuda(available)
        self.version = type("v", (), {"cuda": "12.4"})()


@pytest.mark.parametrize("available", [False, True])
def test_cuda_probe_asks_torch(monkeypatch, available):
    """The real provenance.cuda_available() path, with a stand-in torch (importing the real one costs seconds)."""
    import sys

    monkeypatch.delenv("PV_FORCE_NO_CUDA", raising=False)
    monkeypatch.setitem(sys.modules, "torch", _FakeTorch(available))
    ok, reason = provenance.cuda_available()
    assert ok is available
    if available:
        assert provenance.device_name("cuda") == "Fake GPU 80GB"
        assert provenance.versions()["torch"] == "9.9.9" and provenance.versions()["cuda"] == "12.4"
        outcome = harness.falsify(lambda *, device: {"x": 2}, {}, "x > 1", "cuda")
        assert outcome.verdict == "PASS" and outcome.device_name == "Fake GPU 80GB"
    else:
        assert reason == "cuda requested but torch.cuda.is_available() is False"
        with pytest.raises(pytest.skip.Exception, match="torch.cuda.is_available\\(\\) is False — not evidence"):
            harness.falsify(lambda *, device: {"x": 2}, {}, "x > 1", "cuda")


def test_real_torch_probe_when_torch_is_already_loaded(monkeypatch):
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "cuda"):
        pytest.skip("torch not imported in this process; importing it here would cost seconds")
    monkeypatch.delenv("PV_FORCE_NO_CUDA", raising=False)
    ok, reason = provenance.cuda_available()
    assert ok == torch.cuda.is_available()
    assert provenance.versions()["torch"] == torch.__version__


def test_git_state_ignores_the_ledger_but_not_other_changes(tmp_path):
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    (repo / "evidence").mkdir(parents=True)
    (repo / "code.py").write_text("x = 1\n")
    (repo / "pyproject.toml").write_text("[tool.pv]\n")
    ledger_path = repo / "evidence" / "ledger.jsonl"
    ledger_path.write_text("")

    def git(*args):
        subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                       check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "init")

    def state():
        provenance.git_state.cache_clear()
        return provenance.git_state(repo, exclude=(str(ledger_path),))

    commit, dirty, source = state()
    assert len(commit) == 40 and dirty is False and source == "git"
    ledger_path.write_text('{"a": 1}\n')  # every run appends to the ledger: not "dirty"
    assert state() == (commit, False, "git")
    (repo / "new.py").write_text("")  # an untracked source file could change behaviour
    assert state() == (commit, True, "git")
    (repo / "new.py").unlink()
    (repo / "code.py").write_text("x = 2\n")
    assert state() == (commit, True, "git")
    (repo / "code.py").write_text("x = 1\n")
    # `pv run --ledger OUT/x.jsonl` after merging evidence into the committed ledger (a GPU
    # run): both ledgers are data; the plugin excludes the configured one and the one it writes
    (repo / "gpu.jsonl").write_text("")
    ledger_path.write_text('{"a": 1}\n{"b": 2}\n')
    provenance.git_state.cache_clear()
    assert provenance.git_state(repo, exclude=(str(repo / "gpu.jsonl"), str(ledger_path))) == (commit, False, "git")
    (repo / "gpu.jsonl").unlink()
    provenance.git_state.cache_clear()
    assert provenance.git_state(tmp_path / "nowhere") == (None, None, None)


def test_git_state_outside_git_can_be_told_the_commit(tmp_path, monkeypatch):
    provenance.git_state.cache_clear()
    monkeypatch.setenv("PV_GIT_COMMIT", "a" * 40)
    monkeypatch.setenv("PV_GIT_DIRTY", "0")
    assert provenance.git_state(tmp_path) == ("a" * 40, False, "PV_GIT_COMMIT")
    provenance.git_state.cache_clear()
    monkeypatch.setenv("PV_GIT_DIRTY", "1")
    assert provenance.git_state(tmp_path) == ("a" * 40, True, "PV_GIT_COMMIT")
    provenance.git_state.cache_clear()
    monkeypatch.delenv("PV_GIT_COMMIT")
    assert provenance.git_state(tmp_path) == (None, None, None)
    provenance.git_state.cache_clear()


def test_a_subject_fills_the_configured_parameter():
    seen = {}

    def check(*, device, checkpoint, batches):
        seen.update(checkpoint=checkpoint, batches=batches)
        return {"x": 0.5}

    outcome = harness.falsify(check, params={"batches": 2}, prediction="x < 1", device="cpu",
                              subject="tiny-trained", subject_param="checkpoint")
    assert seen == {"checkpoint": "tiny-trained", "batches": 2}
    assert outcome.subject == "tiny-trained" and outcome.verdict == "PASS"
    harness.falsify(check, params={"batches": 1}, prediction="x < 1", device="cpu",
                    subject="path:/data/my ckpt", subject_param="checkpoint")
    assert seen["checkpoint"] == "/data/my ckpt"  # a path subject: the check gets the directory


def test_params_may_not_also_set_the_subject_parameter():
    with pytest.raises(harness.FalsifierError, match="subjects fill it"):
        harness.falsify(lambda **kw: {"x": 0}, params={"checkpoint": "a"}, prediction="x < 1", device="cpu",
                        subject="b", subject_param="checkpoint")


def test_an_adhoc_subject_replaces_the_declared_ones_until_cleared():
    assert harness.subjects(["a", "b"]) == ["a", "b"]
    harness.set_adhoc_subject("path:/x")
    try:
        assert harness.subjects(["a", "b"]) == ["path:/x"]
    finally:
        harness.set_adhoc_subject(None)
    assert harness.subjects(["a"]) == ["a"]


def test_a_huge_integer_observation_is_falsified_and_its_record_can_be_written():
    """10**5000 is far past `x < 2`: a FAIL with margin -inf (not an OverflowError ERROR), and
    the outcome must serialise (json refuses ints over 4,300 digits; the plugin's report died)."""
    import json

    with pytest.raises(harness.Falsified, match="x < 2  ->  inf < 2"):
        harness.falsify(lambda *, device: {"x": 10**5000}, {}, "x < 2", "cpu")
    outcome = harness.take_outcome()
    assert outcome.verdict == "FAIL" and outcome.observations == {"x": math.inf}
    json.dumps(outcome.to_json())


def test_long_text_observations_are_cut_in_the_record():
    outcome = harness.falsify(lambda *, device: {"x": 1, "log": "a" * 10_000_000, "o": Huge()}, {}, "x < 2", "cpu")
    assert outcome.verdict == "PASS"
    assert len(outcome.observations["log"]) < 2 * harness.MAX_TEXT and "10,000,000 characters" in outcome.observations["log"]
    assert len(outcome.observations["o"]) < 2 * harness.MAX_TEXT


class Huge:
    def __repr__(self) -> str:
        return "z" * 1_000_000
