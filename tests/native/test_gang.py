"""The gang planner: each objective as a named case, then native == twin plus invariants on random fleets."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kilter._native import domains, gang
from kilter._native.twin import domains as twin_domains
from kilter._native.twin import gang as twin_gang
from tests.conftest import Arrays

PodSet = tuple[int, int, int, int, int, int]  # count, gpus, required, preferred, slice size, slice level
N, NODE, DOMAIN, UP = gang.NONE, gang.NODE, gang.DOMAIN, gang.UP


def run(
    mod: Any, fl: Any, pod_sets: list[PodSet], *, platform: int = -1, node_ok: Any = None
) -> tuple[int, list[int], list[int]]:
    result = mod.plan_gang(fl, mod.PodSets(pod_sets), platform, node_ok)
    return outcome(result)


def outcome(result: Any) -> tuple[int, list[int], list[int]]:
    """(status, a node per pod, [pods needed, pods offered, failing pod set, its level]) of a plan."""
    return int(result.status), result.nodes.tolist(), [result.need, result.offered, result.pod_set, result.level]


def plan(arrays: Arrays, pod_sets: list[PodSet], **kw: Any) -> tuple[int, list[int], list[int]]:
    """Plan with the core and the twin; they must agree exactly."""
    native = run(gang, domains.FleetBitmap(*arrays.args()), pod_sets, **kw)
    ref = run(twin_gang, twin_domains.FleetBitmap(*arrays.args()), pod_sets, **kw)
    assert native == ref
    return native


def domains_of(arrays: Arrays, nodes: list[int]) -> list[int]:
    return sorted({arrays.node_domain[n] for n in nodes})


def tray(n: int, busy: int = 0, down: int = 0, **kw: Any) -> dict[str, Any]:
    """A domain of n 4-GPU trays, the first `busy` fully booked, the last `down` unusable."""
    return {
        "gpus": [4] * n,
        "used": [4] * busy + [0] * (n - busy),
        "usable": [1] * (n - down) + [0] * down,
        **kw,
    }


def fleet(*specs: dict[str, Any]) -> Arrays:
    arrays = Arrays()
    for spec in specs:
        arrays.domain(**spec)
    return arrays


def test_best_fit_picks_the_tightest_partly_used_domain() -> None:
    # Idle trays: A 18 (wholly idle), B 10, C 5. Eight trays fit B and A; B is tighter.
    arrays = fleet(tray(18), tray(18, busy=8), tray(18, busy=13))
    status, nodes, _ = plan(arrays, [(8, 4, N, DOMAIN, 1, N)])
    assert status == gang.OK
    assert domains_of(arrays, nodes) == [1]
    assert nodes == list(range(18 + 8, 18 + 16))


def test_a_gang_that_fits_one_domain_gets_one_domain() -> None:
    arrays = fleet(tray(18, busy=10), tray(18, busy=6), tray(18, busy=2))
    status, nodes, _ = plan(arrays, [(15, 4, N, N, 1, N)])
    assert status == gang.OK
    assert domains_of(arrays, nodes) == [2]


def test_fewest_domains_then_least_slack() -> None:
    # Idle trays 18, 12, 9, 8: 20 trays need two domains; 12 + 8 leaves no slack.
    arrays = fleet(tray(18), tray(18, busy=6), tray(18, busy=9), tray(18, busy=10))
    status, nodes, _ = plan(arrays, [(20, 4, N, N, 1, N)])
    assert status == gang.OK
    assert domains_of(arrays, nodes) == [1, 3]
    assert Counter(arrays.node_domain[n] for n in nodes) == {1: 12, 3: 8}


def test_a_wholly_idle_domain_stays_whole_when_a_partly_used_one_fits_as_well() -> None:
    # A: 16 usable trays (two down), all idle. B: 17 usable trays, one busy. Both hold 16 trays.
    arrays = fleet(tray(18, down=2), tray(18, busy=1, down=1))
    status, nodes, _ = plan(arrays, [(16, 4, N, N, 1, N)])
    assert status == gang.OK
    assert domains_of(arrays, nodes) == [1]


def test_a_multi_domain_gang_stays_under_one_block_when_that_costs_no_extra_domain() -> None:
    # Block 0: 10 + 10 idle trays; block 1: 15 + 6; block 2: 18 + 18. Twenty trays need two
    # domains anywhere; blocks 0 and 1 manage it and block 0 is tighter (20 < 21 < 36).
    arrays = fleet(
        tray(18, busy=8, groups=[0]),
        tray(18, busy=8, groups=[0]),
        tray(18, busy=3, groups=[1]),
        tray(18, busy=12, groups=[1]),
        tray(18, groups=[2]),
        tray(18, groups=[2]),
    )
    status, nodes, _ = plan(arrays, [(20, 4, N, N, 1, N)])
    assert status == gang.OK
    assert domains_of(arrays, nodes) == [0, 1]


def test_fewer_domains_beat_staying_in_one_block() -> None:
    # Block 0 holds 16 trays only as 8 + 8; block 1 has one domain with 16 idle trays.
    arrays = fleet(tray(18, busy=10, groups=[0]), tray(18, busy=10, groups=[0]), tray(18, busy=2, groups=[1]))
    _, nodes, _ = plan(arrays, [(16, 4, N, N, 1, N)])
    assert domains_of(arrays, nodes) == [2]


def test_a_preferred_block_outranks_the_domain_count() -> None:
    # Block 0: 10 + 10 + 10 idle trays; blocks 1 and 2: 12 each. 24 trays take two domains
    # across blocks 1 and 2, or three inside block 0; preferring one block chooses the latter.
    arrays = fleet(
        tray(18, busy=8, groups=[0]),
        tray(18, busy=8, groups=[0]),
        tray(18, busy=8, groups=[0]),
        tray(18, busy=6, groups=[1]),
        tray(18, busy=6, groups=[2]),
    )
    assert domains_of(arrays, plan(arrays, [(24, 4, N, N, 1, N)])[1]) == [3, 4]
    status, nodes, _ = plan(arrays, [(24, 4, N, UP + 0, 1, N)])
    assert status == gang.OK
    assert domains_of(arrays, nodes) == [0, 1, 2]


def test_required_domain_reports_the_roomiest_domain() -> None:
    arrays = fleet(tray(18, down=1), tray(18, busy=3))
    status, nodes, info = plan(arrays, [(18, 4, DOMAIN, N, 1, N)])
    assert status == gang.REQUIRED_TOO_SMALL
    assert nodes == [-1] * 18
    assert info == [18, 17, 0, DOMAIN]


def test_required_block_takes_the_block_needing_fewest_domains_then_the_tightest() -> None:
    # Idle trays: block 0 one domain of 18; block 1 9 + 9; block 2 14 + 14.
    arrays = fleet(
        tray(18, groups=[0]),
        tray(18, busy=9, groups=[1]),
        tray(18, busy=9, groups=[1]),
        tray(18, busy=4, groups=[2]),
        tray(18, busy=4, groups=[2]),
    )
    status, nodes, _ = plan(arrays, [(18, 4, UP + 0, N, 1, N)])
    assert status == gang.OK
    assert domains_of(arrays, nodes) == [0]  # one domain beats two
    status, nodes, _ = plan(arrays, [(20, 4, UP + 0, N, 1, N)])
    assert domains_of(arrays, nodes) == [3, 4]  # only block 2 (28 idle) holds 20
    status, nodes, _ = plan(arrays, [(10, 4, UP + 0, N, 1, N)])
    assert domains_of(arrays, nodes) == [0]  # blocks 0 and 2 need one domain; block 0 (18) is tighter than 2 (28)


def test_required_block_fails_when_no_block_is_big_enough() -> None:
    arrays = fleet(tray(18, busy=9, groups=[0]), tray(18, busy=9, groups=[1]))
    status, _, info = plan(arrays, [(10, 4, UP + 0, N, 1, N)])
    assert status == gang.REQUIRED_TOO_SMALL
    assert info == [10, 9, 0, UP]


def test_required_node_puts_every_pod_on_one_node() -> None:
    arrays = Arrays().domain([8, 8], used=[6, 2])
    status, nodes, _ = plan(arrays, [(3, 2, NODE, N, 1, N)])
    assert status == gang.OK
    assert nodes == [1, 1, 1]


def test_slices_each_stay_inside_one_domain() -> None:
    # Idle trays 12, 12, 5: four slices of 6 fit as 2 + 2 (the 5-tray domain holds none).
    arrays = fleet(tray(18, busy=6), tray(18, busy=6), tray(18, busy=13))
    status, nodes, _ = plan(arrays, [(24, 4, N, N, 6, DOMAIN)])
    assert status == gang.OK
    for s in range(4):
        assert len(domains_of(arrays, nodes[6 * s : 6 * s + 6])) == 1
    assert domains_of(arrays, nodes) == [0, 1]


def test_slices_that_fit_only_when_split_are_refused_with_their_own_reason() -> None:
    arrays = fleet(*(tray(18, busy=13) for _ in range(5)))  # 25 idle trays in slivers of 5
    status, _, info = plan(arrays, [(24, 4, N, N, 6, DOMAIN)])
    assert status == gang.SLICES_DO_NOT_FIT
    assert info[0] == 24


def test_node_level_slices_put_each_slice_on_one_node() -> None:
    arrays = Arrays().domain([4, 4, 4], used=[3, 0, 2])
    status, nodes, _ = plan(arrays, [(4, 1, N, N, 2, NODE)])
    assert status == gang.OK
    assert nodes[0] == nodes[1] and nodes[2] == nodes[3]


def test_block_level_slices_each_stay_in_one_block() -> None:
    arrays = fleet(tray(4, groups=[0]), tray(4, groups=[0]), tray(2, groups=[1]), tray(2, groups=[1]))
    status, nodes, _ = plan(arrays, [(6, 4, N, N, 3, UP + 0)])
    assert status == gang.OK
    blocks = [arrays.groups[arrays.node_domain[n]][0] for n in nodes]
    assert len(set(blocks[:3])) == 1 and len(set(blocks[3:])) == 1


def test_a_detached_node_serves_only_single_pod_gangs() -> None:
    arrays = Arrays().domain([4], detached=True).domain([4], detached=True)
    assert plan(arrays, [(1, 4, N, N, 1, N)])[0] == gang.OK
    status, _, info = plan(arrays, [(2, 4, N, N, 1, N)])
    assert status == gang.NO_CAPACITY
    assert info[1] == 0


def test_only_nodes_of_the_requested_platform_are_used() -> None:
    arrays = fleet(tray(18, platform=0), tray(4, platform=1))
    _, nodes, _ = plan(arrays, [(2, 4, N, N, 1, N)], platform=0)
    assert domains_of(arrays, nodes) == [0]


def test_ineligible_nodes_are_never_used() -> None:
    arrays = fleet(tray(4))
    ok = np.array([0, 1, 0, 1], dtype=np.uint8)
    _, nodes, _ = plan(arrays, [(2, 4, N, N, 1, N)], node_ok=ok)
    assert sorted(nodes) == [1, 3]
    assert plan(arrays, [(3, 4, N, N, 1, N)], node_ok=ok)[0] == gang.NO_CAPACITY


def test_a_second_pod_set_joins_the_domain_of_the_first() -> None:
    # Master (1 tray) and workers (12 trays): domain 1 has 14 idle trays, domain 0 has 18.
    arrays = fleet(tray(18), tray(18, busy=4))
    status, nodes, _ = plan(arrays, [(1, 4, N, N, 1, N), (12, 4, N, N, 1, N)])
    assert status == gang.OK
    assert domains_of(arrays, nodes) == [1]


def test_no_capacity_reports_what_does_fit() -> None:
    arrays = fleet(tray(18, busy=15), tray(18, busy=16))
    status, _, info = plan(arrays, [(10, 4, N, N, 1, N)])
    assert status == gang.NO_CAPACITY
    assert info == [10, 5, 0, N]


def test_planning_changes_nothing_in_the_fleet() -> None:
    fl = domains.FleetBitmap(*fleet(tray(18, busy=3), tray(18)).args())
    before = fl.free_words
    assert run(gang, fl, [(20, 4, N, N, 1, N), (2, 2, N, N, 1, N)])[0] == gang.OK
    assert (fl.free_words == before).all()
    assert fl.node_used_gpus.sum() == 12


@pytest.mark.parametrize(
    "pod_sets",
    [
        pytest.param([(0, 4, N, N, 1, N)], id="zero pods"),
        pytest.param([(4, 0, N, N, 1, N)], id="zero GPUs"),
        pytest.param([(4, 4, 7, N, 1, N)], id="level beyond the fleet's levels"),
        pytest.param([(6, 4, N, N, 4, DOMAIN)], id="slice size that does not divide the count"),
    ],
)
def test_malformed_pod_sets_raise_value_error(pod_sets: list[PodSet]) -> None:
    fl = domains.FleetBitmap(*fleet(tray(4, groups=[0])).args())
    with pytest.raises(ValueError):
        run(gang, fl, pod_sets)


@pytest.mark.parametrize(
    ("pod_sets", "words"),
    [
        pytest.param([(4, 4, N, N, 1, N), (0, 4, N, N, 1, N)], "pod set 1: count and gpus must be >= 1", id="zero"),
        pytest.param([(4, 4, N, -2, 1, N)], "pod set 0: level -2 below -1", id="level below none"),
        pytest.param([(4, 4, N, N, 1, N), (4, 4, 3, N, 1, N)], "pod set 1: level 3 outside -1..2", id="level above"),
        pytest.param([(6, 4, N, N, 4, DOMAIN)], "pod set 0: slice size 4 must divide count 6", id="slice size"),
        pytest.param([(2**29, 1, N, N, 1, N)] * 3, "too many pods in one gang", id="more than 2^30 pods"),
    ],
)
def test_core_and_twin_refuse_the_same_pod_sets_in_the_same_words(pod_sets: list[PodSet], words: str) -> None:
    arrays = fleet(tray(4, groups=[0]))
    for mod, fl_mod in ((gang, domains), (twin_gang, twin_domains)):
        with pytest.raises(ValueError, match=f"^{re.escape(words)}$"):
            run(mod, fl_mod.FleetBitmap(*arrays.args()), pod_sets)


def test_pod_sets_built_once_plan_the_same_every_time_and_the_answer_says_ok() -> None:
    arrays = fleet(tray(18, busy=3), tray(18))
    for mod, fl_mod in ((gang, domains), (twin_gang, twin_domains)):
        fl = fl_mod.FleetBitmap(*arrays.args())
        ask = mod.PodSets([(20, 4, N, N, 1, N), (2, 2, N, N, 1, N)])
        assert (len(ask), ask.n_sets, ask.total) == (2, 2, 22)
        first, second = mod.plan_gang(fl, ask), mod.plan_gang(fl, ask)
        assert first.ok and second.ok
        assert first.nodes.tolist() == second.nodes.tolist()
        assert outcome(first)[2] == [0, 0, -1, -1]
        refused = mod.plan_gang(fl, mod.PodSets([(40, 4, N, N, 1, N)]))
        assert not refused.ok and outcome(refused) == (gang.NO_CAPACITY, [-1] * 40, [40, 33, 0, N])


def test_node_ok_of_the_wrong_length_is_refused() -> None:
    arrays = fleet(tray(4))
    for mod, fl_mod in ((gang, domains), (twin_gang, twin_domains)):
        with pytest.raises(ValueError, match="node_ok needs one entry per node"):
            run(mod, fl_mod.FleetBitmap(*arrays.args()), [(1, 4, N, N, 1, N)], node_ok=np.ones(3, dtype=np.uint8))


# ---------------------------------------------------------------- properties


@st.composite
def random_fleets(draw: st.DrawFn) -> Arrays:
    arrays = Arrays()
    n_levels = draw(st.integers(0, 2))
    for _ in range(draw(st.integers(1, 9))):
        tb = draw(st.sampled_from([1, 2, 4, 8]))
        n = draw(st.integers(1, 18 if tb <= 4 else 9))
        gpus = [draw(st.integers(1, tb)) for _ in range(n)]
        used = [draw(st.integers(0, g)) for g in gpus]
        usable = [int(draw(st.integers(0, 9)) > 0) for _ in gpus]
        groups = [draw(st.integers(-1, 2)) for _ in range(n_levels)]
        arrays.domain(
            gpus,
            used=used,
            usable=usable,
            tray_bits=tb,
            platform=draw(st.integers(0, 1)),
            detached=n == 1 and draw(st.booleans()),
            groups=groups,
        )
    return arrays


@st.composite
def random_gangs(draw: st.DrawFn, n_levels: int) -> list[PodSet]:
    sets = []
    levels = st.integers(-1, 1 + n_levels)
    for _ in range(draw(st.integers(1, 3))):
        count = draw(st.integers(1, 24))
        divisors = [d for d in range(1, count + 1) if count % d == 0]
        sets.append(
            (
                count,
                draw(st.integers(1, 8)),
                draw(levels),
                draw(levels),
                draw(st.sampled_from(divisors)),
                draw(levels),
            )
        )
    return sets


def n_levels(arrays: Arrays) -> int:
    return max((len(g) for g in arrays.groups), default=0)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_core_and_twin_agree_and_every_plan_keeps_the_rules(data: st.DataObject) -> None:
    arrays = data.draw(random_fleets())
    pod_sets = data.draw(random_gangs(n_levels(arrays)))
    platform = data.draw(st.integers(-1, 1))
    native = domains.FleetBitmap(*arrays.args())
    ok = None
    if data.draw(st.booleans()):
        ok = np.array([data.draw(st.integers(0, 3)) > 0 for _ in range(native.n_nodes)], dtype=np.uint8)
    free_before = [native.node_free_gpus(n) for n in range(native.n_nodes)]
    status, nodes, info = run(gang, native, pod_sets, platform=platform, node_ok=ok)
    assert (status, nodes, info) == run(
        twin_gang, twin_domains.FleetBitmap(*arrays.args()), pod_sets, platform=platform, node_ok=ok
    )
    assert [native.node_free_gpus(n) for n in range(native.n_nodes)] == free_before
    if status != gang.OK:
        assert nodes == [-1] * len(nodes)
        return
    booked: Counter[int] = Counter()
    pos = 0
    for count, gpus, required, _, size, slice_level in pod_sets:
        pods = nodes[pos : pos + count]
        pos += count
        for n in pods:
            booked[n] += gpus
            d = arrays.node_domain[n]
            assert arrays.node_usable[n]
            assert ok is None or ok[n]
            assert platform < 0 or arrays.platform[d] == platform
            assert not arrays.flags[d] or sum(ps[0] for ps in pod_sets) == 1
        if required == NODE:
            assert len(set(pods)) == 1
        elif required == DOMAIN:
            assert len(domains_of(arrays, pods)) == 1
        elif required >= UP:
            assert len({arrays.groups[arrays.node_domain[n]][required - UP] for n in pods}) == 1
            assert all(arrays.groups[arrays.node_domain[n]][required - UP] >= 0 for n in pods)
        if slice_level >= 0 and size > 1 and not (required >= 0 and slice_level >= required):
            for s in range(0, count, size):
                chunk = pods[s : s + size]
                if slice_level == NODE:
                    assert len(set(chunk)) == 1
                elif slice_level == DOMAIN:
                    assert len(domains_of(arrays, chunk)) == 1
                else:
                    assert len({arrays.groups[arrays.node_domain[n]][slice_level - UP] for n in chunk}) == 1
    for n, g in booked.items():
        assert g <= free_before[n], "a node was booked beyond its idle GPUs"


def capacities(arrays: Arrays, gpus: int) -> list[int]:
    """Pods of `gpus` GPUs each domain holds; detached domains hold none for multi-pod gangs."""
    fl = domains.FleetBitmap(*arrays.args())
    caps = fl.capacity(gpus).tolist()
    return [c if not arrays.flags[d] else 0 for d, c in enumerate(caps)]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_an_unconstrained_gang_uses_the_fewest_domains_possible(data: st.DataObject) -> None:
    arrays = data.draw(random_fleets())
    gpus = data.draw(st.integers(1, 4))
    caps = sorted(capacities(arrays, gpus), reverse=True)
    assume(sum(caps) >= 2)
    count = data.draw(st.integers(2, sum(caps)))
    minimum = next(k for k in range(1, len(caps) + 1) if sum(caps[:k]) >= count)
    status, nodes, _ = plan(arrays, [(count, gpus, N, N, 1, N)])
    assert status == gang.OK
    assert len(domains_of(arrays, nodes)) == minimum


@settings(max_examples=300, deadline=None)
@given(random_fleets(), st.integers(2, 40), st.integers(1, 8))
def test_a_gang_is_refused_for_capacity_only_when_it_cannot_fit(arrays: Arrays, count: int, gpus: int) -> None:
    status, _, info = plan(arrays, [(count, gpus, N, N, 1, N)])
    total = sum(capacities(arrays, gpus))
    assert (status == gang.NO_CAPACITY) == (total < count)
    if status == gang.NO_CAPACITY:
        assert info[1] == total


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_one_domain_gangs_take_the_tightest_domain_and_a_partly_used_one_at_equal_fit(
    data: st.DataObject,
) -> None:
    arrays = data.draw(random_fleets())
    gpus = data.draw(st.integers(1, 4))
    caps = capacities(arrays, gpus)
    assume(max(caps) >= 2)
    count = data.draw(st.integers(2, max(caps)))
    idle = domains.FleetBitmap(*arrays.args()).wholly_free()
    _, nodes, _ = plan(arrays, [(count, gpus, N, N, 1, N)])
    chosen = domains_of(arrays, nodes)
    assert len(chosen) == 1
    fits = [d for d, c in enumerate(caps) if c >= count]
    assert caps[chosen[0]] == min(caps[d] for d in fits)
    equally_tight = [d for d in fits if caps[d] == caps[chosen[0]]]
    if any(not idle[d] for d in equally_tight):
        assert not idle[chosen[0]]
