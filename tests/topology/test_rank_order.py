"""A plan's pod sets list their nodes in rank order: each domain a consecutive range, a block's domains adjacent."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter.model.core_v1 import Node, Pod
from kilter.model.jobs import TopologyRequest
from kilter.topology.fleet import Fleet, build_fleet
from kilter.topology.plan import gang_request, plan_gang, rank_order
from tests.topology.builders import CLIQUE, TIER1, node, pod
from tests.topology.test_plan import CATALOG, pod_set

TIER2 = "fabric.topograph.run/tier-2"


def racks(layout: Sequence[tuple[str, str, str, int]]) -> list[Node]:
    """(rack, block, spine, trays) -> GB200 trays labelled with their rack, block and spine."""
    return [
        node(f"{r}-t{t:02d}", labels={CLIQUE: r, TIER1: b, TIER2: s}) for r, b, s, trays in layout for t in range(trays)
    ]


def runs(values: Sequence[str]) -> list[str]:
    """The distinct values in the order their runs appear: a value seen in two runs appears twice."""
    return [v for i, v in enumerate(values) if i == 0 or values[i - 1] != v]


def assert_contiguous(fleet: Fleet, nodes: Sequence[str]) -> None:
    index = [fleet.node_index[n] for n in nodes]
    domains = [fleet.domain_of_node(i) for i in index]
    assert len(runs(domains)) == len(set(domains)), f"a domain's ranks are split: {runs(domains)}"
    for level in range(fleet.domain_group.shape[0]):
        groups = [str(fleet.domain_group[level, fleet.node_domain[i]]) for i in index]
        assert len(runs(groups)) == len(set(groups)), f"a level-{level} group's ranks are split: {runs(groups)}"
    assert len(runs(list(nodes))) == len(set(nodes)), "the pods on one node are not neighbours"


def test_rank_order_sorts_by_block_then_domain_then_node_and_leaves_a_sorted_list_alone() -> None:
    # Block b0 holds racks a and c, block b1 rack b: a and c come together although b sorts between them by name.
    fleet = build_fleet(racks([("a", "b0", "s", 4), ("b", "b1", "s", 4), ("c", "b0", "s", 4)]), [])
    name = {n: i for i, n in enumerate(fleet.node_names)}
    mixed = np.array([name[n] for n in ("b-t01", "c-t00", "a-t03", "c-t00", "a-t00", "b-t00")], dtype=np.int32)
    ordered = rank_order(fleet, mixed)
    assert [fleet.node_names[i] for i in ordered] == ["a-t00", "a-t03", "c-t00", "c-t00", "b-t00", "b-t01"]
    assert (rank_order(fleet, ordered) == ordered).all()


@st.composite
def fleets_and_gangs(draw: st.DrawFn) -> tuple[list[Node], list[Pod], list[tuple[int, int]], int]:
    layout = []
    for r in range(draw(st.integers(2, 7))):
        layout.append((f"r{r}", f"b{draw(st.integers(0, 2))}", f"s{draw(st.integers(0, 1))}", draw(st.integers(2, 6))))
    nodes = racks(layout)
    busy = draw(st.lists(st.integers(0, len(nodes) - 1), max_size=len(nodes) // 2, unique=True))
    used = [pod(f"busy-{i}", nodes[i].metadata.name, draw(st.sampled_from([1, 2, 4]))) for i in busy]
    sets = draw(st.lists(st.tuples(st.integers(1, 14), st.sampled_from([1, 2, 4])), min_size=1, max_size=2))
    return nodes, used, sets, draw(st.integers(0, 2**16))


@settings(max_examples=60, deadline=None)
@given(fleets_and_gangs())
def test_every_pod_set_of_a_random_gang_on_a_random_fleet_keeps_its_domains_and_blocks_contiguous(
    case: tuple[list[Node], list[Pod], list[tuple[int, int]], int],
) -> None:
    nodes, used, sets, seed = case
    fleet = build_fleet(nodes, used)
    preferred = TopologyRequest(unconstrained=True) if seed % 2 else TopologyRequest()
    request = gang_request("g", [pod_set(f"ps{i}", n, g, topology=preferred) for i, (n, g) in enumerate(sets)], CATALOG)
    plan = plan_gang(fleet, request)
    if not plan.feasible:
        return
    for ps in plan.pod_sets:
        assert_contiguous(fleet, ps.nodes)
        index = np.array([fleet.node_index[n] for n in ps.nodes], dtype=np.int32)
        assert (rank_order(fleet, index) == index).all()  # the plan's order is a fixed point
        shuffled = index.tolist()
        random.Random(seed).shuffle(shuffled)  # whatever order a planner answers in, the ranks come out the same
        assert (rank_order(fleet, np.array(shuffled, dtype=np.int32)) == index).all()
    flat = [n for ps in plan.pod_sets for n in ps.nodes]
    assert [fleet.node_names[i] for i in plan.node_indices] == flat
