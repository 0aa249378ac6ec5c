"""``kilter demo``'s kilter over HTTP waits for fewer domains exactly as the planner called in-process does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from kilter.cli.demo_scheduler import ExtenderPlacement, ExtenderServer
from kilter.sim import fleetspec, run
from kilter.sim.engine import SimConfig
from kilter.sim.placement import PlacementPolicy
from kilter.sim.simple import KilterPlacement
from kilter.sim.split_hold import WaitSettings
from kilter.topology import fleetgen
from tests.sim.conftest import jobs


def test_a_gang_held_back_over_http_leaves_no_pod_behind_and_starts_where_the_planner_starts_it(
    tmp_path: Path,
) -> None:
    pool = fleetgen.PoolSpec("GB200-NVL72", domains=2, domains_per_block=8, blocks_per_spine=4, prefix="gb")
    nodes, _ = fleetgen.generate(fleetgen.FleetSpec((pool,), seed=0))
    objects = [*nodes, fleetgen.topology_object()]
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    # Jobs 0 and 1 leave 8 trays free in each rack; job 2 (16 trays) would split, waits, and starts whole when
    # job 0 ends at t=100 (budget 0.2 x 1000 s = 200 s); job 3 then waits for the second rack too.
    trace = jobs((0, 100, 40), (0, 5000, 40), (1, 1000, 64), (2, 1000, 64))
    config = SimConfig(split_wait=WaitSettings(runtime_estimate="oracle", holds="nothing"))
    outcomes = []
    with ExtenderServer(path) as server:
        policies: list[PlacementPolicy] = [KilterPlacement(), ExtenderPlacement(server)]
        for policy in policies:
            r = run.simulate(lambda: fleetspec.fleet_from_objects(objects), trace, policy, config=config)
            outcomes.append(r.simulation.outcome)
            assert r.metrics["splitWaited"] == 2
            if isinstance(policy, ExtenderPlacement):
                policy.close()
        assert not [p for p in server.store.state().pods if p.metadata.namespace == "demo"]
    direct, http = outcomes
    assert direct.start[2] == 100.0 and direct.domains[2] == 1
    assert np.array_equal(direct.start, http.start, equal_nan=True)
    assert np.array_equal(direct.domains, http.domains)
