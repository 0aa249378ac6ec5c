"""Which nodes are spares, what they count, and that new plans leave them alone while repairs may use them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter.model.core_v1 import Node, Pod
from kilter.sim.gangs import Gang
from kilter.sim.simple import gang_request as sim_request
from kilter.topology import spares
from kilter.topology.fleet import Fleet, build_fleet
from kilter.topology.plan import gang_request, plan_gang
from tests.topology.builders import node, pod, rack
from tests.topology.test_plan import pod_set


def fleet_of(nodes: list[Node], pods: Sequence[Pod] = (), *, wanted: list[int]) -> Fleet:
    fleet = build_fleet(nodes, pods)
    spares.assign(fleet, wanted)
    return fleet


def held_names(fleet: Fleet) -> list[str]:
    held = spares.held_mask(fleet)
    return [] if held is None else [fleet.node_names[i] for i in np.flatnonzero(held)]


def test_the_highest_indexed_wholly_free_healthy_nodes_are_the_spares() -> None:
    # r1: t17 busy, t16 half busy, t15 cordoned: the two spares are t14 and t13, the top idle healthy nodes.
    nodes = [n for n in rack("r1", 15)] + [node("r1-t15", labels={"nvidia.com/gpu.clique": "r1"}, cordoned=True)]
    nodes += [node(f"r1-t{t}", labels={"nvidia.com/gpu.clique": "r1"}) for t in (16, 17)]
    fleet = fleet_of(nodes, [pod("a", "r1-t17", 4), pod("b", "r1-t16", 2)], wanted=[2])
    assert held_names(fleet) == ["r1-t13", "r1-t14"]


def test_a_domain_with_fewer_idle_nodes_than_asked_holds_what_it_has_and_counts_the_rest() -> None:
    # 4 trays, 2 busy, 1 cordoned: N = 3 asks for 3; 1 is held, healthy = 3 so 3 - 1 = 2 are used, 0 short.
    nodes = [*rack("r1", 3), node("r1-t03", labels={"nvidia.com/gpu.clique": "r1"}, cordoned=True)]
    fleet = fleet_of(nodes, [pod("a", "r1-t00", 4), pod("b", "r1-t01", 1)], wanted=[3])
    assert held_names(fleet) == ["r1-t02"]
    counts = spares.tally(fleet)
    assert (counts.wanted.tolist(), counts.held.tolist(), counts.used.tolist(), counts.short.tolist()) == (
        [3],
        [1],
        [2],
        [0],
    )


def test_a_count_above_a_domains_nodes_holds_all_of_them_and_the_rest_is_short() -> None:
    # 4 healthy idle trays, N = 18: all 4 held, min(18, 4) - 4 = 0 used, 18 - 4 = 14 short.
    fleet = fleet_of(rack("r1", 4), wanted=[18])
    assert held_names(fleet) == ["r1-t00", "r1-t01", "r1-t02", "r1-t03"]
    counts = spares.tally(fleet)
    assert (int(counts.held[0]), int(counts.used[0]), int(counts.short[0])) == (4, 0, 14)


def test_single_node_platforms_and_detached_trays_keep_no_spares() -> None:
    hgx = [node(f"h{i}", product="NVIDIA-H100-80GB-HBM3", gpus=8) for i in range(2)]
    detached = node("lost-t00")  # a GB200 tray without its clique label: a domain of its own
    fleet = build_fleet([*rack("r1", 2), *hgx, detached])
    spares.assign(fleet, [1] * len(fleet.domain_ids))
    assert fleet.spare_nodes is not None
    kept = {fleet.domain_ids[d]: int(n) for d, n in enumerate(fleet.spare_nodes)}
    assert kept == {"r1": 1, "h0": 0, "h1": 0, "lost-t00": 0}
    assert held_names(fleet) == ["r1-t01"]


def test_no_setting_holds_nothing_and_leaves_the_planners_mask_alone() -> None:
    fleet = build_fleet(rack("r1", 4))
    spares.assign(fleet, [0])
    assert fleet.spare_nodes is None and spares.held_mask(fleet) is None
    assert spares.usable_mask(fleet, None) is None
    assert spares.by_platform(fleet) == [] and spares.note(fleet) == ""


def brute_force(fleet: Fleet) -> set[int]:
    """The rule read literally: per domain, walk its nodes from the last down, taking idle healthy ones until N."""
    assert fleet.spare_nodes is not None
    bm = fleet.bitmap
    starts = bm.domain_node_start.tolist()
    used, usable = bm.node_used_gpus.tolist(), bm.node_usable_flags.tolist()
    out: set[int] = set()
    for d, n in enumerate(fleet.spare_nodes.tolist()):
        taken = 0
        for i in range(starts[d + 1] - 1, starts[d] - 1, -1):
            if taken < n and usable[i] and used[i] == 0:
                out.add(i)
                taken += 1
    return out


@st.composite
def small_fleets(draw: st.DrawFn) -> Fleet:
    n_racks = draw(st.integers(1, 4))
    nodes: list[Node] = []
    pods: list[Pod] = []
    for r in range(n_racks):
        for t in range(draw(st.integers(1, 9))):
            name = f"r{r}-t{t:02d}"
            nodes.append(node(name, labels={"nvidia.com/gpu.clique": f"r{r}"}, cordoned=draw(st.booleans())))
            busy = draw(st.sampled_from([0, 0, 1, 4]))
            if busy:
                pods.append(pod(f"p-{name}", name, busy))
    fleet = build_fleet(nodes, pods)
    spares.assign(fleet, draw(st.lists(st.integers(0, 10), min_size=n_racks, max_size=n_racks)))
    return fleet


@settings(max_examples=150, deadline=None)
@given(small_fleets())
def test_the_mask_equals_the_rule_walked_node_by_node(fleet: Fleet) -> None:
    held = spares.held_mask(fleet)
    found = set() if held is None else set(np.flatnonzero(held).tolist())
    if fleet.spare_nodes is None:
        assert found == set()
        return
    assert found == brute_force(fleet)
    counts = spares.tally(fleet)
    assert (counts.held + counts.used + counts.short == counts.wanted).all()
    assert (counts.used >= 0).all() and (counts.short >= 0).all()


def test_a_new_plan_never_uses_a_spare_but_a_repair_may() -> None:
    # Two 4-tray racks, 1 spare each: t03 of each is held. A gang of 6 whole trays fits only across both racks'
    # first three trays; with the spares usable (a repair) the planner may take them.
    fleet = fleet_of(rack("r1", 4) + rack("r2", 4), wanted=[1, 1])
    request = gang_request("g", [pod_set("w", 6, 4)], fleet.catalog)
    plan = plan_gang(fleet, request)
    assert plan.feasible
    assert not {"r1-t03", "r2-t03"} & {n for ps in plan.pod_sets for n in ps.nodes}
    eight = gang_request("g8", [pod_set("w", 8, 4)], fleet.catalog)
    refused = plan_gang(fleet, eight)
    assert not refused.feasible
    assert refused.reason.endswith("2 spare nodes kept out of new plans (kilter.dev/spare-nodes-per-domain)")
    repair = plan_gang(fleet, eight, hold_spares=False)
    assert repair.feasible and {"r1-t03", "r2-t03"} <= {n for ps in repair.pod_sets for n in ps.nodes}


@pytest.mark.parametrize("hold", [True, False])
def test_the_simulators_request_holds_spares_out_as_a_servers_does(hold: bool) -> None:
    fleet = fleet_of(rack("r1", 4), wanted=[2])
    placed = plan_gang(fleet, sim_request(fleet, Gang(0, 0, ((3, 4),), "preferred")), hold_spares=hold)
    if hold:
        assert not placed.feasible  # 4 trays, 2 kept: 3 whole-tray pods do not fit
    else:
        assert placed.feasible and sorted(fleet.node_names[i] for i in placed.node_indices) == [
            "r1-t00",
            "r1-t01",
            "r1-t02",
        ]


def test_per_platform_sums_add_up_the_domains() -> None:
    fleet = fleet_of(rack("r1", 4) + rack("r2", 4), [pod("a", "r2-t03", 4), pod("b", "r2-t02", 4)], wanted=[1, 3])
    # r1: 1 held. r2: idle t00, t01 -> 2 held, min(3, 4) - 2 = 1 used.
    [row] = spares.by_platform(fleet)
    assert (row.platform, row.domains, row.wanted, row.held, row.used, row.short) == ("GB200-NVL72", 2, 4, 3, 1, 0)


@settings(max_examples=150, deadline=None)
@given(small_fleets(), st.data())
def test_spares_lent_to_a_pod_are_not_held_from_it_and_every_other_spare_is(fleet: Fleet, data: st.DataObject) -> None:
    domains = len(fleet.domain_ids)
    lends = data.draw(st.lists(st.booleans(), min_size=domains, max_size=domains))
    floor = np.array(data.draw(st.lists(st.integers(-5, 5), min_size=domains, max_size=domains)), dtype=np.int64)
    priority = data.draw(st.integers(-6, 6))
    if data.draw(st.booleans()):  # no gang runs in some domains
        floor[np.array(data.draw(st.lists(st.booleans(), min_size=domains, max_size=domains)))] = spares.NO_GANG
    spares.assign(fleet, fleet.spare_nodes if fleet.spare_nodes is not None else np.zeros(domains), lends)
    lent = spares.lent_to(fleet, priority, floor)
    asks = fleet.spare_nodes if fleet.spare_nodes is not None else np.zeros(domains, dtype=np.int32)
    # The rule read literally: a domain lends to the pod when it lends, asks for spares, a gang runs there and
    # every gang there is above the pod.
    expect = [
        bool(lends[d] and asks[d] > 0 and floor[d] != spares.NO_GANG and floor[d] > priority) for d in range(domains)
    ]
    assert (lent.tolist() if lent is not None else [False] * domains) == expect
    spare = brute_force(fleet) if fleet.spare_nodes is not None else set()
    held = spares.held_mask(fleet, lent=lent)
    found = set() if held is None else set(np.flatnonzero(held).tolist())
    assert found == {n for n in spare if not expect[int(fleet.node_domain[n])]}
    assert [spares.is_spare(fleet, n, lent=lent) for n in range(fleet.n_nodes)] == [
        n in found for n in range(fleet.n_nodes)
    ]
    for n in range(fleet.n_nodes):  # emptied (its GPUs booked away), would the node be a spare held from the pod?
        emptied = build_fleet(
            [
                node(name, labels=fleet.node_labels[i], cordoned=not fleet.bitmap.node_usable_flags[i])
                for i, name in enumerate(fleet.node_names)
            ],
            [
                pod(f"p-{m}", fleet.node_names[m], int(fleet.bitmap.node_used_gpus[m]))
                for m in range(fleet.n_nodes)
                if m != n and fleet.bitmap.node_used_gpus[m]
            ],
        )
        spares.assign(emptied, asks, lends)
        held_then = spares.held_mask(emptied, lent=lent)
        assert spares.spare_once_free(fleet, n, lent=lent) == bool(held_then is not None and held_then[n])
