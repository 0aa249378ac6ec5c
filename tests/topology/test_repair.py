"""Repair plans put a running gang's replacement pods next to its survivors: own node, own domain, nearest domain."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import numpy as np
import pytest

from kilter.model.core_v1 import Node, Pod
from kilter.topology.fleet import Fleet, build_fleet
from kilter.topology.repair import RepairChoice, Replacement, describe, repair
from tests.topology.builders import CLIQUE, TIER1, node, pod

TIER2 = "fabric.topograph.run/tier-2"


def trays(rack: str, block: str, n: int = 4, *, spine: str = "s0", failed: Sequence[int] = ()) -> list[Node]:
    labels = {CLIQUE: rack, TIER1: block, TIER2: spine}
    return [node(f"{rack}-t{t:02d}", labels=labels, cordoned=t in failed) for t in range(n)]


def fill(names: Sequence[str], gpus: int = 4) -> list[Pod]:
    return [pod(f"p-{n}", n, gpus) for n in names]


def idx(fleet: Fleet, name: str) -> int:
    return fleet.node_index[name]


def names(fleet: Fleet, choices: Sequence[RepairChoice]) -> list[str]:
    return [fleet.node_names[c.node] for c in choices]


def test_a_rank_goes_back_to_its_own_node_when_that_node_is_usable_and_free() -> None:
    fleet = build_fleet(trays("r1", "b1"), fill(["r1-t00", "r1-t01"]))
    got = repair(fleet, 0, [idx(fleet, "r1-t00"), idx(fleet, "r1-t01")], [Replacement(4, idx(fleet, "r1-t02"))])
    assert not isinstance(got, str)
    assert names(fleet, got) == ["r1-t02"] and got[0].step == "same-node"


def test_a_rank_whose_node_failed_stays_in_its_domain_on_the_best_fitting_node() -> None:
    nodes = trays("r1", "b1", 5, failed=[1]) + trays("r2", "b1")
    pods = [*fill(["r1-t00", "r1-t02"]), pod("half", "r1-t04", 2)]
    fleet = build_fleet(nodes, pods)
    got = repair(fleet, 0, [idx(fleet, "r1-t00"), idx(fleet, "r1-t02")], [Replacement(2, idx(fleet, "r1-t01"))])
    assert not isinstance(got, str)
    assert names(fleet, got) == ["r1-t04"], "the half-used tray fits best; r1-t03 stays whole"
    assert got[0].step == "same-domain" and describe(fleet, got[0]) == "same scale-up domain"


def test_a_full_domain_sends_the_rank_to_a_domain_of_the_same_block_the_gang_uses_before_a_new_one() -> None:
    nodes = trays("r1", "b1", failed=[3]) + trays("r2", "b1") + trays("r3", "b1") + trays("r9", "b9")
    survivors = ["r1-t00", "r1-t01", "r1-t02", "r3-t00"]
    fleet = build_fleet(nodes, fill(survivors))
    got = repair(fleet, 0, [idx(fleet, n) for n in survivors], [Replacement(4, idx(fleet, "r1-t03"))])
    assert not isinstance(got, str)
    assert names(fleet, got) == ["r3-t01"] and got[0].step == "gang-domain" and got[0].distance == 1
    assert describe(fleet, got[0]).startswith("a domain the gang uses, same ")


def test_the_same_block_comes_before_a_domain_of_the_gang_farther_away() -> None:
    nodes = trays("r1", "b1", failed=[3]) + trays("r2", "b1") + trays("r8", "b8", spine="s1")
    survivors = ["r1-t00", "r1-t01", "r1-t02", "r8-t00"]
    fleet = build_fleet(nodes, fill(survivors))
    got = repair(fleet, 0, [idx(fleet, n) for n in survivors], [Replacement(4, idx(fleet, "r1-t03"))])
    assert not isinstance(got, str)
    assert names(fleet, got)[0].startswith("r2-") and got[0].step == "new-domain" and got[0].distance == 1


def test_replacements_that_must_leave_go_together_to_one_new_domain_that_holds_them_all() -> None:
    nodes = trays("r1", "b1", failed=[0, 1, 2]) + trays("r2", "b1", 2) + trays("r3", "b1", 4) + trays("r4", "b1", 8)
    fleet = build_fleet(nodes, fill(["r1-t03"]))
    lost = [Replacement(4, idx(fleet, f"r1-t0{t}")) for t in range(3)]
    got = repair(fleet, 0, [idx(fleet, "r1-t03")], lost)
    assert not isinstance(got, str)
    assert {fleet.domain_of_node(c.node) for c in got} == {"r3"}, "r3 holds all three with the least left over"
    assert [c.step for c in got] == ["new-domain", "gang-domain", "gang-domain"]


def test_a_node_taken_back_by_its_rank_is_not_given_to_another_replacement_first() -> None:
    nodes = trays("r1", "b1", 3, failed=[0])
    fleet = build_fleet(nodes, [])
    got = repair(fleet, 0, [], [Replacement(4, idx(fleet, "r1-t00")), Replacement(4, idx(fleet, "r1-t01"))])
    assert not isinstance(got, str)
    assert names(fleet, got) == ["r1-t02", "r1-t01"]


def test_the_repair_is_all_or_nothing_and_says_which_replacement_found_no_node() -> None:
    fleet = build_fleet(trays("r1", "b1", 2, failed=[1]), fill(["r1-t00"]))
    got = repair(fleet, 0, [idx(fleet, "r1-t00")], [Replacement(4, idx(fleet, "r1-t01"))])
    assert isinstance(got, str) and "replacement 1 of 1 (4 GPUs)" in got and "near r1" in got


def test_node_ok_keeps_replacements_off_nodes_their_pods_may_not_use() -> None:
    fleet = build_fleet(trays("r1", "b1", 3, failed=[0]), [])
    ok = fleet.bitmap.node_usable_flags != 0
    ok[idx(fleet, "r1-t01")] = False
    got = repair(fleet, 0, [], [Replacement(4, idx(fleet, "r1-t00"))], node_ok=ok)
    assert not isinstance(got, str) and names(fleet, got) == ["r1-t02"]


# ------------------------------------------------------------------------------------------------- brute force


def _random_fleet(rng: random.Random) -> tuple[Fleet, list[int], list[Replacement]]:
    nodes: list[Node] = []
    for b in range(rng.randint(1, 3)):
        for r in range(rng.randint(1, 3)):
            failed = [t for t in range(3) if rng.random() < 0.25]
            nodes += trays(f"b{b}r{r}", f"b{b}", 3, spine=f"s{b // 2}", failed=failed)
    names_ = [n.metadata.name for n in nodes]
    busy = [n for n in names_ if rng.random() < 0.3]
    fleet = build_fleet(nodes, fill(busy))
    survivors = [fleet.node_index[n] for n in busy if rng.random() < 0.7]
    homes = [fleet.node_index[n] for n in names_ if n not in busy]
    home_pool = rng.sample(homes, k=min(len(homes), rng.randint(1, 3))) if homes else []
    wanted = [Replacement(4, rng.choice([*home_pool, None]) if home_pool else None) for _ in range(rng.randint(1, 3))]
    return fleet, survivors, wanted


def _free_nodes(fleet: Fleet) -> list[int]:
    bm = fleet.bitmap
    return [n for n in range(fleet.n_nodes) if bm.node_usable_flags[n] and bm.node_free_gpus(n) >= 4]


@pytest.mark.parametrize("seed", range(300))
def test_repair_keeps_as_many_ranks_home_as_any_placement_and_fails_only_when_none_exists(seed: int) -> None:
    """Against every way of putting the replacements on distinct free nodes (trays of 4 GPUs, pods of 4): the
    repair keeps the most ranks on their own node, then the most in their own domain, and fails only when no way
    exists at all."""
    fleet, survivors, wanted = _random_fleet(random.Random(seed))
    free = _free_nodes(fleet)
    got = repair(fleet, 0, survivors, wanted)
    ways = list(itertools.permutations(free, len(wanted)))
    if not ways:
        assert isinstance(got, str)
        return
    assert not isinstance(got, str)
    assert len({c.node for c in got}) == len(wanted) and all(c.node in free for c in got)

    def score(nodes: Sequence[int]) -> tuple[int, int]:
        own = sum(1 for n, w in zip(nodes, wanted, strict=True) if n == w.home)
        dom = sum(
            1
            for n, w in zip(nodes, wanted, strict=True)
            if w.home is not None and fleet.node_domain[n] == fleet.node_domain[w.home]
        )
        return own, dom

    assert score([c.node for c in got]) == max(map(score, ways))


@pytest.mark.parametrize("seed", range(300))
def test_ranks_that_leave_one_domain_go_as_near_as_any_placement_allows_in_the_fewest_new_domains(seed: int) -> None:
    """Every replacement from one failed domain: no placement on distinct free nodes has a smaller sum of distances
    from that domain, nor, at that sum, fewer domains new to the gang."""
    rng = random.Random(seed)
    fleet, survivors, _ = _random_fleet(rng)
    home_dom = rng.randrange(len(fleet.domain_ids))
    members = [n for n in range(fleet.n_nodes) if fleet.node_domain[n] == home_dom]
    wanted = [Replacement(4, members[0]) for _ in range(rng.randint(1, 3))]
    free = _free_nodes(fleet)
    got = repair(fleet, 0, survivors, wanted)
    ways = list(itertools.permutations(free, len(wanted)))
    if not ways:
        assert isinstance(got, str)
        return
    assert not isinstance(got, str)
    groups = fleet.domain_group
    gang_domains = {int(fleet.node_domain[s]) for s in survivors}

    def distance(n: int) -> int:
        d = int(fleet.node_domain[n])
        if d == home_dom:
            return 0
        shared = [lv for lv in range(groups.shape[0]) if groups[lv, d] >= 0 and groups[lv, d] == groups[lv, home_dom]]
        return min(shared) + 1 if shared else groups.shape[0] + 1

    def cost(nodes: Sequence[int]) -> tuple[int, int]:
        new = {int(fleet.node_domain[n]) for n in nodes} - gang_domains - {home_dom}
        return sum(map(distance, nodes)), len(new)

    assert cost([c.node for c in got]) == min(map(cost, ways))


def test_a_full_domain_takes_back_the_node_that_preempts_the_fewest_gpus_before_the_rank_leaves() -> None:
    nodes = trays("r1", "b1", 5, failed=[1]) + trays("r2", "b1")
    survivors = ["r1-t00", "r1-t02"]
    pods = [*fill(survivors), pod("low-3", "r1-t03", 4), pod("low-4", "r1-t04", 2)]
    fleet = build_fleet(nodes, pods)
    back = np.zeros(fleet.n_nodes, dtype=np.int32)
    back[idx(fleet, "r1-t03")], back[idx(fleet, "r1-t04")] = 4, 2  # the low-priority pods' GPUs
    wanted = [Replacement(4, idx(fleet, "r1-t01"))]
    plain = repair(fleet, 0, [idx(fleet, n) for n in survivors], wanted)
    assert not isinstance(plain, str) and plain[0].step == "new-domain"  # nothing to take back: it leaves
    got = repair(fleet, 0, [idx(fleet, n) for n in survivors], wanted, reclaimable=back)
    assert not isinstance(got, str)
    assert names(fleet, got) == ["r1-t04"] and got[0].step == "reclaim"  # 2 GPUs taken back, not r1-t03's 4
    assert describe(fleet, got[0]).startswith("same scale-up domain, a lent spare taken back")


@pytest.mark.parametrize("seed", range(40))
def test_the_reclaim_rung_agrees_with_brute_force_on_small_racks(seed: int) -> None:
    """Every rank whose domain is full takes, in order, the node of its domain that frees enough by taking back the
    fewest GPUs (then the lowest index); a free node of the domain always comes first."""
    rng = random.Random(seed)
    nodes = trays("r1", "b1", 6) + trays("r2", "b2", 3)
    fleet0 = build_fleet(nodes)
    used = {n: rng.choice([0, 2, 4]) for n in fleet0.node_names}
    pods = [pod(f"p-{n}", n, g) for n, g in used.items() if g]
    fleet = build_fleet(nodes, pods)
    back = np.array([rng.randint(0, used[n]) for n in fleet.node_names], dtype=np.int32)
    in_r1 = [i for i, n in enumerate(fleet.node_names) if n.startswith("r1")]
    survivors = [i for i in in_r1 if used[fleet.node_names[i]] == 4][:1] or [in_r1[0]]
    wanted = [Replacement(rng.choice([2, 4]), None) for _ in range(rng.randint(1, 3))]
    got = repair(fleet, 0, survivors, wanted, reclaimable=back)
    free = {i: 4 - used[fleet.node_names[i]] for i in in_r1}
    left = {i: int(back[i]) for i in in_r1}
    homes: list[int | None] = []
    for w in wanted:  # the same-domain pass first, for every rank, then the reclaim pass
        fits = [i for i in in_r1 if free[i] >= w.gpus]
        pick = min(fits, key=lambda i: (free[i], i)) if fits else None
        if pick is not None:
            free[pick] -= w.gpus
        homes.append(pick)
    for k, w in enumerate(wanted):
        if homes[k] is None:
            fits = [i for i in in_r1 if free[i] < w.gpus <= free[i] + left[i]]
            pick = min(fits, key=lambda i: (w.gpus - free[i], i)) if fits else None
            if pick is not None:
                left[pick] -= w.gpus - free[pick]
                free[pick] = 0
            homes[k] = pick
    if isinstance(got, str):
        assert None in homes  # the rest of the ladder had no room either (r2 may be full)
        return
    for k, choice in enumerate(got):
        if homes[k] is not None:
            assert choice.node == homes[k] and choice.step in ("same-domain", "reclaim")
        else:
            assert choice.step in ("gang-domain", "new-domain")
