"""pv's pytest plugin (entry point `pytest11: pv`): turns falsifier tests into ledger records.

Only tests marked `@pytest.mark.pv_falsifier(...)` (what `pv generate` writes) are touched;
any other test runs as usual. For each falsifier test the plugin

- maps the outcome to a verdict: prediction false -> FAIL; the check raised, returned no
  observations, the prediction could not be evaluated, or the falsifier is unbound -> ERROR;
  the device is absent -> SKIP (with the reason). ERROR and SKIP are never discharges;
- appends one record to the JSON Lines ledger at once (pv.ledger.append takes a lock, so
  pytest-xdist workers each append their own records safely);
- carries the test's one `pv.outcome.Outcome` (created by the harness) on the item
  (`item.stash[OUTCOME]`), completes it from the marker, and turns it into the record once;
- reports the outcome to the controller (via `report.user_properties`) so that `--pv-report`
  streams one JSON line per finished falsifier; `pv run` passes a pipe there and reads it.

Options: --pv-ledger PATH, --pv-no-ledger, --pv-device cpu|cuda|auto, --pv-mutant NAME,
--pv-subject NAME|path:DIR, --pv-run-id ID, --pv-report PATH. At start the ledger is checked: torn or malformed lines are
reported as a warning (never dropped, never allowed to corrupt later records).

This module is imported by every pytest run in an environment that has pv installed, so it
imports nothing heavy at module level.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

MARKER = "pv_falsifier"
PROPERTY = "pv_outcome"
DEVICE_CHOICES = ("cpu", "cuda", "auto")


class _State:
    def __init__(self, config: pytest.Config):
        self.config = config
        opt = config.option
        self.is_worker = hasattr(config, "workerinput")
        worker_input = getattr(config, "workerinput", {}) or {}
        self.run_id: str = worker_input.get("pv_run_id") or opt.pv_run_id or uuid.uuid4().hex
        self.device: str = opt.pv_device
        self.mutant: str | None = opt.pv_mutant
        self.subject: str | None = opt.pv_subject
        self.subject_digest: str | None = None  # of an ad-hoc `path:` subject (pv.subjects)
        base = Path(config.invocation_params.dir)
        self.no_ledger: bool = bool(opt.pv_no_ledger)
        self.explicit_ledger: Path | None = (base / opt.pv_ledger).resolve() if opt.pv_ledger else None
        # Not resolved: `pv run` passes /dev/fd/N, a link to its pipe that must be opened as is.
        self.report_path: Path | None = Path(os.path.abspath(base / opt.pv_report)) if opt.pv_report else None
        self._workspace: Any = None
        self._report_handle: Any = None
        self._bound = False
        self.outcomes: list[dict[str, Any]] = []
        # Generated modules as collected, read before pytest imports them (pv.identity digests
        # the test that ran from this text, which the module's own code cannot rewrite).
        self.sources: dict[str, str] = {}
        self.unrendered: list[str] | None = None  # problems of generated modules not rendered now (pv.identity)
        # `--pv-cells`: the (contract, falsifier, device, subject) cells `pv run` selected; only
        # their tests record evidence. None: every generated test of the workspace may.
        self.cells: set[tuple[Any, ...]] | None = _read_cells(opt.pv_cells)
        self.not_recorded: list[str] = []  # falsifier tests whose outcome is no evidence, and why
        self.ledger_warnings: list[str] = []
        self.written = 0

    # The workspace is resolved only when a falsifier test needs it, so an unrelated pytest
    # run never fails because of pv's settings.
    def workspace(self) -> Any:
        if self._workspace is None:
            from pv.config import load_workspace

            # The workspace you run from (pv run runs pytest in the workspace root); pytest's
            # rootdir can be a parent repository's when workspaces nest.
            self._workspace = load_workspace(Path(self.config.invocation_params.dir))
        return self._workspace

    def ledger_path(self) -> Path | None:
        if self.no_ledger:
            return None
        return self.explicit_ledger or self.workspace().ledger

    def report(self, event: dict[str, Any]) -> None:
        """One JSON line per event to --pv-report (a file, or the pipe `pv run` reads)."""
        if self.report_path is None or self.is_worker:
            return
        if self._report_handle is None:
            self._report_handle = open(self.report_path, "w", encoding="utf-8")
        self._report_handle.write(json.dumps(event, sort_keys=True, default=str) + "\n")
        self._report_handle.flush()

    def close_report(self) -> None:
        if self._report_handle is not None:
            self._report_handle.close()
            self._report_handle = None

    def bind_code(self) -> None:
        """Tell the harness which packages' modules bind a record ([tool.pv]), once."""
        if self._bound:
            return
        self._bound = True
        from pv import harness
        from pv.config import ConfigError, find_pyproject

        try:
            if find_pyproject(Path(self.config.invocation_params.dir)) is None:
                return
            ws = self.workspace()
        except ConfigError:
            return
        harness.set_code_binding(ws.bound_packages, [ws.root], ws.mutants_module)
        from pv import execution

        execution.set_untraced_imports(ws.untraced_imports)


_STATE = pytest.StashKey[_State]()
OUTCOME = pytest.StashKey[Any]()  # the pv.outcome.Outcome of a falsifier test, on its item
# pytest_runtest_logreport gets no config; the session's config is kept here.
_CONFIG: dict[str, pytest.Config] = {}


def _state(config: pytest.Config) -> _State:
    return config.stash[_STATE]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pv", "pv: falsifier evidence")
    group.addoption("--pv-ledger", metavar="PATH", default=None,
                    help="ledger to append falsifier records to (default: [tool.pv] ledger)")
    group.addoption("--pv-no-ledger", action="store_true", default=False,
                    help="do not record falsifier outcomes (a dry run)")
    group.addoption("--pv-device", choices=DEVICE_CHOICES, default="auto",
                    help="run only the falsifier tests of this device (auto: all; absent devices SKIP)")
    group.addoption("--pv-mutant", metavar="NAME", default=None,
                    help="run every falsifier check under this planted bug ([tool.pv] mutants_module)")
    group.addoption("--pv-subject", metavar="NAME", default=None,
                    help="run only the falsifier tests of this subject; `path:DIR` runs every subject-taking "
                         "falsifier on the HF checkpoint in DIR instead of its declared subjects")
    group.addoption("--pv-run-id", metavar="ID", default=None,
                    help="run id stored in every record (default: a fresh one per session)")
    group.addoption("--pv-report", metavar="PATH", default=None,
                    help="write one JSON line per finished falsifier test (for `pv run`)")
    group.addoption("--pv-cells", metavar="JSON", default=None,
                    help="a JSON list of [contract, falsifier, device, subject]: record only these (for `pv run`)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(contract, contract_version, falsifier, sha256, device, prediction): "
        "a test generated by `pv generate` from a contract's falsifier",
    )
    state = _State(config)
    config.stash[_STATE] = state
    _CONFIG["config"] = config
    _put_project_root_on_path(config)
    if state.mutant:
        _activate_mutant(state)
    _activate_subject(state)
    if state.report_path is not None and not state.is_worker:
        state.report_path.parent.mkdir(parents=True, exist_ok=True)
        state.report({"event": "start", "run_id": state.run_id, "device": state.device,
                      "mutant": state.mutant, "pid": os.getpid()})
    if not state.is_worker:
        _check_ledger(state)


def _read_cells(text: str | None) -> set[tuple[Any, ...]] | None:
    if text is None:
        return None
    try:
        return {tuple(cell) for cell in json.loads(text)}
    except (ValueError, TypeError) as exc:
        raise pytest.UsageError(f"--pv-cells: not a JSON list of [contract, falsifier, device, subject]: {exc}") from None


def pytest_collect_file(file_path: Path, parent: Any) -> None:
    """Keep the text of every generated module as it is collected, before it is imported."""
    if file_path.suffix != ".py":
        return None
    from pv.codegen import HEADER_PREFIX

    try:
        text = file_path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if text.startswith(HEADER_PREFIX):
        _state(parent.config).sources[str(file_path.resolve())] = text
    return None


def _put_project_root_on_path(config: pytest.Config) -> None:
    """Generated tests import the project's check package (`from <package>.checks import ...`);
    plain `pytest generated_tests/` puts only the test's folder on sys.path, so the pv project
    root (the folder of the pyproject.toml with [tool.pv]) goes first, as `pv run` has it.
    Outside a pv project, or with unreadable settings, nothing changes (pytest runs as usual)."""
    import sys

    from pv.config import ConfigError, find_pyproject

    try:
        pyproject = find_pyproject(Path(config.invocation_params.dir))
    except (ConfigError, OSError):
        return
    if pyproject is not None and str(pyproject.parent) not in sys.path:
        sys.path.insert(0, str(pyproject.parent))


def pytest_unconfigure(config: pytest.Config) -> None:
    _CONFIG.pop("config", None)
    state = config.stash.get(_STATE, None)
    if state is not None:
        state.close_report()
    if state is not None and state.mutant:
        from pv import harness

        harness.set_mutant(None)
    if state is not None and state.subject_digest is not None:
        from pv import harness

        harness.set_adhoc_subject(None)


def _activate_subject(state: _State) -> None:
    """`--pv-subject path:DIR`: check the checkpoint directory, digest it once, and make every
    subject-taking test run on it (pv.harness.subjects, read when the test modules import)."""
    from pv import subjects

    if not subjects.is_path_subject(state.subject):
        return
    try:
        found = subjects.path_subject(state.subject)
    except subjects.SubjectError as exc:
        raise pytest.UsageError(f"--pv-subject: {exc}") from None
    from pv import harness

    state.subject, state.subject_digest = found.name, found.digest
    harness.set_adhoc_subject(found.name)


def _activate_mutant(state: _State) -> None:
    from pv import harness, mutation
    from pv.config import ConfigError

    try:
        registry = mutation.load_registry(state.workspace())
        chosen = mutation.get(registry, state.mutant)
    except (mutation.MutationError, ConfigError) as exc:
        raise pytest.UsageError(f"--pv-mutant: {exc}") from None
    harness.set_mutant(chosen.name, chosen.factory)


def _check_ledger(state: _State) -> None:
    """Warn about torn or malformed ledger lines before adding to the ledger."""
    if state.no_ledger:
        return
    path = state.explicit_ledger
    if path is None:
        from pv.config import ConfigError, find_pyproject

        try:
            if find_pyproject(Path(state.config.invocation_params.dir)) is None:
                return  # not a pv workspace: nothing of ours to check
            path = state.workspace().ledger
        except ConfigError:
            return
    if not path.exists():
        return
    from pv import ledger

    problems = ledger.read(path).problems
    if not problems:
        return
    shown = "; ".join(f"line {p.line}: {p.message}" for p in problems[:5])
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    message = (f"pv: ledger {path} has {len(problems)} bad line(s): {shown}{more}. They are kept as they "
               "are and new records go on fresh lines after them; run `pv ledger check`.")
    state.ledger_warnings.append(message)
    state.config.issue_config_time_warning(pytest.PytestWarning(message), stacklevel=2)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: every worker records the controller's run id."""
    node.workerinput["pv_run_id"] = _state(node.config).run_id


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    state = _state(config)
    if state.device == "auto" and state.subject is None:
        return
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker(MARKER)
        if marker is not None and (
                (state.device != "auto" and marker_device(item, marker) != state.device)
                or (state.subject is not None and marker_subject(item) != state.subject)):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def marker_device(item: pytest.Item, marker: pytest.Mark) -> str | None:
    """The device of a falsifier test: the marker's `device`, else the test's `device`
    parameter (pv generate writes one function per falsifier, parametrized by device)."""
    device = marker.kwargs.get("device")
    if device is None:
        callspec = getattr(item, "callspec", None)
        device = callspec.params.get("device") if callspec is not None else None
    return device


def marker_subject(item: pytest.Item) -> str | None:
    """The subject of a falsifier test: its `subject` parameter (None: a falsifier without
    subjects)."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("subject") if callspec is not None else None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker(MARKER) is not None:
        from pv import harness

        harness.reset()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Carry the Outcome the harness creates during this test on the item itself."""
    if item.get_closest_marker(MARKER) is None:
        return (yield)
    from pv import harness

    _state(item.config).bind_code()

    def keep(outcome: Any) -> None:
        item.stash[OUTCOME] = outcome

    limit = _state(item.config).workspace().check_timeout_s
    with harness.outcomes_to(keep), _time_limit(limit, item.nodeid):
        return (yield)


@contextlib.contextmanager
def _time_limit(seconds: float, label: str) -> Iterator[None]:
    """Raise harness.CheckTimedOut in the test after `seconds` (SIGALRM; where there is none,
    or off the main thread, no limit). Python code is interrupted at once; a call stuck inside
    one C function is interrupted when it returns to Python."""
    import signal
    import threading

    if seconds <= 0 or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return
    from pv.harness import CheckTimedOut

    def expire(signum: int, frame: Any) -> None:
        raise CheckTimedOut(f"{label} ran past its {seconds:g} s limit ([tool.pv] check_timeout_s, or "
                            "PV_CHECK_TIMEOUT) and was stopped: a stopped check is an ERROR, never a pass")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _verdict(call: pytest.CallInfo[Any], report: pytest.TestReport, outcome: Any) -> tuple[str, str]:
    """(verdict, message) for one phase of a falsifier test."""
    from pv import harness

    if call.excinfo is None:
        if outcome.verdict == "PASS":
            return "PASS", ""
        return "ERROR", "the test finished without a verdict (it never called pv.harness.falsify)"
    exc = call.excinfo.value
    if report.skipped or isinstance(exc, pytest.skip.Exception):
        return "SKIP", outcome.message or getattr(exc, "msg", None) or str(exc)
    if isinstance(exc, harness.Falsified):
        return "FAIL", str(exc)
    if outcome.message and isinstance(exc, harness.FalsifierError):
        return "ERROR", outcome.message
    return "ERROR", f"{type(exc).__name__}: {exc}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]):
    report = yield
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return report
    # Setup that passed waits for the call; teardown adds nothing (the verdict is already in).
    if call.when == "teardown" or (call.when == "setup" and report.passed):
        return report
    from pv.outcome import Outcome

    state = _state(item.config)
    outcome = item.stash.get(OUTCOME, None) if call.when == "call" else None
    if outcome is None:  # setup failed, or the test never reached the harness
        outcome = Outcome(falsifier=marker.kwargs.get("falsifier"), device=marker_device(item, marker) or "?",
                          prediction="", duration_s=call.duration)
    kwargs = dict(marker.kwargs, device=marker_device(item, marker), subject=marker_subject(item),
                  runtime=getattr(getattr(item, "callspec", None), "params", {}).get("runtime"))
    outcome.identify(kwargs, item.nodeid)
    refused = _identify_test(state, item, outcome)
    if refused is not None:  # not the falsifier's own generated test, or not selected: no evidence
        state.not_recorded.append(f"{item.nodeid}: {refused}")
        return report
    outcome.mutant = state.mutant
    if state.subject_digest is not None and outcome.subject == state.subject:
        outcome.subject_digest = state.subject_digest
    unbound = call.excinfo is not None and type(call.excinfo.value).__name__ == "Unbound"
    if outcome.code_digests is None and outcome.executed_code is None and not unbound:
        # The check never ran (the device is absent, its module does not import, a fixture
        # broke): bind the record to what the test module imports, so that this SKIP or ERROR
        # goes stale, like any other evidence, when that code changes.
        from pv import harness

        state.bind_code()
        module = getattr(getattr(item, "module", None), "__name__", None)
        outcome.code_digests = outcome.code_digests or (
            harness.code_digests_of([module], exclude_start=True) if module else None)
    outcome.verdict, outcome.message = _verdict(call, report, outcome)
    outcome.duration_s = outcome.duration_s or call.duration
    if outcome.verdict == "ERROR" and report.passed:
        report.outcome = "failed"
        report.longrepr = f"pv: {outcome.message}"
    try:
        _record(state, outcome)
    except Exception as exc:  # noqa: BLE001 - evidence that cannot be written must be loud
        report.outcome = "failed"
        report.longrepr = f"pv: could not write the ledger record ({type(exc).__name__}: {exc})"
        outcome.message = (outcome.message + "\n" if outcome.message else "") + str(report.longrepr)
    report.user_properties.append((PROPERTY, outcome.to_json()))
    return report


def _identify_test(state: _State, item: pytest.Item, outcome: Any) -> str | None:
    """Fill in the test that ran (pv.identity); why its outcome is not evidence, or None."""
    from pv import identity
    from pv.config import ConfigError

    cell = (outcome.contract, outcome.falsifier, outcome.device, outcome.subject)
    if state.cells is not None and cell not in state.cells:
        return "not a falsifier this `pv run` selected"
    try:
        ws = state.workspace()
    except ConfigError as exc:
        return f"no pv workspace to record it in ({exc})"
    path = Path(str(item.path))
    function = getattr(item, "originalname", None) or item.name
    source = state.sources.get(str(path.resolve()))
    outcome.test_node, outcome.test_sha256, outcome.test_templates, refused = identity.ran_test(
        ws, path, item.name, function, outcome.contract, outcome.falsifier, source)
    return refused


def _record(state: _State, outcome: Any) -> None:
    """Turn the outcome into its ledger record (the only place a test's record is made)."""
    path = state.ledger_path()
    if path is None:
        return
    from pv import ledger, provenance

    ws = state.workspace()
    root = ws.root
    from pv import identity, sessionbind

    # the workspace's other code this session loaded (a conftest.py, a parent package's __init__)
    outcome.session_code = sessionbind.loaded(root, ws.bound_packages, ws.generated_dir) or None
    if state.unrendered is None:  # every module is collected before the first test runs
        state.unrendered = identity.unrendered_modules(ws, state.sources)
    if state.unrendered:  # another contract's generated module, edited by hand, ran beside this test
        outcome.binding_problems = sorted({*(outcome.binding_problems or ()), *state.unrendered})
    # The ledgers are data, not code: appending evidence (or having merged some) never makes
    # the tree the evidence ran on "dirty".
    git = provenance.git_state(Path(root), exclude=tuple(dict.fromkeys((str(path), str(state.workspace().ledger)))))
    record = outcome.to_record(
        run_id=state.run_id, git_commit=git.commit, git_commit_source=git.source, git_dirty=git.dirty,
        versions=provenance.versions(), host=provenance.host(), time_utc=provenance.utc_now(),
    )
    ledger.append(path, [record])
    state.written += 1
    outcome.record_id, outcome.ledger = record.record_id, str(path)
    outcome.observations, outcome.margin = record.observations, record.margin


def _pv_info(report: pytest.TestReport) -> dict[str, Any] | None:
    for key, value in getattr(report, "user_properties", ()):
        if key == PROPERTY:
            return value
    return None


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config):
    info = _pv_info(report)
    if info is None or report.when != "call":
        return None
    if info["verdict"] == "ERROR" and report.failed:
        return "error", "E", ("ERROR", {"red": True})
    if info["verdict"] == "FAIL":
        return "failed", "F", ("FALSIFIED", {"red": True})
    return None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    info = _pv_info(report)
    if info is None:
        return
    config = _CONFIG.get("config")
    if config is None:
        return
    state = _state(config)
    if state.is_worker:
        return
    state.outcomes.append(info)
    state.report({"event": "outcome", **info})


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = _state(session.config)
    counts = _counts(state.outcomes)
    state.report({"event": "finish", "exitstatus": int(exitstatus), "counts": counts, "run_id": state.run_id})


def _counts(outcomes: list[dict[str, Any]]) -> dict[str, int]:
    counts = {"PASS": 0, "FAIL": 0, "ERROR": 0, "SKIP": 0}
    for info in outcomes:
        counts[info["verdict"]] = counts.get(info["verdict"], 0) + 1
    return counts


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = _state(config)
    if state.is_worker or (not state.outcomes and not state.ledger_warnings and not state.not_recorded):
        return
    tr = terminalreporter
    tr.section("pv falsifiers")
    for warning in state.ledger_warnings:
        tr.write_line(warning, yellow=True, bold=True)
    for line in state.not_recorded:
        tr.write_line(f"not evidence, not recorded: {line}", yellow=True, bold=True)
    if not state.outcomes:
        return
    counts = _counts(state.outcomes)
    parts = [f"{counts['PASS']} passed", f"{counts['FAIL']} falsified", f"{counts['ERROR']} errored"]
    tr.write_line(", ".join(parts) + (f" (under mutant {state.mutant})" if state.mutant else ""))
    if counts["SKIP"]:
        tr.write_line(f"{counts['SKIP']} skipped — not evidence (a SKIP never discharges a falsifier)",
                      yellow=True, bold=True)
    recorded = sum(1 for info in state.outcomes if info.get("record_id"))
    ledgers = sorted({info["ledger"] for info in state.outcomes if info.get("ledger")})
    if ledgers:
        tr.write_line(f"{recorded} record(s) appended to {', '.join(ledgers)} (run {state.run_id})")
    elif state.ledger_path() is not None:  # every write failed: each test says why
        tr.write_line(f"no record could be written to {state.ledger_path()}", red=True, bold=True)
    else:
        tr.write_line("no ledger records written (--pv-no-ledger)")
