"""The planner's one-domain rule and node mask (``GangRequest.one_domain``, ``node_ok``), and cliques keyed whole."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from kilter.topology.catalog import BUILTIN, Catalog
from kilter.topology.fleet import Fleet, build_fleet
from kilter.topology.plan import gang_request, plan_gang
from tests.topology.builders import CLIQUE, node, pod, rack
from tests.topology.test_plan import pod_set

CATALOG = Catalog(BUILTIN)


def test_one_clique_id_under_two_cluster_uuids_is_two_scale_up_domains() -> None:
    nodes = [node(f"a-t{t:02d}", labels={CLIQUE: "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1"}) for t in range(18)]
    nodes += [node(f"b-t{t:02d}", labels={CLIQUE: "3183419e-5c1d-4c1e-9b6d-d895a9fb06be.1"}) for t in range(18)]
    fleet = build_fleet(nodes)
    assert sorted(fleet.domain_ids) == [
        "3183419e-5c1d-4c1e-9b6d-d895a9fb06be.1",
        "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1",
    ]
    assert not fleet.warnings  # no "domain has 36 nodes, more than the platform's 18"


def two_racks(busy_r1: int, busy_r2: int) -> Fleet:
    """Racks r1 and r2 of 18 trays, the first ``busy_r1`` / ``busy_r2`` trays of each full."""
    pods = [pod(f"x{t}", f"r1-t{t:02d}", 4) for t in range(busy_r1)]
    pods += [pod(f"y{t}", f"r2-t{t:02d}", 4) for t in range(busy_r2)]
    return build_fleet(rack("r1") + rack("r2"), pods)


def test_a_one_domain_gang_whose_pod_sets_the_planner_splits_is_tried_in_each_domain_alone() -> None:
    # r1: 16 idle trays, r2: 17. Workers (16) fit r1 best and fill it, so the leader lands in r2: two domains.
    # Only r2 holds all 17 pods.
    fleet = two_racks(2, 1)
    request = gang_request("g", [pod_set("leader", 1, 4), pod_set("worker", 16, 4)], CATALOG)
    assert plan_gang(fleet, request).domains == ("r1", "r2")
    plan = plan_gang(fleet, replace(request, one_domain=True, note="ComputeDomain ml/g: one clique"))
    assert plan.feasible and plan.domains == ("r2",)
    assert plan.reason == "17 pods, 68 GPUs in 1 scale-up domain of GB200-NVL72 (ComputeDomain ml/g: one clique)"


def test_a_one_domain_gang_no_domain_holds_whole_is_infeasible_and_says_so() -> None:
    fleet = two_racks(2, 2)  # 16 idle trays each; the gang needs 17
    request = replace(gang_request("g", [pod_set("leader", 1, 4), pod_set("worker", 16, 4)], CATALOG), one_domain=True)
    plan = plan_gang(fleet, request)
    assert not plan.feasible and plan.reason == "g: its pod sets fit no one scale-up domain together"


def test_the_node_mask_keeps_the_plan_off_the_nodes_it_clears() -> None:
    fleet = two_racks(8, 0)  # r1 is the best fit of 4 pods
    request = gang_request("g", [pod_set("worker", 4, 4)], CATALOG)
    assert plan_gang(fleet, request).domains == ("r1",)
    ok = np.array([not name.startswith("r1-") for name in fleet.node_names], dtype=np.uint8)
    plan = plan_gang(fleet, replace(request, node_ok=ok))
    assert plan.domains == ("r2",)
    nothing = plan_gang(fleet, replace(request, node_ok=np.zeros(fleet.n_nodes, dtype=np.uint8)))
    assert not nothing.feasible
