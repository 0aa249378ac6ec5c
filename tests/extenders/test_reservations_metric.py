"""``kilter_reservations_held`` over loopback: the pending gangs ``/metrics`` counts as holding a reservation
(``tests.gangs.starts_scenario``: rack-a, rack-b and small all get one; without the running jobs' runtimes only
small does, the rack gangs waiting on room nothing is expected to free)."""

from __future__ import annotations

from pathlib import Path

from tests.extenders.conftest import Served, serve_snapshot
from tests.gangs import starts_scenario as sc


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
