"""A domain whose shape is wrong takes single-pod gangs only, until fixed or acknowledged (issue #23)."""

from __future__ import annotations

from kilter.model.annotations import TOPOLOGY_ACK
from kilter.topology.catalog import BUILTIN, Catalog
from kilter.topology.fleet import Fleet, build_fleet
from kilter.topology.plan import gang_request, plan_gang
from tests.topology.builders import CLIQUE, node, rack
from tests.topology.test_plan import pod_set

CATALOG = Catalog(BUILTIN)


def fits(fleet: Fleet, pods: int) -> bool:
    return plan_gang(fleet, gang_request("g", [pod_set("w", pods, 4)], CATALOG)).feasible


def test_a_node_short_of_gpus_is_detached_alone_and_its_rack_stays_a_domain() -> None:
    fleet = build_fleet([*rack("r1", trays=17), node("r1-t17", gpus=3, labels={CLIQUE: "r1"})])
    assert sorted(fleet.domain_ids) == ["r1", "r1-t17"]
    assert fleet.bitmap.domain_flags.tolist()[fleet.domain_ids.index("r1-t17")] & 1, "the short node: detached"
    assert any("domain r1: r1-t17 short of GPUs" in w and TOPOLOGY_ACK in w for w in fleet.warnings)
    assert fits(fleet, 17) and not fits(fleet, 18), "the 17 whole trays still take a gang together"


def test_an_acknowledged_domain_is_offered_whole() -> None:
    acked = node("r1-t17", gpus=3, labels={CLIQUE: "r1", TOPOLOGY_ACK: "true"})
    fleet = build_fleet([*rack("r1", trays=17), acked])
    assert fleet.domain_ids == ["r1"] and not fleet.warnings
    assert fits(fleet, 17) and set(fleet.bitmap.domain_flags.tolist()) == {0}, "nothing detached"


def test_one_label_on_two_racks_is_split_and_a_sound_fleet_is_not() -> None:
    shared = build_fleet([*rack("r1"), *rack("r1", prefix="r2")])
    assert len(shared.domain_ids) == 36 and not fits(shared, 2)
    sound = build_fleet([*rack("r1"), *rack("r2"), *rack("r3", trays=16)])
    assert sound.domain_ids == ["r1", "r2", "r3"] and not sound.warnings, "trays missing is a warning only"
    assert fits(sound, 18)


def test_products_mixed_under_one_label_are_split() -> None:
    fleet = build_fleet([*rack("r1", trays=17), node("r1-t17", product="NVIDIA-GB300", labels={CLIQUE: "r1"})])
    assert len(fleet.domain_ids) == 18 and set(fleet.bitmap.domain_flags.tolist()) == {1}, "all detached"
    assert not fits(fleet, 2)


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
