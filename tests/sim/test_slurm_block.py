"""Slurm's ``topology/block`` placement on hand-built GB200 fleets: one base block per rack, one level per leaf.

Racks are NVL72: 18 trays of 4 GPUs; a job of N whole trays is N nodes, and
a rack's "capacity" below is its number of idle trays (``leave_idle``).
Expected answers follow ``eval_nodes_block`` at SchedMD/slurm 284c3b95:
ties go to the *last* block (``<=`` in its comparisons), where Kueue's
BestFit takes the first.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kilter.sim.gangs import Gang
from kilter.sim.slurm_block import SlurmBlock, build_layout, segment_for, select
from kilter.topology.fleet import Fleet
from tests.sim.builders import assert_bookable, blocks, fleet_of, gang, leave_idle, pods_per_domain, trays
from tests.sim.conftest import nvl72


def shaped(capacities: list[int], *, per_block: int = 8) -> Fleet:
    fleet = fleet_of(len(capacities), per_block=per_block)
    for d, k in enumerate(capacities):
        leave_idle(fleet, d, k)
    return fleet


def place(fleet: Fleet, g: Gang) -> dict[int, int] | None:
    nodes = SlurmBlock().place(fleet, g)
    if nodes is None:
        return None
    assert_bookable(fleet, g, nodes)
    return pods_per_domain(fleet, nodes)


@pytest.mark.parametrize(
    ("capacities", "expected"),
    [
        pytest.param([18, 10, 6, 12], 2, id="6 idle trays is the least that still holds 5"),
        pytest.param([6, 10, 6, 12], 2, id="two racks of 6: the last, where Kueue takes the first"),
        pytest.param([4, 5, 18, 5], 3, id="4 is too few, 5 is tightest, twice: the last"),
    ],
)
def test_a_job_one_rack_holds_goes_to_the_tightest_rack_that_holds_it(capacities: list[int], expected: int) -> None:
    fleet = shaped(capacities)
    nodes = SlurmBlock().place(fleet, gang((5, 4), topology="preferred"))
    assert nodes is not None
    # Inside the base block nodes are taken in node order: the first five idle trays.
    assert nodes.tolist() == trays(fleet, expected)[:5]


def test_a_job_one_rack_holds_never_splits_over_racks() -> None:
    fleet = shaped([3, 3, 3, 3])  # 12 idle trays, at most 3 in one rack
    assert place(fleet, gang((5, 4), topology="preferred")) is None
    assert place(fleet, gang((3, 4), topology="preferred")) == {3: 3}


@pytest.mark.parametrize(
    ("leaf_a", "leaf_b", "expected"),
    [
        # Both leaves hold 30 in 2 racks (a: 18 + 14, b: 18 + 18); a has fewer idle trays (32 < 54).
        # Inside a no rack holds 30: the roomiest (a0, 18), then the tightest that holds the 12 left (a1).
        pytest.param([18, 14, 0], [18, 18, 18], {"a0": 18, "a1": 12}, id="the leaf of fewest idle trays"),
        # a has 49 idle trays but its two roomiest racks hold 18 + 11 = 29 < 30: only b can.
        # In b the three 18s tie: the last (b2), then the last rack that holds 12 (b1).
        pytest.param([18, 11, 10, 10], [18, 18, 18], {"b2": 18, "b1": 12}, id="a leaf needs the fewest racks"),
    ],
)
def test_a_job_bigger_than_a_rack_takes_the_fewest_racks_in_one_leaf(
    leaf_a: list[int], leaf_b: list[int], expected: dict[str, int]
) -> None:
    fleet = fleet_of(16, per_block=8)
    a, b = blocks(fleet)
    names = {d: f"a{i}" for i, d in enumerate(a)} | {d: f"b{i}" for i, d in enumerate(b)}
    for members, capacities in ((a, leaf_a), (b, leaf_b)):
        for i, d in enumerate(members):
            leave_idle(fleet, d, capacities[i] if i < len(capacities) else 0)
    got = place(fleet, gang((30, 4), topology="preferred"))
    assert got is not None
    assert {names[d]: n for d, n in got.items()} == expected


@pytest.mark.parametrize(
    ("segment", "expected"),
    [
        # Each segment of 16 in the tightest rack that holds 16: rack 0 (16), then rack 1 (17).
        pytest.param(16, {0: 16, 1: 16}, id="segments of 16: the two tightest racks of 16 or more"),
        # Without a segment: 2 racks, the roomiest (18) and the tightest that holds 14 (rack 3, 15).
        pytest.param(0, {2: 18, 3: 14}, id="no segment: 18 + 14, one NVLink group split"),
    ],
)
def test_segments_each_take_one_rack(segment: int, expected: dict[int, int]) -> None:
    fleet = shaped([16, 17, 18, 15])
    slices = ((0, segment),) if segment else ()
    g = Gang(0, 0, ((32, 4),), "preferred", slices=slices)
    assert place(fleet, g) == expected


def test_segments_leave_their_leaf_only_when_not_consolidated() -> None:
    fleet = fleet_of(16, per_block=8)
    (a0, *rest_a), (b0, *rest_b) = blocks(fleet)
    for d in (a0, b0):
        leave_idle(fleet, d, 16)
    for d in rest_a + rest_b:
        leave_idle(fleet, d, 0)
    # 16 idle trays in one rack of each leaf: plain segments of 16 take one each; consolidated ones, or the
    # job without segments, need 32 trays in one leaf: no.
    assert place(fleet, Gang(0, 0, ((32, 4),), "preferred", slices=((0, 16),))) == {a0: 16, b0: 16}
    assert place(fleet, Gang(0, 0, ((32, 4),), "preferred", slices=((1, 32), (0, 16)))) is None
    assert place(fleet, gang((32, 4), topology="preferred")) is None


def test_consolidated_segments_try_the_leaf_of_the_tightest_rack_first_and_the_next_if_they_do_not_fit() -> None:
    fleet = fleet_of(16, per_block=8)
    (a0, a1, a2, *rest_a), (b0, b1, *rest_b) = blocks(fleet)
    for d, k in ((a0, 16), (a1, 10), (a2, 6), (b0, 17), (b1, 18)):
        leave_idle(fleet, d, k)
    for d in rest_a + rest_b:
        leave_idle(fleet, d, 0)
    # Both leaves have 32 idle trays or more (a: 32, b: 35); the tightest rack that holds 16 is a0, so leaf a
    # first: one segment fits (a0) but not the second (10, 6). Leaf a is dropped; in b, b0 (17) then b1.
    asked = Gang(0, 0, ((32, 4),), "preferred", slices=((1, 32), (0, 16)))
    assert place(fleet, asked) == {b0: 16, b1: 16}


@pytest.mark.parametrize(
    ("nodes", "segment"),
    [
        pytest.param(1, 0, id="1 tray: one rack holds it, no segment"),
        pytest.param(18, 0, id="18 trays: a whole rack, no segment"),
        pytest.param(19, 0, id="19 is prime: segments of 1 would scatter it"),
        pytest.param(20, 10, id="20 = 2 x 10, and 2 racks is the fewest"),
        pytest.param(24, 12, id="24 = 2 x 12"),
        pytest.param(32, 16, id="32 = 2 x 16 (NVIDIA's 16 for 128 GPUs)"),
        pytest.param(36, 18, id="36 = 2 x 18"),
        pytest.param(40, 0, id="40 = 4 x 10 but 3 racks hold 40: the block rule"),
        pytest.param(64, 16, id="64 = 4 x 16, ceil(64 / 18) = 4"),
        pytest.param(128, 16, id="128 = 8 x 16, ceil(128 / 18) = 8"),
        pytest.param(256, 0, id="256 = 16 x 16 but ceil(256 / 18) = 15"),
    ],
)
def test_the_operator_sets_the_largest_segment_that_divides_the_job_and_costs_no_rack(nodes: int, segment: int) -> None:
    assert segment_for(nodes, 18) == segment


def test_the_operator_asks_a_segment_only_for_gangs_bigger_than_a_rack() -> None:
    fleet = nvl72(4)
    policy = SlurmBlock()
    assert policy.ask(fleet, gang((5, 4), topology="preferred")).slices == ()
    # 32 trays: segments of 16, consolidated in one leaf (8 racks hold 144 trays)
    assert policy.ask(fleet, gang((32, 4), topology="preferred")).slices == ((1, 32), (0, 16))
    # 256 trays: 16 segments of 16 would take more racks than the 15 the job needs at least
    assert policy.ask(nvl72(16), gang((256, 4), topology="preferred")).slices == ()


@pytest.mark.parametrize(
    ("domains", "per_block", "sizes", "bblocks"),
    [
        pytest.param(40, 8, (18, 144), 40, id="gb200-40: 5 leaves of 8 racks, BlockSizes=18,144"),
        pytest.param(12, 6, (18, 144), 16, id="leaves of 6 racks padded to 8 with empty blocks"),
        pytest.param(3, 1, (18,), 3, id="one rack per leaf: base blocks only"),
    ],
)
def test_the_layout_is_one_base_block_per_rack_and_one_level_per_leaf(
    domains: int, per_block: int, sizes: tuple[int, ...], bblocks: int
) -> None:
    fleet = fleet_of(domains, per_block=per_block)
    layout = build_layout(fleet, 0)
    assert layout.block_sizes() == sizes
    assert layout.n_bblocks == bblocks
    # Every rack is one base block, whole, in node order; a leaf's racks are contiguous.
    filled = [row[row >= 0].tolist() for row in layout.slots if (row >= 0).any()]
    assert sorted(filled) == sorted(trays(fleet, d) for d in range(domains))
    pad = 1 << layout.levels[-1]
    for leaf in blocks(fleet) if per_block > 1 else []:
        rows = {int(layout.bblock_of[trays(fleet, d)[0]]) for d in leaf}
        assert len({r // pad for r in rows}) == 1


def test_a_tray_without_its_clique_label_is_used_only_when_no_block_tray_is_free() -> None:
    fleet = fleet_of(2, unlabeled=2, seed=3)
    layout = build_layout(fleet, 0)
    loose = layout.loose.tolist()
    assert len(loose) == 2 and not (layout.bblock_of[loose] >= 0).any()
    in_blocks = [int(n) for n in layout.slots[layout.slots >= 0]]
    for n in in_blocks[1:]:
        fleet.bitmap.allocate(n, 4)
    one = gang((1, 4), topology="preferred")
    two = gang((2, 4), topology="preferred")
    # One block tray is idle: topology/block places on it, and the loose trays are not its to use.
    assert SlurmBlock().place(fleet, one).tolist() == [in_blocks[0]]  # type: ignore[union-attr]
    assert SlurmBlock().place(fleet, two) is None
    fleet.bitmap.allocate(in_blocks[0], 4)
    # No block tray is free: Slurm leaves the block plugin out and takes the loose ones.
    assert SlurmBlock().place(fleet, two).tolist() == loose  # type: ignore[union-attr]


def test_a_forced_required_request_is_refused_where_the_allocation_would_leave_its_domain() -> None:
    fleet = fleet_of(16, per_block=8)
    # 30 trays take two racks of one leaf: within "required" at the block level, not at the rack level.
    assert SlurmBlock().place(fleet, Gang(0, 0, ((30, 4),), "required", level=1)) is not None
    assert SlurmBlock().place(fleet, Gang(0, 0, ((30, 4),), "required", level=0)) is None


# ---------------------------------------------------------------------- brute force on small fleets


@functools.cache
def two_leaves() -> Fleet:
    """Eight racks, two leaves of four (BlockSizes=18,72); tests book and give back what they use."""
    return fleet_of(8, per_block=4)


@contextlib.contextmanager
def with_idle(capacities: list[int]) -> Iterator[Fleet]:
    fleet = two_leaves()
    busy = [n for d, k in enumerate(capacities) for n in trays(fleet, d)[k:]]
    for n in busy:
        fleet.bitmap.allocate(n, 4)
    try:
        yield fleet
    finally:
        for n in busy:
            fleet.bitmap.release(n, 4)


def fewest_racks_in_one_leaf(fleet: Fleet, capacities: list[int], nodes: int) -> tuple[int, int] | None:
    """By brute force: the fewest racks of one leaf that hold ``nodes`` trays, and the fewest idle trays of a
    block that does so (a rack when one rack is enough, else a leaf); None when no leaf can."""
    least = -(-nodes // 18)
    if least == 1:
        fits = [c for c in capacities if c >= nodes]
        return (1, min(fits)) if fits else None
    found: list[int] = []
    for leaf in blocks(fleet):
        for racks in itertools.combinations(leaf, least):
            if sum(capacities[d] for d in racks) >= nodes:
                found.append(sum(capacities[d] for d in leaf))
                break
    return (least, min(found)) if found else None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capacities=st.lists(st.integers(0, 18), min_size=8, max_size=8),
    segment=st.integers(2, 18),
    segments=st.integers(1, 6),
    consolidate=st.booleans(),
)
def test_segments_fit_exactly_when_the_racks_hold_enough_whole_segments(
    capacities: list[int], segment: int, segments: int, consolidate: bool
) -> None:
    with with_idle(capacities) as fleet:
        nodes = segment * segments
        together = consolidate and nodes <= 72  # a leaf of 4 racks holds 72 trays
        slices = ((1, nodes), (0, segment)) if together else ((0, segment),)
        g = Gang(0, 0, ((nodes, 4),), "preferred", slices=slices)
        got = SlurmBlock().place(fleet, g)
        # Brute force over racks (and leaves): each rack holds floor(idle / segment) segments, whatever the order.
        whole = [c // segment for c in capacities]
        # Consolidated: in one block of the smallest level that holds the job (a rack, else a leaf).
        groups = ([[d] for d in range(8)] if nodes <= 18 else blocks(fleet)) if together else [list(range(8))]
        if max(sum(whole[d] for d in group) for group in groups) < segments:
            assert got is None
            return
        assert got is not None
        assert_bookable(fleet, g, got)
        per_rack = pods_per_domain(fleet, got)
        assert all(n % segment == 0 for n in per_rack.values())  # no segment is ever split over racks
        if together:
            assert len({int(fleet.domain_group[0][d]) for d in per_rack}) == 1


def test_select_reads_only_the_nodes_it_is_given() -> None:
    fleet = fleet_of(2)
    layout = build_layout(fleet, 0)
    available = np.zeros(fleet.n_nodes, dtype=bool)
    available[trays(fleet, 1)[4:9]] = True
    got = select(layout, available, 5)
    assert got is not None and got.tolist() == trays(fleet, 1)[4:9]
    assert select(layout, available, 6) is None
