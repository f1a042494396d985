"""pv.automutate.engine's judgement of one mutant's process: which ERROR is the mutant's and which
is the shared machine's (several mutant processes at once, -j > 1)."""

from __future__ import annotations

from pv.automutate.engine import ProcessResult, classify, shared_machine_artifact

TIMING = {"FALSIFY-PERF-HF-001"}


def process(*verdicts, **fields) -> ProcessResult:
    return ProcessResult(verdicts=list(verdicts), **fields)


def test_a_timing_falsifiers_error_with_several_mutants_at_once_is_the_machines():
    proc = process(("FALSIFY-PERF-HF-001", "ERROR", "UnstableMeasurement: the 5 repeats range over 40%"),
                   ("FALSIFY-OTHER-001", "PASS", ""))
    assert classify(proc)[0] == "ERROR"
    why = shared_machine_artifact(proc, TIMING, jobs=3)
    assert why is not None and "FALSIFY-PERF-HF-001" in why and "3 mutant processes" in why


def test_an_out_of_memory_error_of_any_falsifier_with_several_at_once_is_the_machines():
    proc = process(("FALSIFY-KERNEL-001", "ERROR", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"))
    assert shared_machine_artifact(proc, TIMING, jobs=2) is not None


def test_the_mutant_keeps_what_is_its_own():
    timing_error = ("FALSIFY-PERF-HF-001", "ERROR", "UnstableMeasurement")
    # alone on the machine: an ERROR is the mutant's
    assert shared_machine_artifact(process(timing_error), TIMING, jobs=1) is None
    # another falsifier's ordinary error beside it: the mutant's
    assert shared_machine_artifact(process(timing_error, ("FALSIFY-X-001", "ERROR", "KeyError: 'w'")), TIMING,
                                   jobs=3) is None
    # a kill, a timeout, a crash before every verdict: kept
    assert shared_machine_artifact(process(timing_error, killed_by="FALSIFY-X-001"), TIMING, jobs=3) is None
    assert shared_machine_artifact(process(timing_error, timed_out=True), TIMING, jobs=3) is None
    assert shared_machine_artifact(process(timing_error, missing=["FALSIFY-X-001"]), TIMING, jobs=3) is None
    # no error at all
    assert shared_machine_artifact(process(("FALSIFY-PERF-HF-001", "PASS", "")), TIMING, jobs=3) is None
