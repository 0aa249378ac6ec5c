"""The request narrowing of ``gangs.cliques`` seen from the gang book: the driver's node label, nodes without a
clique, and pods that join no ComputeDomain."""

from __future__ import annotations

from typing import Any

from kilter.gangs import GangBook, identify
from kilter.model import codec
from kilter.model.core_v1 import Pod
from kilter.state.store import ClusterStore
from kilter.topology.plan import gang_request, with_clique
from tests.extenders.conftest import cluster_objects, pod_json
from tests.gangs.cd_scenario import cd_pod, compute_domain
from tests.topology.builders import node_dict
from tests.topology.test_plan import pod_set

NODE_LABEL = "resource.nvidia.com/computeDomain"


def labelled(uid: str) -> list[dict[str, Any]]:
    """The scenario's cluster with r2-t10 labelled by the driver as serving ComputeDomain ``uid``."""
    objects = cluster_objects()
    for obj in objects:
        if obj["metadata"]["name"] == "r2-t10":
            obj["metadata"]["labels"][NODE_LABEL] = uid
    return objects


def racks_planned(objects: list[dict[str, Any]], pod: dict[str, Any]) -> set[str]:
    store = ClusterStore()
    store.replace(objects)
    book = GangBook(store)
    typed = codec.convert(pod, Pod)
    gang = identify(typed, store)
    assert gang is not None
    plan = book.plan_for(gang, typed, 4)
    assert plan is not None and plan.feasible
    return {s.node.split("-")[0] for s in plan.slots}


def test_a_clique_the_driver_labels_for_another_compute_domain_is_left_out() -> None:
    mine = [compute_domain("a", num_nodes=4), *(cd_pod(f"a-{i}", "a-channel") for i in range(4))]
    other = compute_domain("b")
    assert racks_planned([*labelled("cd-uid-b"), *mine, other], cd_pod("a-0", "a-channel")) == {"r1"}
    # A label naming a ComputeDomain the state does not hold (deleted, its label left behind) keeps nothing out.
    assert racks_planned([*labelled("cd-uid-gone"), *mine, other], cd_pod("a-0", "a-channel")) == {"r2"}


def test_nodes_without_a_clique_are_no_place_for_a_compute_domain_and_other_pods_are_unaffected() -> None:
    lost = node_dict("lost-t00")  # a GB200 tray whose clique label GPU Feature Discovery dropped
    store = ClusterStore()
    store.replace([*cluster_objects(), lost, compute_domain("a")])
    fleet = store.fleet()
    request = gang_request("ml/compute-domain/a", [pod_set("pods", 1, 4)], fleet.catalog)
    book = GangBook(store)
    facts = book.cliques.constrain(store, request, pod=codec.convert(cd_pod("a-0", "a-channel"), Pod), gang="g")
    narrowed = with_clique(fleet, facts)  # the rule the planner applies to the facts the book gathered
    assert narrowed.one_domain and narrowed.node_ok is not None
    assert narrowed.node_ok[fleet.node_index["lost-t00"]] == 0 and narrowed.node_ok[fleet.node_index["r1-t00"]] == 1
    assert narrowed.note == "ComputeDomain ml/a: one clique"
    plain = codec.convert(pod_json("p", 4), Pod)
    assert book.cliques.constrain(store, request, pod=plain, gang="h") is request
    other_ns = codec.convert(cd_pod("q", "a-channel") | {"metadata": {"name": "q", "namespace": "x"}}, Pod)
    assert book.cliques.constrain(store, request, pod=other_ns, gang="h") is request
