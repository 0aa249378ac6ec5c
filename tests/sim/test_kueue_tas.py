"""The Kueue TAS baseline: BestFit for required and preferred gangs, LeastFreeCapacity for unconstrained ones.

Fleets are GB200 NVL72 racks: 18 trays of 4 GPUs per scale-up domain. With
4-GPU pods a domain's capacity is its number of idle trays, so the fleets
below are shaped by filling all but ``k`` trays of a domain.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from kilter._native import domains
from kilter.sim.gangs import TopologyMode
from kilter.sim.kueue_tas import KueueTas
from kilter.topology.fleet import Fleet
from tests.sim.builders import (
    PLACEMENT_CASES,
    assert_bookable,
    blocks,
    busy_mixed_fleet,
    case_gang,
    fleet_of,
    gang,
    leave_idle,
    pods_per_domain,
    trays,
)


def shaped(capacities: list[int], *, per_block: int = 8) -> Fleet:
    fleet = fleet_of(len(capacities), per_block=per_block)
    for d, k in enumerate(capacities):
        leave_idle(fleet, d, k)
    return fleet


@pytest.mark.parametrize(
    ("capacities", "expected"),
    [
        pytest.param([18, 10, 6, 12], 2, id="6 idle trays is the least that still holds 5"),
        pytest.param([6, 10, 6, 12], 0, id="two domains of 6: the first in level-value order"),
        pytest.param([4, 5, 18, 5], 1, id="4 is too few, 5 is tightest"),
    ],
)
def test_a_required_gang_takes_the_tightest_domain_that_holds_it(capacities: list[int], expected: int) -> None:
    fleet = shaped(capacities)
    g = gang((5, 4), topology="required")
    nodes = KueueTas().place(fleet, g)
    assert nodes is not None
    assert_bookable(fleet, g, nodes)
    # Inside the domain every idle tray holds one pod: the first five in hostname order.
    assert nodes.tolist() == trays(fleet, expected)[:5]


def test_a_required_gang_that_no_single_domain_holds_is_refused() -> None:
    fleet = shaped([3, 3, 3, 3])  # 12 idle trays, but at most 3 in one domain
    assert KueueTas().place(fleet, gang((4, 4), topology="required")) is None
    assert KueueTas().place(fleet, gang((4, 4), topology="preferred")) is not None


def test_a_preferred_gang_spills_over_the_fewest_domains_roomiest_first_and_tightest_last() -> None:
    fleet = shaped([10, 7, 3, 5])
    g = gang((14, 4), topology="preferred")
    nodes = KueueTas().place(fleet, g)
    assert nodes is not None
    assert_bookable(fleet, g, nodes)
    # No domain holds 14, the block (25) does. Descending by capacity: 10 first, 4 still to place;
    # of the rest (7, 5, 3) the least that holds 4 is 5 (domain 3), so 7 and 3 stay untouched.
    assert pods_per_domain(fleet, nodes) == {0: 10, 3: 4}


def test_below_the_fit_level_kueue_pools_the_chosen_domains_trays_in_level_value_order() -> None:
    fleet = shaped([5, 10])
    nodes = KueueTas().place(fleet, gang((12, 4), topology="preferred"))
    assert nodes is not None
    # Domain level: 10 (domain 1) first, then 5 (domain 0) for the last 2. At the tray level Kueue
    # sorts the 15 trays of both together (all hold 1 pod, so by hostname) and takes 12: 5 + 7.
    assert pods_per_domain(fleet, nodes) == {0: 5, 1: 7}


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        # Block A holds 6 + 6 = 12, block B 8 + 1 = 9. 11 pods: no domain holds them, block A does.
        pytest.param(11, {"a0": 6, "a1": 5}, id="11 pods stay in the block of 12"),
        # 15 pods: no block does; the spine (21) does. Blocks by capacity: A (12), then B for 3.
        # Their domains pooled: 8, 6, 6, 1 -> 8 + 6 taken, 1 left, tightest that holds it is the 1.
        pytest.param(15, {"b0": 8, "a0": 6, "b1": 1}, id="15 pods go up to the spine"),
    ],
)
def test_a_preferred_gang_goes_up_one_level_at_a_time(pods: int, expected: dict[str, int]) -> None:
    fleet = fleet_of(4, per_block=2)
    (a0, a1), (b0, b1) = blocks(fleet)
    for d, k in ((a0, 6), (a1, 6), (b0, 8), (b1, 1)):
        leave_idle(fleet, d, k)
    nodes = KueueTas().place(fleet, gang((pods, 4), topology="preferred"))
    assert nodes is not None
    names = {a0: "a0", a1: "a1", b0: "b0", b1: "b1"}
    assert {names[d]: n for d, n in pods_per_domain(fleet, nodes).items()} == expected


def test_a_preferred_gang_asks_every_block_before_any_spine() -> None:
    fleet = fleet_of(8, per_block=2, per_spine=2)
    (a0, a1), (b0, b1), (c0, c1), (d0, d1) = blocks(fleet)
    spine = fleet.domain_group[1]
    assert spine[a0] == spine[b0] != spine[c0] == spine[d0]
    for d, k in ((a0, 6), (a1, 6), (b0, 5), (b1, 5), (c0, 7), (c1, 6), (d0, 0), (d1, 0)):
        leave_idle(fleet, d, k)
    nodes = KueueTas().place(fleet, gang((11, 4), topology="preferred"))
    assert nodes is not None
    # Blocks hold A 12, B 10, C 13, D 0: the tightest that holds 11 is A. Asking the spines first
    # would have picked spine 1 (13 < 22) and so block C.
    assert pods_per_domain(fleet, nodes) == {a0: 6, a1: 5}


def test_an_unconstrained_pod_goes_to_the_least_free_tray_and_a_preferred_one_to_the_tightest_domain() -> None:
    fleet = fleet_of(2)
    busy = trays(fleet, 0)[7]
    fleet.bitmap.allocate(busy, 2)
    fleet.bitmap.allocate(trays(fleet, 1)[17], 4)
    # 2-GPU pods: the busy tray holds 1, every other idle tray 2. Domain 0 holds 17 x 2 + 1 = 35,
    # domain 1 holds 17 x 2 = 34.
    least_free = KueueTas().place(fleet, gang((1, 2), topology="unconstrained"))
    best_fit = KueueTas().place(fleet, gang((1, 2), topology="preferred"))
    assert least_free is not None and least_free.tolist() == [busy]
    # BestFit takes domain 1 (34 < 35); its trays all hold 2, so the first one.
    assert best_fit is not None and best_fit.tolist() == [trays(fleet, 1)[0]]


def test_best_fit_also_takes_the_tightest_tray_inside_the_domain() -> None:
    fleet = fleet_of(2)
    busy = trays(fleet, 1)[7]
    fleet.bitmap.allocate(busy, 2)
    # Domain 1 holds 35 2-GPU pods, domain 0 holds 36: domain 1. Its trays hold 2, except the busy
    # one, which holds 1: the least that still holds the pod.
    nodes = KueueTas().place(fleet, gang((1, 2), topology="required"))
    assert nodes is not None and nodes.tolist() == [busy]


def test_an_unconstrained_gang_fills_trays_from_the_least_free_up() -> None:
    fleet = fleet_of(2)
    t0, t1 = trays(fleet, 0), trays(fleet, 1)
    fleet.bitmap.allocate(t1[3], 2)  # holds one 2-GPU pod
    fleet.bitmap.allocate(t0[5], 3)  # holds none
    fleet.bitmap.allocate(t0[9], 2)  # holds one
    g = gang((4, 2), topology="unconstrained")
    nodes = KueueTas().place(fleet, g)
    assert nodes is not None
    assert_bookable(fleet, g, nodes)
    # No tray holds 4. Ascending capacity: the two trays that hold 1 (t0[9], t1[3]), then the first
    # that holds 2 (t0[0]) for the last 2 pods. Pods are listed in level-value order.
    assert nodes.tolist() == [t0[0], t0[0], t0[9], t1[3]]


def test_the_second_pod_set_is_placed_after_the_first_is_booked() -> None:
    fleet = shaped([4, 6])
    g = gang((4, 4), (1, 2), topology="required")
    nodes = KueueTas().place(fleet, g)
    assert nodes is not None
    assert_bookable(fleet, g, nodes)
    # 4 trays: domain 0 fits exactly. Then it is full, and the 2-GPU pod goes to domain 1.
    assert nodes[:4].tolist() == trays(fleet, 0)[:4]
    assert fleet.node_domain[nodes[4]] == 1


def test_trays_without_their_clique_label_are_never_used() -> None:
    fleet = fleet_of(2, unlabeled=2, seed=3)
    detached = np.flatnonzero(fleet.bitmap.domain_flags & domains.DETACHED)
    assert len(detached) == 2
    for d in range(fleet.bitmap.n_domains):
        if d not in detached:
            leave_idle(fleet, d, 0)
    # Only the two detached trays are idle; Kueue's tree does not have them (no clique level).
    assert KueueTas().place(fleet, gang((1, 4), topology="unconstrained")) is None
    assert KueueTas().place(fleet, gang((1, 4), topology="preferred")) is None


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**PLACEMENT_CASES)
def test_placements_are_bookable_and_required_ones_use_the_tightest_fitting_domain(
    busy: list[int], count: int, rest: int, platform: int, topology: TopologyMode
) -> None:
    with busy_mixed_fleet(busy) as fleet:
        bm = fleet.bitmap
        g = case_gang(fleet, count, rest, platform, topology)
        nodes = KueueTas().place(fleet, g)
        if nodes is None:
            return
        assert_bookable(fleet, g, nodes)
        assert not (bm.domain_flags[fleet.node_domain[nodes]] & domains.DETACHED).any()
        if topology == "required":
            first = fleet.node_domain[nodes[:count]]
            assert len(set(first.tolist())) == 1
            attached = (bm.domain_platforms == platform) & ((bm.domain_flags & domains.DETACHED) == 0)
            capacity = bm.capacity(fleet.platforms[platform].gpus_per_node)
            assert capacity[first[0]] == capacity[attached & (capacity >= count)].min()
