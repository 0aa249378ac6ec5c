"""The backlog a split is priced by: a time-weighted mean of the waiting-job count, against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from kilter.model.errors import InputError
from kilter.topology.backlog import Backlog


def brute_mean(steps: list[tuple[float, int]], now: float, window: float) -> float:
    """The mean over [now - window, now] by summing the step function over a fine grid of 1/8 s."""
    grid = np.arange(now - window, now, 0.125) + 0.0625
    counts = np.zeros_like(grid)
    for t, n in steps:
        counts[grid >= t] = n
    return float(counts.mean())


@pytest.mark.parametrize("seed", range(20))
def test_the_mean_over_any_window_is_the_step_functions_mean(seed: int) -> None:
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.integers(0, 40, 60)).astype(float)
    backlog = Backlog(horizon_s=10_000.0)
    steps: list[tuple[float, int]] = []
    for t in times:
        n = int(rng.integers(0, 6))
        backlog.observe(float(t), n)
        steps.append((float(t), n))
    now = float(times[-1] + rng.integers(0, 50))
    for window in (1.0, 17.0, 250.0, now + 100.0):
        assert backlog.mean(now, window) == pytest.approx(brute_mean(steps, now, window), abs=1e-9), window


def test_old_records_are_forgotten_but_means_within_the_horizon_hold() -> None:
    backlog = Backlog(horizon_s=100.0)
    steps = []
    for t in range(0, 2000, 5):
        n = (t // 5) % 3
        backlog.observe(float(t), n)
        steps.append((float(t), n))
    assert len(backlog._times) < 100  # bounded by the horizon, not by the run
    for window in (10.0, 99.0, 100.0):
        assert backlog.mean(1999.0, window) == pytest.approx(brute_mean(steps, 1999.0, window))
    assert backlog.mean(1999.0, 5000.0) == pytest.approx(brute_mean(steps, 1999.0, 100.0))  # capped at the horizon


def test_the_askers_own_wait_is_not_its_own_backlog() -> None:
    backlog = Backlog(horizon_s=1000.0)
    backlog.observe(0.0, 1)  # the asker alone waits from t=0
    assert backlog.mean(100.0, 100.0) == pytest.approx(1.0)
    assert backlog.mean_of_others(100.0, 100.0, waiting_since_s=0.0) == 0.0
    backlog.observe(50.0, 3)  # two more from t=50
    assert backlog.mean_of_others(100.0, 100.0, waiting_since_s=0.0) == pytest.approx(1.0)
    assert backlog.mean(10.0, 100.0) == pytest.approx(0.1)  # before the first record nothing waited


def test_bad_observations_are_refused() -> None:
    backlog = Backlog(horizon_s=10.0)
    backlog.observe(5.0, 1)
    with pytest.raises(InputError, match="forward"):
        backlog.observe(4.0, 1)
    with pytest.raises(InputError):
        backlog.observe(6.0, -1)
    with pytest.raises(InputError):
        Backlog(horizon_s=float("nan"))


@pytest.mark.parametrize("seed", range(10))
def test_a_backlog_of_spans_is_the_sum_of_their_overlaps_with_the_window(seed: int) -> None:
    rng = np.random.default_rng(seed)
    spans: list[tuple[float, float | None]] = []
    for _ in range(40):
        start = float(rng.integers(0, 1000))
        length = int(rng.integers(0, 300))
        spans.append((start, None if rng.random() < 0.2 else start + length))  # some zero-length, some open
    now = 1100.0
    backlog = Backlog.of_spans(spans, horizon_s=5000.0)
    for window in (50.0, 400.0, 1100.0):
        lo = now - window
        overlap = sum(max(min(now if end is None else end, now) - max(start, lo), 0.0) for start, end in spans)
        assert backlog.mean(now, window) == pytest.approx(overlap / window), window
