"""A domain whose shape is wrong takes single-pod gangs only, until fixed or acknowledged (issue #23)."""

from __future__ import annotations

import pytest

from kilter.model.annotations import TOPOLOGY_ACK, UNPROTECTED_TOPOLOGY_ACK
from kilter.model.core_v1 import Node
from kilter.topology.catalog import BUILTIN, Catalog
from kilter.topology.fleet import Fleet, build_fleet
from kilter.topology.plan import gang_request, plan_gang
from kilter.topology.validate import IMEX_DOMAIN
from tests.topology.builders import CLIQUE, TIER1, node, rack
from tests.topology.test_plan import pod_set

CATALOG = Catalog(BUILTIN)
TOPOGRAPH = "network.topology.nvidia.com/accelerator"  # NVIDIA Topograph's label naming a node's NVLink domain


def fits(fleet: Fleet, pods: int) -> bool:
    return plan_gang(fleet, gang_request("g", [pod_set("w", pods, 4)], CATALOG)).feasible


def test_a_node_short_of_gpus_is_detached_alone_and_its_rack_stays_a_domain() -> None:
    fleet = build_fleet([*rack("r1", trays=17), node("r1-t17", gpus=3, labels={CLIQUE: "r1"})])
    assert sorted(fleet.domain_ids) == ["r1", "r1-t17"]
    assert fleet.bitmap.domain_flags.tolist()[fleet.domain_ids.index("r1-t17")] & 1, "the short node: detached"
    assert any("domain r1: r1-t17 short of GPUs" in w and f"{TOPOLOGY_ACK}=r1" in w for w in fleet.fabric)
    assert fits(fleet, 17) and not fits(fleet, 18), "the 17 whole trays still take a gang together"


def test_a_domain_acknowledged_under_the_protected_label_naming_it_is_offered_whole() -> None:
    acked = node("r1-t17", gpus=3, labels={CLIQUE: "r1", TOPOLOGY_ACK: "r1"})
    fleet = build_fleet([*rack("r1", trays=17), acked])
    assert fleet.domain_ids == ["r1"] and not fleet.warnings and not fleet.fabric
    assert fits(fleet, 17) and set(fleet.bitmap.domain_flags.tolist()) == {0}, "nothing detached"


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param({UNPROTECTED_TOPOLOGY_ACK: "true"}, id="the old label, which a kubelet may set on its own Node"),
        pytest.param({TOPOLOGY_ACK: "true"}, id="the protected label naming no domain"),
        pytest.param({TOPOLOGY_ACK: "r2"}, id="an acknowledgement of r2 carried by a node now labelled r1"),
    ],
)
def test_an_acknowledgement_that_does_not_name_the_domain_under_the_protected_label_acknowledges_nothing(
    labels: dict[str, str],
) -> None:
    short = node("r1-t17", gpus=3, labels={CLIQUE: "r1", **labels})
    fleet = build_fleet([*rack("r1", trays=17), short])
    assert sorted(fleet.domain_ids) == ["r1", "r1-t17"], "the short node is detached alone"
    assert any("r1-t17 short of GPUs" in line and f"{TOPOLOGY_ACK}=r1" in line for line in fleet.fabric)
    old = [line for line in fleet.fabric if UNPROTECTED_TOPOLOGY_ACK + " on r1-t17 acknowledges nothing" in line]
    assert len(old) == (UNPROTECTED_TOPOLOGY_ACK in labels)


def test_one_label_on_two_racks_is_split_and_a_sound_fleet_is_not() -> None:
    shared = build_fleet([*rack("r1"), *rack("r1", prefix="r2")])
    assert len(shared.domain_ids) == 36 and not fits(shared, 2)
    sound = build_fleet([*rack("r1"), *rack("r2"), *rack("r3", trays=16)])
    assert sound.domain_ids == ["r1", "r2", "r3"] and not sound.warnings, "trays missing is a warning only"
    assert fits(sound, 18)


def test_a_node_of_another_product_under_a_label_is_detached_alone_and_an_even_mix_splits_the_label() -> None:
    odd = node("r1-t17", product="NVIDIA-GB300", labels={CLIQUE: "r1"})
    fleet = build_fleet([*rack("r1", trays=17), odd])
    assert sorted(fleet.domain_ids) == ["r1", "r1-t17"] and fits(fleet, 17), "17 GB200 trays agree: they keep r1"
    assert [line.split(":")[0] for line in fleet.fabric] == ["domain r1"] and "node r1-t17 claims" in fleet.fabric[0]
    halves = [
        *rack("r1", trays=9),
        *(node(f"r1-t{t}", product="NVIDIA-GB300", labels={CLIQUE: "r1"}) for t in range(9, 18)),
    ]
    even = build_fleet(halves)
    assert len(even.domain_ids) == 18 and set(even.bitmap.domain_flags.tolist()) == {1}, "9 and 9: no side is believed"
    assert not fits(even, 2)


GFD = {1: {CLIQUE: "c-r1.1", IMEX_DOMAIN: "imex-r1.1"}, 2: {CLIQUE: "c-r2.1", IMEX_DOMAIN: "imex-r2.1"}}


def gfd_rack(r: int, trays: int = 18, **extra: str) -> list[Node]:
    """Rack r<r> as GPU Feature Discovery labels it: clique and IMEX domain (and ``extra``)."""
    return [node(f"r{r}-t{t:02d}", labels={**GFD[r], **extra}) for t in range(trays)]


@pytest.mark.parametrize(
    "evidence",
    [
        pytest.param({1: {IMEX_DOMAIN: "imex-r1.1"}, 2: {IMEX_DOMAIN: "imex-r2.1"}}, id="its IMEX domain"),
        pytest.param({1: {TIER1: "leaf-a"}, 2: {TIER1: "leaf-b"}}, id="its leaf, a level above the domain"),
        pytest.param({1: {TOPOGRAPH: "nvl-1"}, 2: {TOPOGRAPH: "nvl-2"}}, id="another label naming its fabric"),
    ],
)
def test_a_node_claiming_another_racks_clique_is_detached_alone_not_the_18_trays_it_joined(
    evidence: dict[int, dict[str, str]],
) -> None:
    """r2-t17 sets rack 1's clique on itself; the label that says it is rack 2's (``evidence``) still does."""
    racks = [node(f"r{r}-t{t:02d}", labels={CLIQUE: f"c-r{r}.1", **evidence[r]}) for r in (1, 2) for t in range(18)]
    racks[-1] = node("r2-t17", labels={CLIQUE: "c-r1.1", **evidence[2]})
    fleet = build_fleet(racks)
    assert sorted(fleet.domain_ids) == ["c-r1.1", "c-r2.1", "r2-t17"]
    assert fits(fleet, 18), "rack 1 takes an 18 x 4 gang: its fabric is whole"
    [line] = fleet.fabric
    assert line.startswith("domain c-r1.1: node r2-t17 claims domain c-r1.1") and "detached alone" in line


def test_when_the_evidence_cannot_tell_the_odd_one_out_every_node_of_the_label_is_detached() -> None:
    copied = node("r2-t17", labels={**GFD[1], UNPROTECTED_TOPOLOGY_ACK: "true"})  # every label of rack 1, and an ack
    fleet = build_fleet([*gfd_rack(1), *gfd_rack(2, 17), copied])
    assert sorted(fleet.domain_ids)[:1] == ["c-r2.1"] and len(fleet.domain_ids) == 20, "19 detached, r2 whole"
    assert not fits(fleet, 18) and not fits(fleet, 19), "no gang across a fabric some node is not on"
    assert any("domain c-r1.1 has 19 nodes" in line for line in fleet.fabric)
    assert any(UNPROTECTED_TOPOLOGY_ACK + " on r2-t17 acknowledges nothing" in line for line in fleet.fabric)


def test_more_nodes_than_a_platform_connects_are_never_acknowledged() -> None:
    nineteen = [*gfd_rack(1), node("r2-t17", labels=GFD[1])]
    nineteen[0] = node("r1-t00", labels={**GFD[1], TOPOLOGY_ACK: "c-r1.1"})  # a person acknowledged rack 1
    fleet = build_fleet(nineteen)
    assert len(fleet.domain_ids) == 19 and not fits(fleet, 2)
    [line] = fleet.fabric
    assert "has 19 nodes" in line and TOPOLOGY_ACK not in line, "it does not offer an acknowledgement as the way out"


def test_only_a_ready_node_or_one_without_a_lifecycle_takes_new_plans() -> None:
    from kilter.model.annotations import LIFECYCLE

    states = ["ready", "qualifying", "degraded", "maintenance", "repairing", "retired", "redy"]
    nodes = [
        node(f"n-{s}", product="AMD_Instinct_MI355X", gpus=8, resource="amd.com/gpu", labels={LIFECYCLE: s})
        for s in states
    ]
    nodes.append(node("n-none", product="AMD_Instinct_MI355X", gpus=8, resource="amd.com/gpu"))
    fleet = build_fleet(nodes)
    reasons = {n: fleet.unusable_reason(n) for n in fleet.node_names}
    assert reasons["n-ready"] is None and reasons["n-none"] is None
    assert reasons["n-degraded"] == "lifecycle degraded" and reasons["n-retired"] == "lifecycle retired"
    assert "is no lifecycle state" in str(reasons["n-redy"]), "a typo is not taken for ready"
    assert sum(r is None for r in reasons.values()) == 2
