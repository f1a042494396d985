"""pvlab.falsifiers.throughput: the median, the spread, the refusal of an unstable figure, and
MFU bookkeeping — driven by a scripted clock, never by real timing."""

from __future__ import annotations

import gc

import pytest

from pvlab.falsifiers import throughput


class ScriptedClock:
    """perf_counter() that advances by a scripted duration for each step() call."""

    def __init__(self, durations: list[float]):
        self.now = 0.0
        self.durations = list(durations)
        self.calls = 0

    def perf_counter(self) -> float:
        return self.now

    def step(self) -> None:
        self.calls += 1
        self.now += self.durations.pop(0) if self.durations else 1.0


def measure_with(monkeypatch, durations: list[float], **kwargs) -> tuple[throughput.Throughput, ScriptedClock]:
    clock = ScriptedClock(durations)
    monkeypatch.setattr(throughput.time, "perf_counter", clock.perf_counter)
    kwargs.setdefault("min_window_s", 0.0)
    return throughput.measure(clock.step, units_per_step=100, warmup=2, **kwargs), clock


def test_median_of_the_repeats_and_their_spread(monkeypatch):
    # warm-up 2 calls, 1 calibration call, then 5 one-call windows of 1, 2, 1, 1, 1 seconds
    result, clock = measure_with(monkeypatch, [9, 9, 1, 1, 2, 1, 1, 1], max_spread=2.0)
    assert result.repeats == [100, 50, 100, 100, 100]
    assert result.median == 100
    assert result.spread == pytest.approx(0.5)
    assert clock.calls == 8  # the warm-up calls ran and were not timed


def test_a_spread_beyond_the_claim_is_refused_not_reported(monkeypatch):
    with pytest.raises(throughput.UnstableMeasurement, match="range over 50%"):
        measure_with(monkeypatch, [1, 1, 1, 1, 2, 1, 1, 1], max_spread=0.25, what="decode")


def test_windows_are_calibrated_to_last_the_minimum_duration(monkeypatch):
    # one call takes 0.1 s, so a 1 s window holds 10 calls
    result, clock = measure_with(monkeypatch, [0.1] * 60, min_window_s=1.0)
    assert clock.calls == 2 + 1 + 5 * 10
    assert result.median == pytest.approx(1000)


def test_fewer_than_five_repeats_is_not_a_claim(monkeypatch):
    with pytest.raises(ValueError, match="at least 5 repeats"):
        measure_with(monkeypatch, [1] * 10, repeats=3)


def test_garbage_collection_is_paused_while_timing_and_restored(monkeypatch):
    seen = []
    clock = ScriptedClock([1] * 20)
    monkeypatch.setattr(throughput.time, "perf_counter", clock.perf_counter)

    def step() -> None:
        seen.append(gc.isenabled())
        clock.step()

    assert gc.isenabled()
    throughput.measure(step, units_per_step=1, warmup=1, min_window_s=0.0, max_spread=10)
    assert seen[0] is True and not any(seen[1:])
    assert gc.isenabled()


def test_mfu_peaks_are_known_only_for_named_gpus():
    assert throughput.dense_bf16_peak("NVIDIA H100 80GB HBM3") == pytest.approx(989.4e12)
    assert throughput.dense_bf16_peak("NVIDIA H200") == pytest.approx(989.4e12)
    assert throughput.dense_bf16_peak("Some Future GPU") is None


def test_training_flops_count_matrices_and_attention():
    # 6N plus 12 L d T: for N = 1000, L = 2, d = 8, T = 16
    assert throughput.training_flops_per_token(parameters=1000, layers=2, hidden=8, seq_len=16) == 6000 + 3072


def test_the_gpu_warm_up_does_nothing_off_cuda():
    import torch

    assert throughput.warm_up_gpu(torch.device("cpu")) == 0.0
    assert throughput.warm_up_gpu(torch.device("cpu"), seconds=5.0) == 0.0

