"""Volcano HyperNodes become topology levels the planner uses, and a Kueue Topology still wins."""

from __future__ import annotations

from typing import Any

from kilter.model import codec
from kilter.model.core_v1 import PodSpec, PodTemplateSpec
from kilter.model.jobs import PodSetSpec, TopologyRequest
from kilter.model.kueue import Topology
from kilter.model.volcano import HyperNode
from kilter.topology.fleet import build_fleet
from kilter.topology.hypernodes import node_tiers, tier_label
from kilter.topology.plan import gang_request, plan_gang
from tests.topology.builders import CLIQUE, rack


def hypernode(name: str, tier: int, members: list[dict[str, Any]], tier_name: str = "") -> HyperNode:
    obj = {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": name},
        "spec": {"tier": tier, "tierName": tier_name, "members": members},
    }
    return codec.convert(obj, HyperNode)


def by_label(value: str) -> dict[str, Any]:
    return {"type": "Node", "selector": {"labelMatch": {"matchLabels": {CLIQUE: value}}}}


def child(name: str) -> dict[str, Any]:
    return {"type": "HyperNode", "selector": {"exactMatch": {"name": name}}}


def four_racks_two_spines() -> list[HyperNode]:
    """Tier 1: one HyperNode per rack, three ways of naming members; tier 2: two racks per spine."""
    return [
        hypernode("rack-a", 1, [by_label("a")], "rack"),
        hypernode("rack-b", 1, [{"type": "Node", "selector": {"regexMatch": {"pattern": "^b-t"}}}], "rack"),
        hypernode(
            "rack-c", 1, [{"type": "Node", "selector": {"exactMatch": {"name": f"c-t{t:02d}"}}} for t in range(18)]
        ),
        hypernode("rack-d", 1, [by_label("d")]),
        hypernode("spine-1", 2, [child("rack-a"), child("rack-b")], "spine"),
        hypernode("spine-2", 2, [child("rack-c"), child("rack-d")], "spine"),
    ]


def test_every_node_gets_its_hypernode_per_tier() -> None:
    nodes = [n for r in "abcd" for n in rack(r)]
    tiers = node_tiers(four_racks_two_spines(), nodes)
    assert tiers["a-t03"] == {1: "rack-a", 2: "spine-1"}
    assert tiers["b-t17"] == {1: "rack-b", 2: "spine-1"}
    assert tiers["c-t00"] == {1: "rack-c", 2: "spine-2"}
    assert tiers["d-t09"] == {1: "rack-d", 2: "spine-2"}


def test_tiers_become_the_levels_above_the_domain_finest_first() -> None:
    nodes = [n for r in "abcd" for n in rack(r)]
    fleet = build_fleet(nodes, hypernodes=four_racks_two_spines())
    assert fleet.levels.up_keys == (tier_label(1), tier_label(2))
    assert fleet.levels.source == "Volcano HyperNodes"
    assert CLIQUE in fleet.levels.domain_keys(fleet.platforms[0])
    assert fleet.domain_ids == ["a", "b", "c", "d"]
    assert sorted(fleet.group_ids[1]) == ["spine-1", "spine-2"]


def test_a_kueue_topology_wins_over_hypernodes() -> None:
    nodes = [n for r in "ab" for n in rack(r)]
    kueue = codec.convert(
        {
            "metadata": {"name": "gpu"},
            "spec": {"levels": [{"nodeLabel": CLIQUE}, {"nodeLabel": "kubernetes.io/hostname"}]},
        },
        Topology,
    )
    fleet = build_fleet(nodes, topologies=[kueue], hypernodes=four_racks_two_spines())
    assert fleet.levels.source == "Topology/gpu"
    assert tier_label(1) not in fleet.node_labels[0]


def test_a_member_cycle_ends() -> None:
    nodes = rack("a")
    loop = [
        hypernode("x", 2, [child("y"), by_label("a")]),
        hypernode("y", 3, [child("x")]),
    ]
    tiers = node_tiers(loop, nodes)
    assert tiers["a-t00"] == {2: "x", 3: "y"}


def test_a_gang_required_within_tier_2_stays_under_one_spine() -> None:
    # Rack a and b are half full, so 24 pods of 4 GPUs (96) need two racks: they must share a spine.
    nodes = [n for r in "abcd" for n in rack(r)]
    fleet = build_fleet(nodes, hypernodes=four_racks_two_spines())
    spec = codec.convert({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}, PodSpec)
    template = PodTemplateSpec(spec=spec)
    request = gang_request(
        "g", [PodSetSpec("workers", 24, template, TopologyRequest(required=tier_label(2)))], fleet.catalog
    )
    plan = plan_gang(fleet, request)
    assert plan.feasible, plan.reason
    spines = {fleet.node_labels[n][tier_label(2)] for n in plan.node_indices}
    assert len(spines) == 1
