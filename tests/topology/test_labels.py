"""Topology levels come from the cluster's Kueue Topology, else from well-known labels."""

from __future__ import annotations

from kilter._native import gang
from kilter.model import codec
from kilter.model.kueue import Topology
from kilter.topology.catalog import BUILTIN, Catalog
from kilter.topology.labels import Levels, choose_levels, group_path

CATALOG = Catalog(BUILTIN)
GB200 = CATALOG.get("GB200-NVL72")
H100 = CATALOG.get("HGX-H100-8")


def topology(name: str, *levels: str) -> Topology:
    return codec.convert({"metadata": {"name": name}, "spec": {"levels": [{"nodeLabel": k} for k in levels]}}, Topology)


def test_a_kueue_topology_gives_the_levels_above_the_domain() -> None:
    topo = topology(
        "t",
        "fabric.topograph.run/tier-2",
        "fabric.topograph.run/tier-1",
        "nvidia.com/gpu.clique",
        "kubernetes.io/hostname",
    )
    levels = choose_levels([], [topo], CATALOG)
    assert levels.up_keys == ("fabric.topograph.run/tier-1", "fabric.topograph.run/tier-2")
    assert levels.level_of("nvidia.com/gpu.clique", GB200) == gang.DOMAIN
    assert levels.level_of("fabric.topograph.run/tier-2", GB200) == gang.UP + 1
    assert levels.level_of("kubernetes.io/hostname", GB200) == gang.NODE


def test_without_a_domain_label_the_topologys_lowest_level_names_the_domain() -> None:
    levels = choose_levels(
        [], [topology("t", "example.com/block", "example.com/rack", "kubernetes.io/hostname")], CATALOG
    )
    assert levels.domain_key == "example.com/rack"
    assert levels.up_keys == ("example.com/block",)
    assert levels.level_of("example.com/rack", GB200) == gang.DOMAIN
    assert levels.level_of("example.com/rack", H100) is None


def test_the_topology_covering_most_nodes_wins() -> None:
    a = topology("a", "x/block", "kubernetes.io/hostname")
    b = topology("b", "y/block", "kubernetes.io/hostname")
    levels = choose_levels([{"y/block": "1"}, {"y/block": "2"}, {"x/block": "1"}], [a, b], CATALOG)
    assert levels.source == "Topology/b"


def test_without_a_topology_the_best_covered_label_scheme_is_used() -> None:
    nodes = [
        {"cloud.google.com/gce-topology-block": "b1"},
        {"topology.k8s.aws/network-node-layer-3": "nn-1", "topology.k8s.aws/network-node-layer-1": "nn-9"},
        {"topology.k8s.aws/network-node-layer-3": "nn-2", "topology.k8s.aws/network-node-layer-1": "nn-9"},
    ]
    levels = choose_levels(nodes, [], CATALOG)
    assert levels.up_keys == (
        "topology.k8s.aws/network-node-layer-3",
        "topology.k8s.aws/network-node-layer-1",
    )


def test_no_labels_means_no_levels_above_the_domain() -> None:
    assert choose_levels([{"a": "b"}], [], CATALOG) == Levels()


def test_a_group_is_named_by_its_whole_path_and_needs_every_coarser_label() -> None:
    keys = ("rack", "block", "zone")
    labels = {"rack": "r1", "block": "b2", "zone": "z"}
    assert group_path(labels, keys, 0) == ("z", "b2", "r1")
    assert group_path(labels, keys, 1) == ("z", "b2")
    assert group_path({"rack": "r1", "block": "b2"}, keys, 0) is None


def test_a_nodes_domain_label_is_the_first_domain_key_it_carries_with_a_value() -> None:
    keys = GB200.domain_label_keys
    levels = Levels(domain_key="example.com/rack")
    assert levels.domain_label(GB200, {keys[0]: "c1", "example.com/rack": "r1"}) == (keys[0], "c1")
    assert levels.domain_label(GB200, {keys[0]: "", "example.com/rack": "r1"}) == ("example.com/rack", "r1")
    assert levels.domain_label(GB200, {"kubernetes.io/hostname": "n"}) is None  # the fleet detaches it
    assert levels.domain_label(H100, {keys[0]: "c1"}) is None  # a single-node platform: each node is its domain


def test_the_carried_domain_key_is_the_first_domain_key_that_names_some_nodes_domain() -> None:
    keys = GB200.domain_label_keys
    levels = Levels(domain_key="example.com/rack")
    assert levels.carried_domain_key(GB200, [{}, {"example.com/rack": "r1"}]) == "example.com/rack"
    assert levels.carried_domain_key(GB200, [{"example.com/rack": "r1"}, {keys[0]: "c1"}]) == keys[0]
    assert levels.carried_domain_key(GB200, [{keys[0]: ""}, {"example.com/rack": "r1"}]) == "example.com/rack"
    assert levels.carried_domain_key(GB200, [{}]) is None
    assert levels.carried_domain_key(H100, [{keys[0]: "c1"}]) is None
