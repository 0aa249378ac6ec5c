"""Hand-shaped GB200 fleets and the checks every placement policy's tests share."""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from collections.abc import Iterator

import numpy as np
from hypothesis import strategies as st

from kilter.sim import fleetspec
from kilter.sim.gangs import Gang, TopologyMode
from kilter.sim.placement import Nodes, free_gpus
from kilter.topology import fleetgen
from kilter.topology.fleet import Fleet


def fleet_of(n_domains: int, *, per_block: int = 8, per_spine: int = 4, unlabeled: int = 0, seed: int = 0) -> Fleet:
    pool = fleetgen.PoolSpec(
        "GB200-NVL72",
        domains=n_domains,
        domains_per_block=per_block,
        blocks_per_spine=per_spine,
        unlabeled_nodes=unlabeled,
        prefix="gb",
    )
    return fleetspec.fleet_from_spec(fleetgen.FleetSpec((pool,), seed=seed))


@functools.cache
def mixed_fleet() -> Fleet:
    """Four GB200 racks with two label-less trays, and eight MI355X nodes (shared: tests undo what they book)."""
    pools = (
        fleetgen.PoolSpec("GB200-NVL72", domains=4, domains_per_block=2, blocks_per_spine=2, unlabeled_nodes=2),
        fleetgen.PoolSpec("MI355X-8", nodes=8, domains_per_block=4, blocks_per_spine=2),
    )
    return fleetspec.fleet_from_spec(fleetgen.FleetSpec(pools, seed=5))


@contextlib.contextmanager
def busy_mixed_fleet(busy: list[int]) -> Iterator[Fleet]:
    """The shared mixed fleet with ``busy[n]`` GPUs of node n in use (capped at its GPUs), given back afterwards."""
    fleet = mixed_fleet()
    bm = fleet.bitmap
    booked = [(n, min(b, int(bm.node_gpu_counts[n]))) for n, b in enumerate(busy[: fleet.n_nodes])]
    for node, gpus in booked:
        bm.allocate(node, gpus)
    try:
        yield fleet
    finally:
        for node, gpus in booked:
            bm.release(node, gpus)


def trays(fleet: Fleet, d: int) -> list[int]:
    start = fleet.bitmap.domain_node_start
    return list(range(int(start[d]), int(start[d + 1])))


def leave_idle(fleet: Fleet, d: int, k: int) -> list[int]:
    """Fill every tray of domain ``d`` but the first ``k``; returns the idle ones."""
    for node in trays(fleet, d)[k:]:
        fleet.bitmap.allocate(node, 4)
    return trays(fleet, d)[:k]


def blocks(fleet: Fleet) -> list[list[int]]:
    level0 = fleet.domain_group[0]
    return [np.flatnonzero(level0 == b).tolist() for b in range(int(level0.max()) + 1)]


def gang(*pod_sets: tuple[int, int], topology: TopologyMode) -> Gang:
    return Gang(0, 0, pod_sets, topology)


def pods_per_domain(fleet: Fleet, nodes: Nodes) -> dict[int, int]:
    return dict(Counter(fleet.node_domain[nodes].tolist()))


def assert_bookable(fleet: Fleet, g: Gang, nodes: Nodes) -> None:
    """One usable node of the gang's platform per pod, and no node asked for more GPUs than it has idle."""
    assert nodes.dtype == np.int32 and len(nodes) == g.pods
    assert (fleet.bitmap.domain_platforms[fleet.node_domain[nodes]] == g.platform).all()
    assert (fleet.bitmap.node_usable_flags[nodes] != 0).all()
    asked = np.bincount(nodes, weights=g.pod_gpus(), minlength=fleet.n_nodes)
    assert (asked <= free_gpus(fleet)).all()


# Random busy patterns on the mixed fleet and a gang of whole-node pods plus a small rest, for property tests.
PLACEMENT_CASES = {
    "busy": st.lists(st.integers(0, 8), min_size=80, max_size=80),
    "count": st.integers(1, 40),
    "rest": st.integers(0, 3),
    "platform": st.integers(0, 1),
    "topology": st.sampled_from(["required", "preferred", "unconstrained"]),
}


def case_gang(fleet: Fleet, count: int, rest: int, platform: int, topology: TopologyMode) -> Gang:
    per_node = fleet.platforms[platform].gpus_per_node
    return Gang(0, platform, ((count, per_node), *([(1, rest)] if rest else [])), topology)
