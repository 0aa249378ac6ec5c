"""``kilter_reservations_held`` over loopback: the pending gangs ``/metrics`` counts as holding a reservation
(``tests.gangs.starts_scenario``: rack-a, rack-b and small all get one; without the running jobs' runtimes only
small does, the rack gangs waiting on room nothing is expected to free)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from tests.extenders.conftest import Served, serve_snapshot
from tests.gangs import starts_scenario as sc
from tests.gangs.test_start_watch import small_running


def metric(served: Served, name: str) -> float:
    status, body, _ = served.call("GET", "/metrics")
    assert status == 200
    line = next(line for line in body.decode().splitlines() if line.startswith(f"{name} "))
    return float(line.split()[1])


def test_the_metric_counts_pending_gangs_with_a_reservation(tmp_path: Path) -> None:
    with serve_snapshot(tmp_path / "all", sc.objects()) as served:
        assert metric(served, "kilter_reservations_held") == 3.0
    with serve_snapshot(tmp_path / "unknown", sc.objects(short=None, long=None)) as served:
        assert metric(served, "kilter_reservations_held") == 1.0


def sample(served: Served, name: str) -> float:
    """A series' value, 0 while it has none."""
    _, body, _ = served.call("GET", "/metrics")
    lines = [line for line in body.decode().splitlines() if line.startswith(f"{name} ")]
    return float(lines[0].split()[1]) if lines else 0.0


def test_a_promised_gang_found_running_scores_its_start_error_and_counts_as_backfilled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``small`` is promised a start now on r1 (beside ``rack-a``'s later reservation); it starts 30 s on. (The
    gauge's answer may be 30 s old; here it is worked out afresh each second.)"""
    with serve_snapshot(tmp_path, sc.objects()) as served:
        served.app.extender.gangs.starts.max_age_s = 0.0
        assert metric(served, "kilter_reservations_held") == 3.0  # the first answer: promises only
        assert sample(served, "kilter_start_error_seconds_count") == 0.0
        started = math.floor(time.time()) + 30
        base = [o for o in sc.objects() if not o["metadata"]["name"].startswith("small-")]
        served.replace([*base, *small_running(started)])
        deadline = time.monotonic() + 10
        while metric(served, "kilter_reservations_held") != 2.0:  # small is running now
            assert time.monotonic() < deadline, "the snapshot was not reloaded"
            time.sleep(0.1)
        assert sample(served, "kilter_start_error_seconds_count") == 1.0
        # 30 s after a promise of "now": late, by under a minute (a histogram of signed errors exposes no sum)
        assert sample(served, 'kilter_start_error_seconds_bucket{le="0.0"}') == 0.0
        assert sample(served, 'kilter_start_error_seconds_bucket{le="60.0"}') == 1.0
        assert sample(served, "kilter_jobs_backfilled_total") == 1.0
