"""Each domain's room: free GPUs on usable nodes and the largest shape, against hand-worked values and brute force."""

from __future__ import annotations

import random

from kilter.topology.fleet import build_fleet
from kilter.topology.regions import DomainRoom
from kilter.topology.rooms import domain_rooms, free_per_node, halvings, largest_shapes
from tests.topology.builders import node, pod, rack


def test_halvings_run_from_the_size_down_to_one() -> None:
    assert halvings(8) == [8, 4, 2, 1]
    assert halvings(6) == [6, 3, 1]
    assert halvings(1) == [1]
    assert halvings(0) == []


def test_a_rack_shows_whole_trays_first_then_halves_and_an_h100_its_own_sizes() -> None:
    nodes = rack("r0", trays=3) + rack("r1", trays=2) + [node("h", product="NVIDIA-H100-80GB-HBM3", gpus=8)]
    busy = [
        pod("a", "r0-t00", 4),  # r0: trays 0 full, 1 and 2 idle -> 2 pods of 4
        pod("b", "r1-t00", 1),  # r1: 3 and 1 free -> no whole tray; 2 GPUs: 1 + 0 -> 1 pod of 2
        pod("c", "r1-t01", 3),
        pod("d", "h", 5),  # h: 3 free -> no 8, no 4, 1 pod of 2
    ]
    fleet = build_fleet(nodes, busy)
    rooms = dict(zip(fleet.domain_ids, domain_rooms(fleet), strict=True))
    assert rooms["r0"] == DomainRoom("GB200-NVL72", 8, 2, 4)
    assert rooms["r1"] == DomainRoom("GB200-NVL72", 4, 1, 2)
    assert rooms["h"].gpus_free == 3 and (rooms["h"].largest_pods, rooms["h"].largest_gpus_per_pod) == (1, 2)


def test_a_domain_with_nothing_free_or_only_unusable_nodes_shows_no_pods_of_a_whole_node() -> None:
    nodes = rack("r0", trays=2) + rack("r1", trays=1, ready=False)
    fleet = build_fleet(nodes, [pod("a", "r0-t00", 4), pod("b", "r0-t01", 4)])
    assert domain_rooms(fleet) == (DomainRoom("GB200-NVL72", 0, 0, 4), DomainRoom("GB200-NVL72", 0, 0, 4))


def test_largest_shapes_match_brute_force_over_random_usage() -> None:
    rng = random.Random(7)
    for _ in range(30):
        nodes = []
        for r in range(rng.randint(1, 4)):
            nodes += rack(f"r{r}", trays=rng.randint(1, 5), ready=rng.random() > 0.2)
        nodes += [node(f"h{i}", product="NVIDIA-H100-80GB-HBM3", gpus=8) for i in range(rng.randint(0, 2))]
        busy = []
        for i, n in enumerate(nodes):
            gpus = int(n.status.allocatable["nvidia.com/gpu"])
            used = rng.randint(0, gpus)
            if used:
                busy.append(pod(f"p{i}", n.metadata.name, used))
        fleet = build_fleet(nodes, busy)
        free = free_per_node(fleet)
        bm = fleet.bitmap
        expected = []
        for d in range(len(fleet.domain_ids)):
            lo, hi = int(bm.domain_node_start[d]), int(bm.domain_node_start[d + 1])
            whole = fleet.platforms[int(bm.domain_platforms[d])].gpus_per_node
            sizes: list[int] = []
            s = whole
            while s:
                sizes.append(s)
                s //= 2
            found = [(sum(int(free[n]) // s for n in range(lo, hi)), s) for s in sizes]
            expected.append(next(((p, s) for p, s in found if p > 0), (0, whole)))
        assert largest_shapes(fleet, free) == expected
        assert [(r.largest_pods, r.largest_gpus_per_pod) for r in domain_rooms(fleet)] == expected
        for d, room in enumerate(domain_rooms(fleet)):
            lo, hi = int(bm.domain_node_start[d]), int(bm.domain_node_start[d + 1])
            assert room.gpus_free == sum(
                int(bm.node_gpu_counts[n] - bm.node_used_gpus[n]) for n in range(lo, hi) if bm.node_usable_flags[n]
            )
