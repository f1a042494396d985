"""What a generated test calls: run the bound check, judge the prediction, explain a failure.

    falsify(check, params={...}, prediction="val_loss < 0.7 * ln(vocab_size)", device="cpu")

- the device is absent (cuda without `torch.cuda.is_available()`, or the check raised
  `DeviceUnavailable`)                                       -> pytest skip      -> SKIP
- the check raised, returned no observations, or the prediction
  could not be evaluated on them                             -> FalsifierError   -> ERROR
- the prediction is false                                    -> Falsified        -> FAIL
- the prediction holds                                       -> returns          -> PASS

A falsifier without `check:` calls `unbound(...)`, which always raises (ERROR), so an unbound
falsifier can never pass or skip. Each call creates one `pv.outcome.Outcome` and hands it to
pv's pytest plugin (`outcomes_to`), which carries it on the pytest item and writes it to the
ledger; a direct call keeps it for `take_outcome()`. The outcome says which code the check
exercised (`executed_code`, see pv.execution; pv.untracedbind for a timing check).

This module never imports torch; a check that needs it imports it itself.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import copy
import importlib
import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from pv import (codebind, execution, explain, expr, identity, mutation, provenance, timing,
                tolerance as tolerances, untracedbind, vacuity)
from pv.outcome import Outcome


class DeviceUnavailable(Exception):
    """Raised by a check (or the harness) when the requested device is absent: SKIP."""


class CapabilityMissing(Exception):
    """Raised by a check when the runtime under test lacks a capability it needs: SKIP naming
    it (the falsifier pack's pvpack.protocol.CapabilityMissing is one), never a discharge."""


class FalsifierError(Exception):
    """The falsifier could not execute: ERROR (counts as a failure, never a discharge)."""


class CheckTimedOut(FalsifierError):
    """The check ran past the workspace's time limit (`[tool.pv] check_timeout_s`): ERROR."""


class Unbound(FalsifierError):
    """The falsifier has no `check:`; nothing can falsify it."""


class Falsified(AssertionError):
    """The prediction was false on the observations: FAIL."""


# The outcome goes to whoever runs the test: pv's plugin sets a sink for the duration of one
# test's call (it puts the outcome on the pytest item). Without a sink (a direct call) it is
# kept for take_outcome().
_sink: contextvars.ContextVar[Callable[[Outcome], None] | None] = contextvars.ContextVar("pv_outcome_sink",
                                                                                         default=None)
_last: Outcome | None = None
# Set by pv.plugin from [tool.pv]: the packages whose modules bind a record, and where to find
# them. None: the check's own top-level package, found from the current directory.
_binding: tuple[tuple[str, ...], tuple[Path, ...]] | None = None
_mutants_package: str | None = None  # [tool.pv] mutants_module, set with the binding
# Set by pv.plugin for `--pv-subject path:DIR`: the ad-hoc subject that replaces every
# subject-taking falsifier's declared subjects for this session (pv.subjects).
_adhoc_subject: str | None = None


@contextlib.contextmanager
def outcomes_to(sink: Callable[[Outcome], None]) -> Iterator[None]:
    """Deliver every Outcome created inside the block to `sink` (once, when it is created)."""
    token = _sink.set(sink)
    try:
        yield
    finally:
        _sink.reset(token)


def take_outcome() -> Outcome | None:
    """The outcome of the latest falsify()/unbound() call made without a sink, once."""
    global _last
    outcome, _last = _last, None
    return outcome


def reset() -> None:
    global _last
    _last = None


def set_mutant(name: str | None, factory: Callable[[], Any] | None = None) -> None:
    """Wrap every following check call in a mutant's context (None to clear); pv.mutation keeps it."""
    mutation.set_run_mutant(name, factory)


def set_adhoc_subject(subject: str | None) -> None:
    """Run every subject-taking falsifier on this ad-hoc subject (`path:<dir>`), None to clear."""
    global _adhoc_subject
    _adhoc_subject = subject


def subjects(declared: list[str]) -> list[str]:
    """The subjects a generated test is parametrized by: the contract's, or the session's ad-hoc
    subject (`pv run --subject-path DIR`) instead. Called when the test module is imported, which
    pytest does after pv's plugin is configured."""
    return [_adhoc_subject] if _adhoc_subject is not None else list(declared)


_subjects = subjects  # falsifier_marks' own `subjects` argument shadows the function


def falsifier_marks(*, contract: str, contract_version: str) -> Callable[..., Callable[[Any], Any]]:
    """What a generated module declares once, `PV_FALSIFIER = falsifier_marks(contract=...,
    contract_version=...)`; then `@PV_FALSIFIER(falsifier, sha256=..., prediction=...,
    devices=[...])` above each test puts pv's `pv_falsifier` marker on it (the contract's and
    the falsifier's identity, which pv's plugin reads) and parametrizes it by device, and with
    `subjects=` also by subject: pytest runs it as test_<falsifier>[<device>] or
    test_<falsifier>[<device>-<subject>]."""
    import pytest

    def falsifier_test(falsifier: str, *, sha256: str, prediction: str, devices: list[str],
                       subjects: list[str] | None = None,
                       subject_sha256: Mapping[str, str] | None = None,
                       runtimes: list[str] | None = None) -> Callable[[Any], Any]:
        identity: dict[str, Any] = {"contract": contract, "contract_version": contract_version,
                                    "falsifier": falsifier, "sha256": sha256, "prediction": prediction}
        if subject_sha256 is not None:
            identity["subject_sha256"] = dict(subject_sha256)
        parametrize_subject = None if subjects is None else pytest.mark.parametrize("subject", _subjects(subjects))

        def mark(test: Any) -> Any:
            # applied innermost first, as stacked decorators would be: the device is the first
            # part of the test's id, the subject the second
            test = pytest.mark.parametrize("device", list(devices))(test)
            if parametrize_subject is not None:
                test = parametrize_subject(test)
            if runtimes is not None:  # the runtime is the id's last part
                test = pytest.mark.parametrize("runtime", list(runtimes))(test)
            return pytest.mark.pv_falsifier(**identity)(test)

        return mark

    return falsifier_test


def active_mutant() -> str | None:
    """The mutant this run wraps every check call in (pv.mutation owns it)."""
    return mutation.run_mutant()


def set_code_binding(packages: Iterable[str] | None, roots: Iterable[Path] = (), mutants: str | None = None) -> None:
    """Which packages' modules a record is bound to (None: the default), and the mutants package
    ([tool.pv] mutants_module), whose sibling planted-bug modules an untraced record binds
    without their bugs (pv.untracedbind; None: every module whole)."""
    global _binding, _mutants_package
    _binding = None if packages is None else (tuple(packages), tuple(Path(r) for r in roots))
    _mutants_package = mutants


def _record(outcome: Outcome) -> Outcome:
    global _last
    sink = _sink.get()
    if sink is None:
        _last = outcome
    else:
        sink(outcome)
    return outcome


def _start_modules(check: Callable[..., Any], also: Iterable[str] = ()) -> list[str] | None:
    """The modules whose closure a check can run: its own, `also` (a runtime adapter's) and the
    planted bug's; None when the check has no module."""
    module = getattr(check, "__module__", None)
    if not module:
        return None
    start = [module, *also]
    mutant_module = _mutant_module()
    if mutant_module:
        start.append(mutant_module)  # the planted bug's own code
    return start


def _mutant_module() -> str | None:
    factory = mutation.run_mutant_factory()
    return getattr(getattr(factory, "__wrapped__", factory), "__module__", None)


def _code_digests(check: Callable[..., Any], before: set[str]) -> dict[str, str] | None:
    """The digests of the code this check exercised (pv.codebind); None if it cannot be told."""
    start = _start_modules(check)
    return None if start is None else code_digests_of(start, before=before)


def _bound_packages(check: Callable[..., Any]) -> tuple[str, ...]:
    if _binding is not None:
        return _binding[0]
    module = getattr(check, "__module__", None) or ""
    return (module.split(".")[0],) if module else ()


def _bind_executed(outcome: Outcome, run: execution.Run | None, check: Callable[..., Any], before: set[str]) -> None:
    """Bind the outcome to the units the check executed (pv.execution); without a collection
    (it never started), to the modules it imports, as before."""
    if run is None:
        outcome.code_digests = _code_digests(check, before)
        return
    root = _binding[1][0] if _binding is not None and _binding[1] else Path.cwd()
    try:
        bound = execution.bind(run, _bound_packages(check), root)
    except (OSError, ValueError, RecursionError) as exc:  # never lose the verdict over its binding
        outcome.executed_code, outcome.binding_problems = {}, [f"binding failed: {type(exc).__name__}: {exc}"]
        return
    outcome.executed_code, outcome.code_origins = bound.executed, bound.origins
    outcome.binding_problems = bound.problems or None


def _bind_untraced(outcome: Outcome, check: Callable[..., Any], before: set[str], adapter: Any) -> None:
    """A timing check ran untraced (pv.timing): bind it to every unit of the modules it can run
    (pv.untracedbind), as a traced record's `executed_code`; `binding: modules` says so."""
    outcome.binding = timing.UNTRACED_BINDING
    start = _start_modules(check, [type(adapter).__module__] if adapter is not None else [])
    if start is None:
        outcome.executed_code = {}
        return
    packages, roots = _packages_and_roots(start)
    root = _binding[1][0] if _binding is not None and _binding[1] else Path.cwd()
    new = [n for n in sys.modules if n not in before and codebind.in_packages(n, packages)]
    try:
        bound = untracedbind.bind(start, packages, roots, root, also=new, mutants=_mutants_package,
                                  active=active_mutant(), active_module=_mutant_module())
    except (OSError, ValueError, RecursionError) as exc:  # never lose the verdict over its binding
        outcome.executed_code, outcome.binding_problems = {}, [f"binding failed: {type(exc).__name__}: {exc}"]
        return
    outcome.executed_code, outcome.code_origins = bound.executed, bound.origins
    outcome.binding_problems = bound.problems or None


def _packages_and_roots(start: list[str]) -> tuple[tuple[str, ...], list[Path]]:
    """The bound packages and where their modules are found (the default: `start`'s top package)."""
    if _binding is None:
        return (start[0].split(".")[0],), codebind.search_roots(Path.cwd())
    packages, given = _binding
    return packages, [*given, *codebind.search_roots(Path.cwd())]


def code_digests_of(start: list[str], *, before: set[str] | None = None,
                    exclude_start: bool = False) -> dict[str, str] | None:
    """Digests of `start` and the bound modules they import (plus, with `before`, those first
    imported since). `exclude_start`: bind only what they import (a generated test module,
    which is no code under test). None when nothing could be bound."""
    packages, roots = _packages_and_roots(start)
    new = [] if before is None else [n for n in sys.modules if n not in before and codebind.in_packages(n, packages)]
    try:
        digests = codebind.bind(start, packages, roots, also=new)
    except (OSError, ValueError, RecursionError):  # never lose the verdict over its binding
        return None
    if exclude_start:
        digests = {k: v for k, v in digests.items() if k not in start or codebind.in_packages(k, packages)}
    return digests or None


# --- helpers the generated tests and the plugin use ------------------------------------------


def load_check(binding: str) -> Callable[..., Any]:
    """Resolve `package.module:function` (for bindings that are not plain identifiers)."""
    module_name, _, attr = binding.partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise FalsifierError(f"check {binding!r}: module {module_name!r} has no function {attr!r}") from None


def seed_of(params: Mapping[str, Any]) -> int | None:
    seed = params.get("seed")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


# What a record keeps of one observation. The ledger is committed and read whole by every
# `pv status`: a check that returns a 50 MB string or a 5,000-digit integer (which json cannot
# even write: Python caps int-to-text at 4,300 digits) must not make a record of that size.
MAX_TEXT = 1_000
MAX_INT_DIGITS = 300


def _short(text: str) -> str:
    return text if len(text) <= MAX_TEXT else f"{text[:MAX_TEXT]}… ({len(text):,} characters)"


def plain(value: Any) -> Any:
    """An observation as JSON-friendly data (tensors/numpy scalars via .item()), bounded in size:
    long text is cut, an integer of more than MAX_INT_DIGITS digits becomes a float (±inf past
    float's range). Judging uses the check's own values; this is only what the record keeps."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_DIGITS * 3.33:
        return expr.to_float(value)
    if isinstance(value, str):
        return _short(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return plain(item())
        except Exception:  # noqa: BLE001 - a multi-element tensor: keep its text
            pass
    return _short(repr(value))


def _fmt(value: Any) -> str:
    value = plain(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if isinstance(value, float):
        return f"{value:.6g}"
    return repr(value) if isinstance(value, str) else str(value)


def explain_bound(prediction: str, observations: Mapping[str, Any]) -> list[str]:
    """Each comparison of the prediction with both sides evaluated, e.g.
    `val_loss < 0.7 * ln(vocab_size)  ->  18.55 < 4.852`."""
    try:
        parsed = expr.parse(prediction)
    except expr.ExprError:
        return []
    lines = []
    for node in ast.walk(parsed.tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        values = []
        for operand in operands:
            sub = expr.Expression(text=ast.unparse(operand), tree=ast.Expression(body=operand))
            try:
                values.append(_fmt(sub.evaluate(dict(observations))))
            except (expr.EvalError, TypeError, ValueError, ArithmeticError):
                values.append("?")
        symbols = [expr._SYMBOL[type(op)] for op in node.ops]  # noqa: SLF001 - same package
        evaluated = values[0] + "".join(f" {s} {v}" for s, v in zip(symbols, values[1:]))
        lines.append(f"{ast.unparse(node)}  ->  {evaluated}")
    return lines


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    filename = last.filename
    try:
        relative = os.path.relpath(filename)
        if not relative.startswith(".."):
            filename = relative
    except ValueError:
        pass
    return f" (at {filename}:{last.lineno} in {last.name})"


# --- the two entry points of a generated test ------------------------------------------------


def falsify(
    check: Callable[..., Any],
    params: Mapping[str, Any],
    prediction: str,
    device: str,
    tolerance: Mapping[str, Any] | None = None,
    *,
    falsifier: str | None = None,
    if_fails: str = "",
    subject: str | None = None,
    subject_param: str = "subject",
    runtime: str | None = None,
    timing_observations: list[str] | None = None,
) -> Outcome:
    """Call `check(device=..., **params)`, judge `prediction` on what it observed. With a
    `subject`, the check also receives it as `subject_param` (the directory of a `path:`
    subject, pv.subjects.param_value). With `timing_observations`, the check runs untraced and
    its record is bound to every unit of the modules it can run (pv.timing, pv.untracedbind).

    Returns the PASS outcome; raises pytest's skip (SKIP), Falsified (FAIL) or FalsifierError
    (ERROR) otherwise. Every path leaves its Outcome for take_outcome().
    """
    import pytest

    reset()
    params = dict(params)
    mutant = active_mutant()
    outcome = _record(Outcome(falsifier=falsifier, device=device, prediction=prediction, verdict="ERROR",
                              seed=seed_of(params), mutant=mutant, subject=subject, judged_params=copy.deepcopy(params),
                              judged_tolerance=copy.deepcopy(identity.tolerance_numbers(tolerance)), runtime=runtime))
    label = (f"{falsifier or 'falsifier'} on {device}" + (f" with subject {subject}" if subject else "")
             + (f" on runtime {runtime}" if runtime else ""))

    if device == "cuda":
        available, reason = provenance.cuda_available()
        if not available:
            outcome.verdict, outcome.message = "SKIP", f"device absent: {reason}"
            pytest.skip(f"{label}: {outcome.message} — not evidence")
    elif device != "cpu":
        outcome.message = f"unknown device {device!r}"
        raise FalsifierError(f"{label}: {outcome.message}")

    outcome.device_name = provenance.device_name(device)
    kwargs: dict[str, Any] = dict(params)
    if "device" in kwargs:
        outcome.message = "params must not set 'device' (the harness passes it)"
        raise FalsifierError(f"{label}: {outcome.message}")
    kwargs["device"] = device
    if subject is not None:
        from pv.subjects import param_value

        if subject_param in kwargs:
            outcome.message = f"params must not set {subject_param!r} (the falsifier's subjects fill it)"
            raise FalsifierError(f"{label}: {outcome.message}")
        kwargs[_subject_argument(check, subject_param)] = param_value(subject)
    if runtime is not None:
        from pv import runtimes

        if runtimes.RUNTIME_PARAM in kwargs:
            outcome.message = "params must not set 'runtime' (the falsifier's runtimes fill it)"
            raise FalsifierError(f"{label}: {outcome.message}")
        try:
            kwargs[runtimes.RUNTIME_PARAM] = runtimes.adapter(runtime)
            outcome.runtime_version = runtimes.version(runtime)
            outcome.runtime_binding = runtimes.binding_of(runtime)
        except runtimes.RuntimeUnavailable as exc:
            outcome.message = str(exc)
            raise FalsifierError(f"{label}: {outcome.message}") from None
    if tolerances.wants_tolerance(check):
        try:
            kwargs["tolerance"] = tolerances.merged(tolerance)
            outcome.tolerance_table = copy.deepcopy(kwargs["tolerance"])
        except tolerances.ToleranceError as exc:
            outcome.message = f"bad tolerance: {exc}"
            raise FalsifierError(f"{label}: {outcome.message}") from None

    if not callable(check):  # `f = 5` bound by `check:` (pv validate: PV312)
        outcome.message = f"the check is {type(check).__name__}, not a function; bind `check:` to a def"
        raise FalsifierError(f"{label}: {outcome.message}")

    vacuous = vacuity.cannot_fail(prediction)
    if vacuous:
        outcome.message = f"prediction {prediction!r} cannot fail: {vacuous}"
        raise FalsifierError(f"{label}: {outcome.message}")

    before = set(sys.modules)
    start = time.perf_counter()
    run = None
    collector = timing.untraced() if timing_observations else execution.collecting(_bound_packages(check))
    try:
        with collector as run, mutation.around_check(tuple(_bound_packages(check))):
            observations = check(**kwargs)
        outcome.planted_at = mutation.last_seams() if mutant else None
    except DeviceUnavailable as exc:
        outcome.verdict, outcome.message = "SKIP", f"device absent: {exc}"
        pytest.skip(f"{label}: {outcome.message} — not evidence")
    except CapabilityMissing as exc:
        outcome.verdict, outcome.message = "SKIP", f"capability missing: {exc}"
        pytest.skip(f"{label}: {outcome.message} — not evidence")
    except Exception as exc:  # noqa: BLE001 - any failure to measure is an ERROR
        outcome.message = f"check raised {type(exc).__name__}: {exc}{_where(exc)}"
        raise FalsifierError(f"{label}: {outcome.message}") from exc
    finally:  # an ERROR or a SKIP is evidence about this code too
        outcome.duration_s = time.perf_counter() - start
        if timing_observations:
            _bind_untraced(outcome, check, before, kwargs.get("runtime") if runtime is not None else None)
        else:
            _bind_executed(outcome, run, check, before)

    if not isinstance(observations, Mapping) or not all(isinstance(k, str) for k in observations):
        outcome.message = (f"check returned {type(observations).__name__}, not a mapping of named "
                           "observations")
        raise FalsifierError(f"{label}: {outcome.message}")
    outcome.observations = {k: plain(v) for k, v in observations.items()}

    try:
        judgement = expr.judge(prediction, dict(observations))
    except (expr.ExprError, expr.EvalError, TypeError, ArithmeticError) as exc:
        outcome.message = f"cannot evaluate prediction {prediction!r}: {exc}"
        raise FalsifierError(f"{label}: {outcome.message}") from None
    margin = judgement.margin
    outcome.margin = margin if margin is None or math.isfinite(margin) else None

    if judgement.holds:
        outcome.verdict = "PASS"
        return outcome

    observed = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(outcome.observations.items()))
    lines = [f"FALSIFIED {label}: prediction `{prediction}` is false"]
    lines.append(f"  observed: {observed or '(nothing)'}")
    lines += explain.failure_lines(prediction, observations, margin)
    if mutant:
        lines.append(f"  mutant:   {mutant} (killed)")
    if if_fails:
        lines.append(f"  if it fails: {if_fails}")
    outcome.verdict = "FAIL"
    outcome.message = "\n".join(lines)
    raise Falsified(outcome.message)


def _subject_argument(check: Callable[..., Any], subject_param: str) -> str:
    """The parameter a subject fills: `subject_param`, or `subject` for a check that takes no
    parameter of the project's name but one called `subject` (the falsifier pack's checks)."""
    import inspect

    try:
        parameters = inspect.signature(check).parameters
    except (TypeError, ValueError):
        return subject_param
    return "subject" if subject_param not in parameters and "subject" in parameters else subject_param


def unbound(falsifier: str, device: str = "cpu", prediction: str = "") -> None:
    """The test of a falsifier without `check:` — always an ERROR, never a pass or a skip."""
    reset()
    message = (f"unbound falsifier {falsifier}: the contract gives no `check:`, so nothing can "
               "falsify it yet; bind it to a function in an allowed check package")
    _record(Outcome(falsifier=falsifier, device=device, prediction=prediction, verdict="ERROR",
                    message=message, mutant=active_mutant()))
    raise Unbound(message)
