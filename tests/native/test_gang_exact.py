"""The domain set is chosen exactly: the issue's examples, brute force on small fleets, rank order, the slack's home."""

from __future__ import annotations

import random
from collections import Counter
from itertools import combinations
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kilter._native import domains, domainset, gang
from kilter._native.twin import domains as twin_domains
from kilter._native.twin import domainset as twin_domainset
from kilter._native.twin import gang as twin_gang
from tests.conftest import Arrays, i32
from tests.native.test_gang import DOMAIN, UP, N, PodSet, domains_of, fleet, outcome, plan, run, tray


def leaves_of(arrays: Arrays, nodes: list[int]) -> set[int]:
    return {arrays.groups[arrays.node_domain[n]][0] for n in nodes}


# ---------------------------------------------------------------- the examples (free 4-GPU trays per rack)


def test_two_partly_used_racks_beat_an_idle_rack_plus_a_sliver() -> None:
    # Free trays 18 (idle), 2, 10, 10; 20 pods. 18 + 2 and 10 + 10 both fit exactly; only the first breaks an idle rack.
    arrays = fleet(tray(18), tray(18, busy=16), tray(18, busy=8), tray(18, busy=8))
    status, nodes, _ = plan(arrays, [(20, 4, N, N, 1, N)])
    assert status == gang.OK
    assert domains_of(arrays, nodes) == [2, 3]


def test_an_even_pair_keeps_the_large_hole_whole() -> None:
    # Free trays 17 (one busy), 9, 9, 1; 18 pods. 17 + 1 and 9 + 9 both fit exactly; 9^2 + 9^2 = 162 < 17^2 + 1 = 290,
    # so 9 + 9 wins and the 17-tray hole stays for the next 17-pod gang.
    arrays = fleet(tray(18, busy=1), tray(18, busy=9), tray(18, busy=9), tray(18, busy=17))
    status, nodes, _ = plan(arrays, [(18, 4, N, N, 1, N)])
    assert status == gang.OK
    assert domains_of(arrays, nodes) == [1, 2]


def test_the_best_fitting_pair_inside_one_leaf_wins() -> None:
    # Leaf 0 free trays 18, 4, 1, 1; leaf 1 12, 9, 5; 20 pods. One leaf holds two racks that fit: 18 + 4 = 22 in leaf 0
    # (an idle rack broken), 12 + 9 = 21 in leaf 1 (one spare tray): leaf 1.
    arrays = fleet(
        tray(18, groups=[0]),
        tray(18, busy=14, groups=[0]),
        tray(18, busy=17, groups=[0]),
        tray(18, busy=17, groups=[0]),
        tray(18, busy=6, groups=[1]),
        tray(18, busy=9, groups=[1]),
        tray(18, busy=13, groups=[1]),
    )
    status, nodes, _ = plan(arrays, [(20, 4, N, N, 1, N)])
    assert status == gang.OK
    assert domains_of(arrays, nodes) == [4, 5]
    assert len(nodes) == 20


def test_three_racks_take_two_leaves_not_three() -> None:
    # Racks a, b, c, d with 10 free trays each; a and d under leaf 0, b under leaf 1, c under leaf 2; 30 pods.
    arrays = fleet(
        tray(18, busy=8, groups=[0]),
        tray(18, busy=8, groups=[1]),
        tray(18, busy=8, groups=[2]),
        tray(18, busy=8, groups=[0]),
    )
    status, nodes, _ = plan(arrays, [(30, 4, N, N, 1, N)])
    assert status == gang.OK
    assert domains_of(arrays, nodes) == [0, 1, 3]  # a, b, d
    assert leaves_of(arrays, nodes) == {0, 1}


def realistic_fleet(seed: int) -> Arrays:
    """4 spines x 4 leaves x 8 GB200 racks: a quarter idle, a sixth full, the rest partly used in whole trays."""
    rng = random.Random(seed)
    arrays = Arrays()
    for leaf in range(16):
        for _ in range(8):
            draw = rng.random()
            busy = 0 if draw < 1 / 4 else 18 if draw < 1 / 4 + 1 / 6 else rng.randint(1, 17)
            arrays.domain([4] * 18, used=[4] * busy + [0] * (18 - busy), groups=[leaf, leaf // 4])
    return arrays


def fewest_leaves(arrays: Arrays, pods: int) -> int:
    """Brute force: the fewest leaves whose racks can hold ``pods`` 4-GPU pods in the fewest racks overall."""
    caps = [0] * 128
    for n, d in enumerate(arrays.node_domain):
        caps[d] += arrays.node_used[n] == 0
    k = next(k for k in range(1, 129) if sum(sorted(caps, reverse=True)[:k]) >= pods)
    for b in range(1, 17):
        for leaves in combinations(range(16), b):
            inside = sorted((caps[d] for d in range(128) if arrays.groups[d][0] in leaves), reverse=True)
            if sum(inside[:k]) >= pods:
                return b
    raise AssertionError("the fleet cannot hold the gang")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_gang_larger_than_any_leaf_takes_the_fewest_leaves(seed: int) -> None:
    arrays = realistic_fleet(seed)
    status, nodes, _ = plan(arrays, [(300, 4, N, DOMAIN, 1, N)])
    assert status == gang.OK
    assert len(leaves_of(arrays, nodes)) == fewest_leaves(arrays, 300)  # 3 or 4 leaves of 8 racks


# ---------------------------------------------------------------- brute force on small fleets


def brute_force(fl: Any, caps: Any, live: Any, need: int) -> list[int]:
    """Every set of the fewest live domains that covers ``need``, compared by the twin's objective tuple."""
    k, _, _ = twin_domainset.fewest(caps, live, need)
    if k == 0:
        return []
    doms = [d for d in range(fl.n_domains) if live[d]]
    sets = [list(s) for s in combinations(doms, k) if sum(caps[d] for d in s) >= need]
    return min(sets, key=lambda s: twin_domainset.objective(fl, caps, s))


def checked_brute_force(fl: Any, caps: Any, live: Any, need: int) -> list[int]:
    exact = brute_force(fl, caps, live, need)
    searched = twin_domainset.choose(fl, caps, live, need)
    assert twin_domainset.objective(fl, caps, searched) == twin_domainset.objective(fl, caps, exact)
    return exact


@st.composite
def nested_fleets(draw: st.DrawFn) -> Arrays:
    """Up to 10 domains of 4-GPU trays, some failed, some busy or partly busy, under blocks and spines that nest."""
    arrays = Arrays()
    n_levels = draw(st.integers(0, 2))
    for _ in range(draw(st.integers(2, 10))):
        n = draw(st.integers(1, 8))
        used = [draw(st.sampled_from([0, 0, 0, 0, 0, 4, 4, 1, 2])) for _ in range(n)]
        usable = [int(draw(st.integers(0, 9)) > 0) for _ in range(n)]
        spine, block = draw(st.integers(-1, 1)), draw(st.integers(-1, 2))
        leaf = spine * 3 + block if spine >= 0 and block >= 0 else -1
        groups = {0: [], 1: [draw(st.integers(-1, 3))], 2: [leaf, spine]}[n_levels]
        arrays.domain([4] * n, used=used, usable=usable, groups=groups)
    return arrays


@st.composite
def small_gangs(draw: st.DrawFn, n_levels: int) -> list[PodSet]:
    sets = []
    for _ in range(draw(st.integers(1, 2))):
        gpus = draw(st.sampled_from([1, 2, 4, 4]))
        count = draw(st.integers(2, 16 if gpus == 4 else 30))
        required = draw(st.sampled_from([N] * 6 + [DOMAIN, *(UP + lv for lv in range(n_levels))]))
        preferred = draw(st.sampled_from([N, N, DOMAIN, *(UP + lv for lv in range(n_levels))]))
        size = draw(st.sampled_from([d for d in (1, 2, 3) if count % d == 0]))
        sets.append((count, gpus, required, preferred, size, DOMAIN if size > 1 else N))
    return sets


def rank_key(arrays: Arrays, node: int) -> tuple[int, ...]:
    d = arrays.node_domain[node]
    return (*reversed(arrays.groups[d]), d, node)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_domain_set_equals_brute_force_and_pods_come_in_rank_order(data: st.DataObject) -> None:
    arrays = data.draw(nested_fleets())
    n_levels = max((len(g) for g in arrays.groups), default=0)
    pod_sets = data.draw(small_gangs(n_levels))
    native = run(gang, domains.FleetBitmap(*arrays.args()), pod_sets)
    fl = twin_domains.FleetBitmap(*arrays.args())
    brute = outcome(twin_gang.plan_gang_with(checked_brute_force, fl, twin_gang.PodSets(pod_sets)))
    assert native == brute
    if native[0] != gang.OK:
        return
    pos = 0
    for count, *_ in pod_sets:
        keys = [rank_key(arrays, n) for n in native[1][pos : pos + count]]
        pos += count
        assert keys == sorted(keys), "pod i of a pod set is rank i: blocks together, nodes ascending"


# ---------------------------------------------------------------- core equals twin where classes run long


@st.composite
def alike_domains(draw: st.DrawFn) -> tuple[Arrays, list[int], int]:
    """Up to 60 domains from three shapes in a few blocks, so runs of more than eight alike domains occur."""
    shapes = [draw(st.integers(0, 6)) for _ in range(3)]  # busy trays of each shape
    arrays = Arrays()
    for _ in range(draw(st.integers(9, 60))):
        busy = shapes[draw(st.integers(0, 2))]
        arrays.domain([4] * 6, used=[4] * busy + [0] * (6 - busy), groups=[draw(st.integers(0, 2))])
    fl = domains.FleetBitmap(*arrays.args())
    caps = fl.capacity(draw(st.sampled_from([1, 4]))).tolist()
    total = sum(caps)
    need = draw(st.integers(1, max(1, total)))
    return arrays, caps, need


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(alike_domains(), st.sampled_from([1, 4]))
def test_core_and_twin_choose_the_same_domains_and_units(case: tuple[Arrays, list[int], int], unit_gpus: int) -> None:
    arrays, caps, need = case
    n = len(caps)
    live = np.array([c > 0 for c in caps], dtype=np.uint8)
    got = []
    for mod, fl_mod in ((domainset, domains), (twin_domainset, twin_domains)):
        out_d = np.zeros(n, dtype=np.int32)
        out_u = np.zeros(n, dtype=np.int32)
        k = mod.choose_domains(fl_mod.FleetBitmap(*arrays.args()), i32(caps), live, need, unit_gpus, out_d, out_u)
        got.append((k, out_d[:k].tolist(), out_u[:k].tolist()))
    assert got[0] == got[1]
    k, chosen, units = got[0]
    assert (k == 0) == (sum(caps) < need)
    if k:
        assert sum(units) == need and all(0 < u <= caps[d] for d, u in zip(chosen, units, strict=True))


@st.composite
def alike_fleets(draw: st.DrawFn) -> tuple[Arrays, list[PodSet]]:
    """Up to 40 racks of three shapes under leaves and spines, and a gang of one or two pod sets of any constraint."""
    shapes = [(draw(st.integers(0, 8)), draw(st.integers(0, 1))) for _ in range(3)]  # (busy trays, failed trays)
    arrays = Arrays()
    for _ in range(draw(st.integers(9, 40))):
        busy, down = shapes[draw(st.integers(0, 2))]
        leaf = draw(st.integers(0, 3))
        arrays.domain(
            [4] * 9, used=[4] * busy + [0] * (9 - busy), usable=[1] * (9 - down) + [0] * down, groups=[leaf, leaf // 2]
        )
    sets: list[PodSet] = []
    for _ in range(draw(st.integers(1, 2))):
        gpus = draw(st.sampled_from([1, 2, 4]))
        size = draw(st.sampled_from([1, 1, 2, 4]))
        count = size * draw(st.integers(1, 40 // size))
        level = draw(st.sampled_from([N, DOMAIN, UP, UP + 1]))
        sets.append((count, gpus, draw(st.sampled_from([N, N, UP, UP + 1])), level, size, level if size > 1 else N))
    return arrays, sets


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(alike_fleets())
def test_core_and_twin_plan_fleets_of_alike_racks_alike(case: tuple[Arrays, list[PodSet]]) -> None:
    arrays, pod_sets = case
    plan(arrays, pod_sets)


# ---------------------------------------------------------------- rank order and the slack


def test_pods_come_in_rank_order_a_leaf_at_a_time() -> None:
    # Leaf 1 holds domains 0 and 2, leaf 0 domain 1 (8 free trays each): rank order is leaf 0 first, then 0, 2.
    arrays = fleet(tray(10, busy=2, groups=[1]), tray(10, busy=2, groups=[0]), tray(10, busy=2, groups=[1]))
    status, nodes, _ = plan(arrays, [(24, 4, N, N, 1, N)])
    assert status == gang.OK
    assert [arrays.node_domain[n] for n in nodes] == [1] * 8 + [0] * 8 + [2] * 8
    assert nodes[8:16] == sorted(nodes[8:16])


def test_pods_on_one_node_sit_together_and_nodes_ascend() -> None:
    arrays = Arrays().domain([8, 8, 8], used=[6, 0, 4])  # idle GPUs 2, 8, 4: best fit fills 2, then 4, then 8
    status, nodes, _ = plan(arrays, [(7, 2, N, N, 1, N)])
    assert status == gang.OK
    assert nodes == [0, 1, 1, 1, 1, 2, 2]


def test_block_level_slices_come_in_rank_order() -> None:
    arrays = fleet(tray(4, groups=[1]), tray(4, groups=[1]), tray(4, groups=[0]), tray(4, groups=[0]))
    status, nodes, _ = plan(arrays, [(12, 4, N, N, 6, UP + 0)])
    assert status == gang.OK
    blocks = [arrays.groups[arrays.node_domain[n]][0] for n in nodes]
    assert blocks == [0] * 6 + [1] * 6


def test_the_slack_stays_with_the_domain_that_keeps_idle_gpus_anyway() -> None:
    # Domain 0: 18 trays, 10 busy, 4 with two GPUs busy -> 4 whole trays free plus 8 stray GPUs. Domain 1: idle.
    # 20 pods need both (22 trays): domain 1 is filled whole and domain 0 keeps the 2 spare trays beside its strays.
    arrays = Arrays().domain([4] * 18, used=[4] * 10 + [2] * 4 + [0] * 4).domain([4] * 18)
    status, nodes, _ = plan(arrays, [(20, 4, N, N, 1, N)])
    assert status == gang.OK
    assert Counter(arrays.node_domain[n] for n in nodes) == {0: 2, 1: 18}


def test_choose_domains_rejects_malformed_input() -> None:
    fl = domains.FleetBitmap(*fleet(tray(4), tray(4)).args())
    out = np.zeros(2, dtype=np.int32)
    with pytest.raises(ValueError):
        domainset.choose_domains(fl, i32([1]), np.ones(2, dtype=np.uint8), 1, 4, out, out.copy())
    with pytest.raises(ValueError):
        domainset.choose_domains(fl, i32([1, 999]), np.ones(2, dtype=np.uint8), 1, 4, out, out.copy())
    with pytest.raises(ValueError):
        domainset.choose_domains(fl, i32([1, 1]), np.ones(2, dtype=np.uint8), 0, 4, out, out.copy())
