"""Plans through the Python API: names in, names out, reasons a person can act on."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kilter.model import codec
from kilter.model.core_v1 import PodTemplateSpec
from kilter.model.errors import InputError
from kilter.model.jobs import PodSetSpec, TopologyRequest
from kilter.topology.catalog import BUILTIN, Catalog
from kilter.topology.fleet import build_fleet
from kilter.topology.plan import commit, gang_request, plan_gang
from tests.topology.builders import CLIQUE, TIER1, node, pod, rack

CATALOG = Catalog(BUILTIN)


def pod_set(
    name: str,
    count: int,
    gpus: int,
    resource: str = "nvidia.com/gpu",
    *,
    topology: TopologyRequest | None = None,
    **spec: Any,
) -> PodSetSpec:
    limits = {resource: str(gpus)} if gpus else {}
    template = codec.convert(
        {"spec": {"containers": [{"name": "c", "resources": {"limits": limits}}], **spec}}, PodTemplateSpec
    )
    return PodSetSpec(name, count, template, topology or TopologyRequest())


def small_fleet() -> list[Any]:
    # r1: 18 idle trays; r2: 18 trays, 8 busy; an MI355X node too.
    nodes = (
        rack("r1", block="b0")
        + rack("r2", block="b0")
        + [node("mi-0", product="AMD_Instinct_MI355X", gpus=8, resource="amd.com/gpu")]
    )
    pods = [pod(f"p{t}", f"r2-t{t:02d}", 4) for t in range(8)]
    return [nodes, pods]


def test_a_gang_that_fits_a_partly_used_rack_goes_there() -> None:
    fleet = build_fleet(*small_fleet())
    plan = plan_gang(fleet, gang_request("g", [pod_set("worker", 10, 4)], CATALOG))
    assert plan.feasible
    assert plan.domains == ("r2",)
    assert plan.pod_sets[0].nodes == tuple(f"r2-t{t:02d}" for t in range(8, 18))
    assert plan.reason == "10 pods, 40 GPUs in 1 scale-up domain under 1 tier-1 of GB200-NVL72"


def test_a_required_rack_larger_than_any_rack_says_how_big_the_roomiest_is() -> None:
    fleet = build_fleet(*small_fleet())
    plan = plan_gang(
        fleet, gang_request("g", [pod_set("w", 19, 4, topology=TopologyRequest(required=CLIQUE))], CATALOG)
    )
    assert not plan.feasible
    assert plan.reason == (
        "pod set w requires one scale-up domain for 19 pods x 4 GPUs; the roomiest scale-up domain holds 18 such pods"
    )


def test_a_level_the_fleet_lacks_is_refused_with_the_known_levels() -> None:
    fleet = build_fleet(*small_fleet())
    plan = plan_gang(
        fleet,
        gang_request("g", [pod_set("w", 2, 4, topology=TopologyRequest(required="example.com/rack"))], CATALOG),
    )
    assert not plan.feasible
    assert "example.com/rack is not a topology level" in plan.reason
    assert CLIQUE in plan.reason and TIER1 in plan.reason


def test_amd_pods_land_on_amd_nodes_only() -> None:
    fleet = build_fleet(*small_fleet())
    plan = plan_gang(fleet, gang_request("g", [pod_set("w", 1, 8, "amd.com/gpu")], CATALOG))
    assert plan.platform == "MI355X-8" and plan.domains == ("mi-0",)
    too_big = plan_gang(fleet, gang_request("g", [pod_set("w", 2, 8, "amd.com/gpu")], CATALOG))
    assert too_big.reason == "pod set w needs 2 pods x 8 GPUs; idle, healthy MI355X-8 nodes hold 1 such pods"


def test_pod_sets_without_gpus_are_ignored_and_listed() -> None:
    request = gang_request("g", [pod_set("launcher", 1, 0), pod_set("worker", 2, 4)], CATALOG)
    assert request.ignored == ("launcher",)
    assert [ps.name for ps in request.pod_sets] == ["worker"]


@pytest.mark.parametrize(
    ("pod_sets", "message"),
    [
        pytest.param([pod_set("a", 1, 0)], "no pod set asks for GPUs", id="no GPUs at all"),
        pytest.param([pod_set("a", 1, 4), pod_set("b", 1, 8, "amd.com/gpu")], "but the gang uses", id="two GPU kinds"),
        pytest.param([pod_set("a", 2_000_000, 4)], "beyond kilter's limit", id="two million pods"),
        pytest.param([pod_set("a", 1, 100_000)], "no node offers more", id="100,000 GPUs per pod"),
    ],
)
def test_gangs_kilter_cannot_plan_are_input_errors(pod_sets: list[PodSetSpec], message: str) -> None:
    with pytest.raises(InputError, match=message):
        gang_request("g", pod_sets, CATALOG)


def test_node_selectors_and_tolerations_limit_the_nodes() -> None:
    taint = [{"key": "team", "value": "a", "effect": "NoSchedule"}]
    nodes = rack("r1", 4) + rack("r2", 4, taints=taint)
    fleet = build_fleet(nodes)
    plain = plan_gang(fleet, gang_request("g", [pod_set("w", 4, 4)], CATALOG))
    assert plain.domains == ("r1",)
    assert not plan_gang(fleet, gang_request("g", [pod_set("w", 5, 4)], CATALOG)).feasible
    tolerant = pod_set("w", 8, 4, tolerations=[{"key": "team", "operator": "Exists"}])
    assert plan_gang(fleet, gang_request("g", [tolerant], CATALOG)).domains == ("r1", "r2")
    pinned = pod_set("w", 2, 4, nodeSelector={"kubernetes.io/hostname": "r1-t03"}, tolerations=[{"operator": "Exists"}])
    assert not plan_gang(fleet, gang_request("g", [pinned], CATALOG)).feasible
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": CLIQUE, "operator": "In", "values": ["r2"]}]}]
            }
        }
    }
    picky = pod_set("w", 2, 4, affinity=affinity, tolerations=[{"key": "team", "value": "a", "effect": "NoSchedule"}])
    assert plan_gang(fleet, gang_request("g", [picky], CATALOG)).domains == ("r2",)


def test_commit_books_the_plan_and_the_next_plan_sees_it() -> None:
    fleet = build_fleet(rack("r1", 4))
    first = plan_gang(fleet, gang_request("a", [pod_set("w", 3, 4)], CATALOG))
    commit(fleet, first)
    second = plan_gang(fleet, gang_request("b", [pod_set("w", 2, 4)], CATALOG))
    assert not second.feasible
    assert "hold 1 such pods" in second.reason


def test_the_order_nodes_arrive_in_does_not_change_the_plan() -> None:
    nodes, pods = small_fleet()
    request = gang_request("g", [pod_set("m", 1, 4), pod_set("w", 20, 4)], CATALOG)
    expected = plan_gang(build_fleet(nodes, pods), request)
    for seed in range(5):
        shuffled = nodes[:]
        random.Random(seed).shuffle(shuffled)
        assert plan_gang(build_fleet(shuffled, pods), request) == expected
