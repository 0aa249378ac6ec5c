"""The inventory of scale-up domains: counts, tray cells, largest shape, gangs and platform histograms."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kilter.api import messages
from kilter.gangs import inventory
from kilter.model import codec
from kilter.model.core_v1 import Node, Pod
from kilter.model.errors import InputError, UnknownPlatform
from kilter.state.store import ClusterStore
from tests.topology.builders import CLIQUE, TIER1, node, rack


def gang_pod(name: str, node_name: str, gpus: int, *, gang: str | None = None, phase: str = "Running") -> Pod:
    labels = {"kilter.dev/gang": gang, "kilter.dev/gang-size": "4"} if gang else {}
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": labels},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": phase},
    }
    return codec.convert(obj, Pod)


def store_of(objects: list[Node | Pod]) -> ClusterStore:
    store = ClusterStore()
    store.replace(objects)
    return store


def two_racks() -> ClusterStore:
    racks = rack("rack-a", block="block-1") + rack("rack-b", block="block-2")
    racks[5] = node("rack-a-t05", labels={CLIQUE: "rack-a", TIER1: "block-1"}, cordoned=True)
    pods = [gang_pod(f"w{i}", f"rack-a-t{i:02d}", 4, gang="train") for i in range(4)]
    pods.append(gang_pod("solo", "rack-a-t04", 2))
    pods.append(gang_pod("done", "rack-b-t00", 4, gang="old", phase="Succeeded"))
    pods.append(gang_pod("half", "rack-b-t01", 2, gang="eval"))
    return store_of([*racks, *pods])


def row(inv: inventory.Inventory, domain: str) -> inventory.DomainInventory:
    return next(r for r in inv.domains if r.domain == domain)


def test_counts_trays_and_gangs_of_each_domain() -> None:
    inv = inventory.take(two_racks())
    a, b = row(inv, "rack-a"), row(inv, "rack-b")
    assert (a.platform, a.block, a.detached) == ("GB200-NVL72", "block-1", False)
    assert (a.nodes_healthy, a.nodes_total, a.gpus_total) == (17, 18, 72)
    # 4 trays full, t04 half used, t05 cordoned (its GPUs count as total, never free): 12 idle trays.
    assert a.gpus_free == 12 * 4 + 2
    assert a.trays[:6] == ("busy",) * 4 + ("partial", "failed")
    assert set(a.trays[6:]) == {"free"}
    assert (a.largest_pods, a.largest_gpus_per_pod) == (12, 4)
    assert a.gangs == (inventory.GangOnDomain("ml/gang/train", 4, 16),)  # the solo pod is in no gang
    # A finished pod holds nothing and no gang; the half-used tray still takes no whole-tray pod.
    assert b.gangs == (inventory.GangOnDomain("ml/gang/eval", 1, 2),)
    assert b.gpus_free == 72 - 2 and b.trays[1] == "partial" and b.trays[0] == "free"
    assert (b.largest_pods, b.largest_gpus_per_pod) == (17, 4)
    assert b.spares == 0 and "spare" not in a.trays + b.trays


def test_largest_shape_drops_to_smaller_pods_only_when_no_whole_tray_is_free() -> None:
    nodes = rack("r", trays=3)
    pods = [gang_pod("x0", "r-t00", 3), gang_pod("x1", "r-t01", 2), gang_pod("x2", "r-t02", 2)]
    r = inventory.take(store_of([*nodes, *pods])).domains[0]
    assert (r.largest_pods, r.largest_gpus_per_pod) == (2, 2)  # 1 + 2 + 2 free: two 2-GPU pods, no 4-GPU one
    full = [gang_pod(f"y{i}", f"r-t{i:02d}", 4) for i in range(3)]
    r = inventory.take(store_of([*nodes, *full])).domains[0]
    assert (r.largest_pods, r.largest_gpus_per_pod, r.gpus_free) == (0, 4, 0)


@pytest.mark.parametrize("seed", range(30))
def test_largest_shape_and_histogram_agree_with_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    nodes: list[Node | Pod] = []
    for i in range(rng.randint(1, 5)):
        nodes += rack(f"r{i}", trays=rng.randint(1, 18), block=f"b{i % 2}")
    pods: list[Node | Pod] = []
    used: dict[str, int] = {}
    for n in [x for x in nodes if isinstance(x, Node)]:
        take = rng.choice((0, 0, 1, 2, 3, 4))
        if take:
            pods.append(gang_pod(f"p-{n.metadata.name}", n.metadata.name, take, gang=f"g{rng.randint(0, 3)}"))
            used[n.metadata.name] = take
    inv = inventory.take(store_of(nodes + pods))
    for d in inv.domains:
        members = [n.metadata.name for n in nodes if isinstance(n, Node) and n.metadata.labels[CLIQUE] == d.domain]
        free = [4 - used.get(name, 0) for name in members]
        fits = {size: sum(f // size for f in free) for size in (4, 2, 1)}
        best = next(((fits[s], s) for s in (4, 2, 1) if fits[s]), (0, 4))
        assert (d.largest_pods, d.largest_gpus_per_pod) == best
        assert d.gpus_free == sum(free)
        assert sum(g.gpus for g in d.gangs) == 4 * len(free) - sum(free)
    (plat,) = inv.platforms
    hist = [0] * (72 + 1)  # up to a whole NVL72 domain free, whatever this fleet's racks hold
    for d in inv.domains:
        hist[d.gpus_free] += 1
    assert list(plat.free_histogram) == hist
    assert (plat.gpus_free, plat.domains) == (sum(r.gpus_free for r in inv.domains), len(inv.domains))


def test_platform_and_block_filters() -> None:
    store = two_racks()
    store.replace([*store.pods(), *rack("rack-a", block="block-1"), *rack("rack-b", block="block-2")])
    assert [r.domain for r in inventory.take(store, block="block-2").domains] == ["rack-b"]
    assert [r.domain for r in inventory.take(store, platform="gb200-nvl72").domains] == ["rack-a", "rack-b"]
    assert inventory.take(store, platform="MI355X-8").domains == ()
    assert inventory.take(store, block="no-such-block").platforms == ()
    with pytest.raises(UnknownPlatform):
        inventory.take(store, platform="tpu-v9")
    with pytest.raises(InputError, match="block must name a block"):
        inventory.take(store, block="/")


def test_block_filter_takes_a_coarser_path_prefix() -> None:
    spine = "fabric.topograph.run/tier-2"
    nodes = [
        node(f"{r}-t{t}", labels={CLIQUE: r, TIER1: leaf, spine: "s1"})
        for r, leaf in (("r1", "l1"), ("r2", "l2"))
        for t in range(2)
    ]
    store = store_of(list(nodes))
    blocks = {r.domain: r.block for r in inventory.take(store).domains}
    assert blocks == {"r1": "s1/l1", "r2": "s1/l2"}
    assert [r.domain for r in inventory.take(store, block="s1").domains] == ["r1", "r2"]
    assert [r.domain for r in inventory.take(store, block="s1/l2").domains] == ["r2"]
    assert inventory.take(store, block="s1/l").domains == ()  # a prefix of a name is not a block


def test_a_node_without_its_clique_label_is_a_detached_domain() -> None:
    store = store_of([*rack("r", trays=2), node("lost")])
    rows = {r.domain: r for r in inventory.take(store).domains}
    assert rows["lost"].detached and not rows["r"].detached
    assert rows["lost"].nodes_total == 1


def test_generation_follows_the_store() -> None:
    store = two_racks()
    first = inventory.take(store).generation
    store.replace([*rack("rack-a", block="block-1")])
    assert inventory.take(store).generation > first


def test_a_pod_that_changes_gang_is_counted_in_its_new_gang_and_an_assumed_bind_in_none() -> None:
    store = store_of([*rack("r", trays=4), gang_pod("a", "r-t00", 4, gang="first")])
    assert inventory.take(store).domains[0].gangs == (inventory.GangOnDomain("ml/gang/first", 1, 4),)
    store.replace([*rack("r", trays=4), gang_pod("a", "r-t00", 4, gang="second")])
    assert inventory.take(store).domains[0].gangs == (inventory.GangOnDomain("ml/gang/second", 1, 4),)
    store.assume("uid-not-shown-yet", "r-t01", 4)
    row = inventory.take(store).domains[0]
    assert row.gangs == (inventory.GangOnDomain("ml/gang/second", 1, 4),) and row.gpus_free == 8


@pytest.mark.parametrize("seed", range(10))
def test_rows_given_again_equal_rows_taken_afresh_as_the_fleet_changes(seed: int) -> None:
    """An unchanged domain's row is the same object again; after each change of GPUs, health, spares or gangs,
    every row equals one built with nothing remembered, and the message of each is that row's."""
    rng = random.Random(seed)
    nodes: list[Node | Pod] = []
    for i in range(3):
        nodes += rack(f"r{i}", trays=6, block=f"b{i % 2}")
    store = store_of(nodes)
    names = [n.metadata.name for n in nodes if isinstance(n, Node)]
    before = inventory.take(store)
    again = inventory.take(store)
    assert all(x is y for x, y in zip(before.domains, again.domains, strict=True))
    for step in range(12):
        fleet = store.fleet()
        name = rng.choice(names)
        change = rng.choice(("assume", "health", "forget"))
        if change == "assume":
            store.assume(f"p{step}", name, rng.randint(1, 4))
        elif change == "health":
            fleet.bitmap.set_usable(fleet.node_index[name], bool(rng.getrandbits(1)))
        else:
            store.forget(f"p{rng.randrange(step + 1)}")
        remembered = inventory.take(store)
        fresh = inventory._domain_rows(store.fleet(), inventory._gangs_by_domain(store, store.fleet()), None, None)
        assert list(remembered.domains) == fresh
        answer = messages.inventory(remembered)
        assert [m.gpus_free for m in answer.domains] == [r.gpus_free for r in fresh]
        assert [tuple(m.trays) for m in answer.domains] == [r.trays for r in fresh]
        changed = [r.domain for r, s in zip(again.domains, remembered.domains, strict=True) if r is not s]
        assert set(changed) <= {r.domain for r, s in zip(again.domains, fresh, strict=True) if r != s} | {
            fleet.domain_of_node(fleet.node_index[name])
        }
        again = remembered
