"""The Volcano baseline: network-topology-aware HyperNode binpacking, then the binpack node score inside.

Fleets are GB200 NVL72 racks: 18 trays of 4 GPUs per scale-up domain (a tier-1
HyperNode, 72 GPUs). A HyperNode's score for a gang is (used + gang GPUs) /
allocatable; a tray's score for a pod is (used + pod GPUs) / 4.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from kilter._native import domains
from kilter.sim.gangs import TopologyMode
from kilter.sim.volcano_binpack import VolcanoBinpack
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


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        # Idle trays 18, 10, 6, 12 -> used GPUs 0, 32, 48, 24. For 5 pods (20 GPUs) every domain
        # fits; scores 20/72, 52/72, 68/72, 44/72: domain 2, the most allocated.
        pytest.param(5, 2, id="5 pods: the busiest domain"),
        # 7 pods (28 GPUs): domain 2 has 6 idle trays; of the rest 60/72 (domain 1) is highest.
        pytest.param(7, 1, id="7 pods: the busiest domain that holds them"),
    ],
)
def test_a_required_gang_goes_to_the_most_allocated_domain_that_holds_it(pods: int, expected: int) -> None:
    fleet = fleet_of(4)
    for d, k in enumerate([18, 10, 6, 12]):
        leave_idle(fleet, d, k)
    g = gang((pods, 4), topology="required")
    nodes = VolcanoBinpack().place(fleet, g)
    assert nodes is not None
    assert_bookable(fleet, g, nodes)
    assert nodes.tolist() == trays(fleet, expected)[:pods]


def test_a_required_gang_that_no_single_domain_holds_is_refused() -> None:
    fleet = fleet_of(4)
    for d in range(4):
        leave_idle(fleet, d, 3)
    assert VolcanoBinpack().place(fleet, gang((4, 4), topology="required")) is None
    assert VolcanoBinpack().place(fleet, gang((4, 4), topology="preferred")) is not None


def test_inside_the_domain_pods_fill_the_most_allocated_tray_first() -> None:
    fleet = fleet_of(3)
    t = trays(fleet, 1)
    fleet.bitmap.allocate(t[4], 3)  # 1 idle GPU: a 2-GPU pod does not fit
    fleet.bitmap.allocate(t[9], 2)  # 2 idle: score (2 + 2) / 4 = 1
    g = gang((3, 2), topology="required")
    nodes = VolcanoBinpack().place(fleet, g)
    assert nodes is not None
    assert_bookable(fleet, g, nodes)
    # Domain 1 is the busiest: (5 + 6) / 72 against 6 / 72. First pod on t[9] (score 1); then every
    # idle tray scores 2/4 and the lowest index, t[0], wins; holding one pod it scores 1 and takes the last.
    assert nodes.tolist() == [t[9], t[0], t[0]]


def test_busy_domains_fill_first_so_idle_domains_stay_whole() -> None:
    fleet = fleet_of(3)
    leave_idle(fleet, 1, 12)  # domain 1: 6 trays busy
    policy = VolcanoBinpack()
    for _ in range(3):  # three 4-tray gangs, each booked before the next arrives
        nodes = policy.place(fleet, gang((4, 4), topology="required"))
        assert nodes is not None and pods_per_domain(fleet, nodes) == {1: 4}
        for node in nodes.tolist():
            fleet.bitmap.allocate(node, 4)
    assert fleet.bitmap.domain_free_gpus.tolist() == [72, 0, 72]


def test_a_preferred_gang_takes_the_busiest_block_that_holds_it_when_no_domain_does() -> None:
    fleet = fleet_of(4, per_block=2)
    (a0, a1), (b0, b1) = blocks(fleet)
    for d, k in ((a0, 6), (a1, 6), (b0, 10), (b1, 10)):
        leave_idle(fleet, d, k)
    g = gang((11, 4), topology="preferred")
    nodes = VolcanoBinpack().place(fleet, g)
    assert nodes is not None
    assert_bookable(fleet, g, nodes)
    # No domain has 11 idle trays. Block A: used 96 of 144, (96 + 44) / 144; block B: used 64,
    # (64 + 44) / 144. Both hold 11; A scores higher. Its idle trays all score 4/4: lowest index first.
    assert sorted(pods_per_domain(fleet, nodes)) == sorted((a0, a1))
    idle_in_a = sorted(trays(fleet, a0)[:6] + trays(fleet, a1)[:6])
    assert nodes.tolist() == idle_in_a[:11]


def test_a_preferred_gang_too_big_for_every_hypernode_is_binpacked_over_the_platform() -> None:
    fleet = fleet_of(5, per_block=1)  # one domain per block; spine 0 = blocks 0-3, spine 1 = block 4
    idle = sorted(node for d in range(5) for node in leave_idle(fleet, d, 3))
    g = gang((14, 4), topology="preferred")
    nodes = VolcanoBinpack().place(fleet, g)
    assert nodes is not None
    assert_bookable(fleet, g, nodes)
    # 3 idle trays per domain and block, 12 in spine 0, 3 in spine 1: no HyperNode holds 14. Over the
    # platform all 15 idle trays score 4/4, so the 14 of lowest index.
    assert nodes.tolist() == idle[:14]
    assert VolcanoBinpack().place(fleet, gang((16, 4), topology="preferred")) is None


def test_unconstrained_pods_ignore_domains_and_go_to_the_most_allocated_tray() -> None:
    fleet = fleet_of(3)
    fleet.bitmap.allocate(trays(fleet, 2)[17], 2)
    for node in trays(fleet, 1):  # domain 1 is the busiest, 1 GPU used on every tray
        fleet.bitmap.allocate(node, 1)
    # A 2-GPU pod scores (2 + 2) / 4 = 1 on the half-used tray of domain 2, (1 + 2) / 4 in domain 1,
    # 2/4 elsewhere. Required would pick domain 1 (used 18 + 2 of 72 beats 2 + 2 of 72).
    nodes = VolcanoBinpack().place(fleet, gang((1, 2), topology="unconstrained"))
    required = VolcanoBinpack().place(fleet, gang((1, 2), topology="required"))
    assert nodes is not None and nodes.tolist() == [trays(fleet, 2)[17]]
    assert required is not None and pods_per_domain(fleet, required) == {1: 1}


def test_the_whole_gang_shares_one_domain_in_pod_set_order() -> None:
    fleet = fleet_of(2)
    leave_idle(fleet, 0, 4)
    g = gang((4, 4), (1, 2), topology="required")
    nodes = VolcanoBinpack().place(fleet, g)
    assert nodes is not None
    assert_bookable(fleet, g, nodes)
    # Domain 0 has 16 idle GPUs, the gang needs 18: it goes to domain 1, the 2-GPU pod last.
    assert nodes.tolist() == [*trays(fleet, 1)[:4], trays(fleet, 1)[4]]


def test_a_gang_whose_last_pod_set_fits_no_domain_after_the_first_moves_up_to_the_block() -> None:
    fleet = fleet_of(2)
    t0, t1 = trays(fleet, 0), trays(fleet, 1)
    leave_idle(fleet, 0, 6)
    fleet.bitmap.allocate(t0[4], 3)
    fleet.bitmap.allocate(t0[5], 3)
    leave_idle(fleet, 1, 1)
    fleet.bitmap.allocate(t1[0], 2)
    g = gang((4, 4), (1, 2), topology="preferred")
    # Domain 0 has 4 x 4 + 2 x 1 = 18 idle GPUs, as many as the gang asks, but once the 4-GPU pods
    # hold its 4 idle trays the 2-GPU pod fits nowhere in it. Domain 1 has 2 idle GPUs. The block
    # holds both: the 4-GPU pods on domain 0's idle trays, the 2-GPU pod on domain 1's half tray.
    assert VolcanoBinpack().place(fleet, gang((4, 4), (1, 2), topology="required")) is None
    nodes = VolcanoBinpack().place(fleet, g)
    assert nodes is not None
    assert_bookable(fleet, g, nodes)
    assert nodes.tolist() == [*t0[:4], t1[0]]


def test_a_tray_without_its_clique_label_takes_one_pod_gangs_only() -> None:
    fleet = fleet_of(2, unlabeled=2, seed=3)
    detached = np.flatnonzero(fleet.bitmap.domain_flags & domains.DETACHED)
    assert len(detached) == 2
    for d in range(fleet.bitmap.n_domains):
        if d not in detached:
            leave_idle(fleet, d, 0)
    lone = VolcanoBinpack().place(fleet, gang((1, 4), topology="unconstrained"))
    assert lone is not None and fleet.node_domain[lone[0]] in detached
    assert VolcanoBinpack().place(fleet, gang((2, 4), topology="unconstrained")) is None
    assert VolcanoBinpack().place(fleet, gang((1, 4), topology="required")) is None


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**PLACEMENT_CASES)
def test_placements_are_bookable_and_required_ones_stay_in_one_domain(
    busy: list[int], count: int, rest: int, platform: int, topology: TopologyMode
) -> None:
    with busy_mixed_fleet(busy) as fleet:
        bm = fleet.bitmap
        g = case_gang(fleet, count, rest, platform, topology)
        nodes = VolcanoBinpack().place(fleet, g)
        if nodes is None:
            return
        assert_bookable(fleet, g, nodes)
        on_detached = (bm.domain_flags[fleet.node_domain[nodes]] & domains.DETACHED) != 0
        assert g.pods == 1 or not on_detached.any()
        if topology == "required":
            assert len(set(fleet.node_domain[nodes].tolist())) == 1
