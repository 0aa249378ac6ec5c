"""The synthetic fleet generator is deterministic and shaped like real clusters."""

from __future__ import annotations

from kilter.model import codec
from kilter.model.core_v1 import Node, Pod
from kilter.model.kueue import Topology
from kilter.topology import fleetgen
from kilter.topology.fleet import build_fleet


def test_the_same_spec_gives_the_same_fleet() -> None:
    assert fleetgen.generate(fleetgen.DEMO_FLEET) == fleetgen.generate(fleetgen.DEMO_FLEET)


def test_the_demo_fleet_has_racks_blocks_failures_and_usage() -> None:
    nodes, pods = fleetgen.generate(fleetgen.DEMO_FLEET)
    fleet = build_fleet(
        [codec.convert(n, Node) for n in nodes],
        [codec.convert(p, Pod) for p in pods],
        topologies=[codec.convert(fleetgen.topology_object(), Topology)],
    )
    summary = fleet.summary()["GB200-NVL72"]
    assert isinstance(summary, dict)
    assert summary["nodes"] == 576 and summary["domains"] == 32 and summary["detachedNodes"] == 2
    assert summary["usableGpus"] == 2304 - 4 * 6
    assert 0.4 < 1 - summary["idleGpus"] / summary["gpus"] < 0.5
    assert fleet.group_ids[0][:2] == ["gb200-spine-00/gb200-leaf-00", "gb200-spine-00/gb200-leaf-01"]


def test_random_usage_matches_the_requested_fraction() -> None:
    spec = fleetgen.FleetSpec((fleetgen.PoolSpec("GB200-NVL72", domains=100, usage=0.6),), seed=3)
    nodes, pods = fleetgen.generate(spec)
    used = sum(int(p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]) for p in pods)
    assert abs(used / (len(nodes) * 4) - 0.6) < 0.02


def test_rack_usage_leaves_idle_full_and_partly_used_racks_of_whole_trays() -> None:
    spec = fleetgen.FleetSpec((fleetgen.PoolSpec("GB200-NVL72", domains=240, usage_mode="racks"),), seed=3)
    nodes, pods = fleetgen.generate(spec)
    busy: dict[str, int] = {}
    for p in pods:
        assert p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "4"  # whole trays
        rack = p["spec"]["nodeName"].rsplit("-t", 1)[0]
        busy[rack] = busy.get(rack, 0) + 1
    idle = 240 - len(busy)
    full = sum(n == 18 for n in busy.values())
    assert abs(idle / 240 - 1 / 4) < 0.07 and abs(full / 240 - 1 / 6) < 0.07
    assert len(nodes) == 240 * 18
