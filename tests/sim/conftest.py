"""Small fleets and traces for simulator tests, built the way ``kilter simulate`` builds them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kilter.sim import fleetspec
from kilter.sim.trace import TraceJob
from kilter.topology.fleet import Fleet

FleetMaker = Callable[..., Fleet]


def nvl72(domains: int = 2, *, per_block: int = 8, unhealthy: int = 0, seed: int = 0) -> Fleet:
    doc = {
        "platforms": [
            {"platform": "GB200-NVL72", "domains": domains, "domainsPerBlock": per_block, "unhealthyNodes": unhealthy}
        ]
    }
    return fleetspec.fleet_from_spec(fleetspec.parse_spec(doc, seed=seed))


def jobs(*rows: tuple[float, float, int] | tuple[float, float, int, str]) -> list[TraceJob]:
    """Trace jobs from (submit, duration, gpus[, queue]) rows, already in submit order."""
    return [
        TraceJob(i, float(r[0]), float(r[1]), int(r[2]), str(r[3]) if len(r) > 3 else "default")
        for i, r in enumerate(rows)
    ]


@pytest.fixture
def fleet_maker() -> FleetMaker:
    return nvl72
