"""How each baseline's operators ask for a job of a given shape (``--topology-request auto``), and what follows.

Fleets are GB200 NVL72 racks: 18 trays of 4 GPUs per scale-up domain, 8 racks a
block unless a test says otherwise. Kueue TAS's recipe (``topology.tas_recipe``)
is required rack for a gang one rack holds, else rack slices of the largest size
that divides the pod count and fits; Volcano's hard mode asks the lowest tier
that holds the gang; kilter asks preferred.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter.sim.gangs import Gang
from kilter.sim.kueue_tas import KueueTas
from kilter.sim.policies import POLICIES, make_policy
from kilter.sim.volcano_binpack import VolcanoHyperNode, hard_mode_level
from kilter.topology import tas_recipe
from kilter.topology.fleet import Fleet
from tests.sim.builders import assert_bookable, blocks, fleet_of, gang, leave_idle, pods_per_domain, trays


def fail(fleet: Fleet, nodes: list[int]) -> Fleet:
    for node in nodes:
        fleet.bitmap.set_usable(node, False)
    return fleet


@pytest.mark.parametrize(
    ("pods", "failed_in_rack_0", "expected"),
    [
        pytest.param(18, 0, tas_recipe.TasRecipe(True), id="18 pods: a perfect rack holds them, required"),
        pytest.param(1, 0, tas_recipe.TasRecipe(True), id="1 pod: required"),
        # 24 = 2 x 12: 12 is the largest divisor of 24 that is at most 18 (24 and its other divisor 24 are not).
        pytest.param(24, 0, tas_recipe.TasRecipe(False, 12), id="24 pods: slices of 12"),
        pytest.param(36, 0, tas_recipe.TasRecipe(False, 18), id="36 pods: two whole racks"),
        # 19 is prime: only slices of 1, which say nothing.
        pytest.param(19, 0, tas_recipe.TasRecipe(False, 1), id="19 pods: no slice size above one"),
        # Rack 0 lost 2 trays: 16 + 18 + 18 + 18 healthy; 18 pods still fit racks 1-3.
        pytest.param(18, 2, tas_recipe.TasRecipe(True), id="18 pods on a fleet with one damaged rack: required"),
    ],
)
def test_the_recipe_requires_one_rack_where_one_holds_the_gang_else_slices(
    pods: int, failed_in_rack_0: int, expected: tas_recipe.TasRecipe
) -> None:
    fleet = fleet_of(4)
    fail(fleet, trays(fleet, 0)[:failed_in_rack_0])
    assert tas_recipe.recipe(fleet, 0, pods, 4) == expected


def test_slices_are_sized_to_the_healthy_racks_and_none_when_they_cannot_fit() -> None:
    fleet = fleet_of(2)
    fail(fleet, trays(fleet, 0)[:1] + trays(fleet, 1)[:1])  # 17 + 17 healthy trays
    # 18 pods: no rack holds 18; slices of 9 fit (one per rack: 17 // 9 = 1 each, 2 slices).
    assert tas_recipe.recipe(fleet, 0, 18, 4) == tas_recipe.TasRecipe(False, 9)
    # 34 pods: slices of 17 fit both racks exactly.
    assert tas_recipe.recipe(fleet, 0, 34, 4) == tas_recipe.TasRecipe(False, 17)
    # 35 pods exceed the 34 healthy trays: no request can hold them.
    assert tas_recipe.recipe(fleet, 0, 35, 4) is None


def test_a_gang_bigger_than_a_block_adds_block_slices_of_whole_rack_slices() -> None:
    fleet = fleet_of(4, per_block=2)  # two blocks of two racks: 36 trays a block
    # 72 pods: slices of 18 (whole racks); no block holds 72, so outer block slices of 36 = 2 x 18.
    assert tas_recipe.recipe(fleet, 0, 72, 4) == tas_recipe.TasRecipe(False, 18, 36)
    # 36 pods fit one block: the outer layer would change nothing and is left out.
    assert tas_recipe.recipe(fleet, 0, 36, 4) == tas_recipe.TasRecipe(False, 18)


@given(
    pods=st.integers(1, 80),
    failed=st.lists(st.integers(0, 71), max_size=12, unique=True),
    per_pod=st.sampled_from([1, 2, 4]),
)
@settings(max_examples=150, deadline=None)
def test_the_recipe_agrees_with_a_brute_force_over_slice_sizes(pods: int, failed: list[int], per_pod: int) -> None:
    fleet = fail(fleet_of(4), failed)
    # Pods that fit each rack: its healthy trays x (4 // GPUs per pod).
    holds = [sum(1 for t in trays(fleet, d) if t not in failed) * (4 // per_pod) for d in range(4)]
    got = tas_recipe.recipe(fleet, 0, pods, per_pod)
    if max(holds) >= pods:
        assert got == tas_recipe.TasRecipe(True)
        return
    fitting = [d for d in range(1, pods) if pods % d == 0 and sum(h // d for h in holds) >= pods // d]
    assert got == (tas_recipe.TasRecipe(False, max(fitting)) if fitting else None)


def test_kueue_tas_asks_as_the_recipe_says_and_kueue_tas_preferred_asks_preferred() -> None:
    fleet = fleet_of(4)
    small, big, odd = (Gang(-1, 0, ((n, 4),), "preferred") for n in (10, 24, 19))
    kueue = KueueTas()
    assert (kueue.ask(fleet, small).topology, kueue.ask(fleet, small).slices) == ("required", ())
    # A gang no rack holds asks from the block up, as kilter's webhook writes it (BestFit climbs there anyway).
    assert (kueue.ask(fleet, big).topology, kueue.ask(fleet, big).level) == ("preferred", 1)
    assert kueue.ask(fleet, big).slices == ((0, 12),)
    assert (kueue.ask(fleet, odd).topology, kueue.ask(fleet, odd).slices) == ("preferred", ())
    weak = KueueTas(name="kueue-tas-preferred", recommended=False)
    for g in (small, big, odd):
        assert (weak.ask(fleet, g).topology, weak.ask(fleet, g).slices) == ("preferred", ())


def test_a_gang_bigger_than_a_block_asks_block_slices_of_rack_slices_and_gets_whole_racks() -> None:
    fleet = fleet_of(4, per_block=2)
    policy = KueueTas()
    g = policy.ask(fleet, Gang(0, 0, ((72, 4),), "preferred"))
    assert (g.topology, g.level, g.slices) == ("preferred", 1, ((1, 36), (0, 18)))
    nodes = policy.place(fleet, g)
    assert nodes is not None
    assert_bookable(fleet, g, nodes)
    assert sorted(pods_per_domain(fleet, nodes).values()) == [18, 18, 18, 18]


def test_a_recommended_kueue_gang_that_fits_one_rack_waits_where_the_preferred_setup_splits() -> None:
    fleet = fleet_of(3)
    for d in range(3):
        leave_idle(fleet, d, 8)
    g = Gang(0, 0, ((10, 4),), "preferred")
    # 8 idle trays a rack: the preferred setup takes 8 + 2 over two racks, the recommended one waits.
    split = KueueTas(recommended=False)
    nodes = split.place(fleet, split.ask(fleet, g))
    assert nodes is not None and sorted(pods_per_domain(fleet, nodes).values()) == [2, 8]
    recommended = KueueTas()
    assert recommended.place(fleet, recommended.ask(fleet, g)) is None


@pytest.mark.parametrize(
    ("pods", "per_block", "level"),
    [
        pytest.param(18, 8, 0, id="18 trays: tier 1, the rack"),
        pytest.param(19, 8, 1, id="19 trays: tier 2, the block"),
        pytest.param(144, 8, 1, id="144 trays: a whole block of 8 racks"),
        # Blocks of 2 racks hold 36 trays; 37 need a spine (tier 3) of 4 blocks.
        pytest.param(37, 2, 2, id="37 trays over blocks of 2 racks: tier 3, the spine"),
    ],
)
def test_volcano_hard_mode_asks_the_lowest_tier_that_holds_the_gang(pods: int, per_block: int, level: int) -> None:
    fleet = fleet_of(8, per_block=per_block)
    g = Gang(-1, 0, ((pods, 4),), "preferred")
    assert hard_mode_level(fleet, g) == level
    asked = VolcanoHyperNode().ask(fleet, g)
    assert (asked.topology, asked.level) == ("required", level)


def test_volcano_hard_mode_never_places_a_gang_beyond_its_tier() -> None:
    fleet = fleet_of(4, per_block=2)
    (a0, a1), (b0, b1) = blocks(fleet)
    for d, k in ((a0, 10), (a1, 10), (b0, 12), (b1, 12)):
        leave_idle(fleet, d, k)
    policy = VolcanoHyperNode()
    # 22 trays: no rack holds them, nor block A (20 idle); block B (24 idle) does: tier 2 places them there.
    g = policy.ask(fleet, Gang(0, 0, ((22, 4),), "preferred"))
    assert g.level == 1
    nodes = policy.place(fleet, g)
    assert nodes is not None
    assert_bookable(fleet, g, nodes)
    assert set(pods_per_domain(fleet, nodes)) <= {b0, b1}
    # 26 trays: no block holds them now (20 and 24 idle), only both; tier 2 is as high as it may go: it waits.
    assert policy.place(fleet, dataclass_with_pods(g, 26)) is None


def dataclass_with_pods(g: Gang, pods: int) -> Gang:
    return Gang(g.job, g.platform, ((pods, 4),), g.topology, g.level, g.slices)


@given(busy=st.lists(st.integers(0, 18), min_size=8, max_size=8), pods=st.integers(1, 60))
@settings(max_examples=80, deadline=None)
def test_volcano_hard_mode_stays_inside_one_hypernode_of_its_tier_or_places_nothing(busy: list[int], pods: int) -> None:
    fleet = fleet_of(8, per_block=2)
    for d, k in enumerate(busy):
        leave_idle(fleet, d, 18 - k)
    policy = VolcanoHyperNode()
    g = policy.ask(fleet, Gang(0, 0, ((pods, 4),), "preferred"))
    nodes = policy.place(fleet, g)
    groups = [np.arange(8), *fleet.domain_group]
    if nodes is None:
        # Nothing holds it within the tier: every HyperNode of the tier and below has fewer idle trays.
        idle = np.asarray([18 - k for k in busy])
        for level in range(g.level + 1):
            member = groups[level]
            assert all(idle[member == h].sum() < pods for h in np.unique(member))
        return
    assert_bookable(fleet, g, nodes)
    doms = np.unique(fleet.node_domain[nodes])
    assert len(np.unique(groups[g.level][doms])) == 1


def test_every_registered_policy_asks_something_every_shape_can_be_placed_as_on_the_idle_fleet() -> None:
    fleet = fleet_of(4)
    for name, pods in itertools.product(POLICIES, (1, 9, 18, 24, 36, 72)):
        policy = make_policy(name)
        g = Gang(0, 0, ((pods, 4),), "preferred")
        asked = policy.ask(fleet, g) if hasattr(policy, "ask") else g
        assert asked.pod_sets == g.pod_sets and asked.job == g.job
        nodes = policy.place(fleet, asked)
        assert nodes is not None, (name, pods)
        assert_bookable(fleet, asked, nodes)


def test_kilter_and_the_kueue_setup_behind_kilters_admission_check_are_the_two_that_wait() -> None:
    waiting = {name for name in POLICIES if getattr(make_policy(name), "waits_for_fewer_domains", False)}
    assert waiting == {"kilter", "kueue-tas-kilter-wait"}
    assert gang((4, 4), topology="preferred").slices == ()
