"""Gang recognition from a single pod, and the plan lifecycle (reservation, binding, timeout)."""

from __future__ import annotations

from typing import Any

import pytest

from kilter.gangs import GangBook, identify
from kilter.gangs.book import BookSettings
from kilter.model import codec
from kilter.model.core_v1 import Pod
from kilter.model.errors import InputError
from kilter.state.store import ADDED, DELETED, ClusterStore, Event
from tests.extenders.conftest import cluster_objects, pod_json
from tests.topology.builders import CLIQUE, TIER1, node_dict


def store_with(*extra: dict[str, Any]) -> ClusterStore:
    store = ClusterStore()
    store.replace([*cluster_objects(), *extra])
    return store


def pod(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, name: str = "p") -> Pod:
    return codec.convert(pod_json(name, 4, labels=labels, annotations=annotations), Pod)


@pytest.mark.parametrize(
    ("labels", "annotations", "key", "size"),
    [
        ({"kilter.dev/gang": "g", "kilter.dev/gang-size": "8"}, {}, "ml/gang/g", 8),
        ({"kueue.x-k8s.io/pod-group-name": "pg"}, {"kueue.x-k8s.io/pod-group-total-count": "3"}, "ml/pod-group/pg", 3),
        (
            {"leaderworkerset.sigs.k8s.io/name": "infer", "leaderworkerset.sigs.k8s.io/group-index": "2"},
            {"leaderworkerset.sigs.k8s.io/size": "4"},
            "ml/lws/infer/2",
            4,
        ),
        ({"jobset.sigs.k8s.io/jobset-name": "js"}, {}, "ml/jobset/js", None),
        ({"training.kubeflow.org/job-name": "pt"}, {}, "ml/kubeflow/pt", None),
        ({}, {"scheduling.k8s.io/group-name": "vg"}, "ml/podgroup/vg", None),
    ],
)
def test_gangs_are_recognised_from_the_pod_alone(
    labels: dict[str, str], annotations: dict[str, str], key: str, size: int | None
) -> None:
    gang = identify(pod(labels, annotations), store_with())
    assert gang is not None and (gang.key, gang.size) == (key, size)


def test_a_plain_pod_is_no_gang() -> None:
    assert identify(pod(), store_with()) is None


def test_sizes_come_from_the_owning_objects_in_the_state() -> None:
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "wl", "namespace": "ml"},
        "spec": {
            "queueName": "q",
            "podSets": [
                {"name": "a", "count": 2, "template": {"spec": {"containers": [{"name": "c"}]}}},
                {"name": "b", "count": 3, "template": {"spec": {"containers": [{"name": "c"}]}}},
            ],
        },
    }
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "vg", "namespace": "ml"},
        "spec": {"minMember": 6},
    }
    store = store_with(workload, group)
    kueue = identify(pod(annotations={"kueue.x-k8s.io/workload": "wl"}), store)
    assert kueue is not None and kueue.size == 5 and [ps.name for ps in kueue.pod_sets] == ["a", "b"]
    volcano = identify(pod(annotations={"scheduling.k8s.io/group-name": "vg"}), store)
    assert volcano is not None and volcano.size == 6


@pytest.mark.parametrize("size", ["0", "-1", "many", "1000001"])
def test_a_bad_gang_size_is_an_input_error(size: str) -> None:
    with pytest.raises(InputError, match=r"kilter\.dev/gang-size"):
        identify(pod({"kilter.dev/gang": "g", "kilter.dev/gang-size": size}), store_with())


def test_a_gang_size_nothing_tells_counts_the_gangs_pods_in_the_state() -> None:
    labels = {"jobset.sigs.k8s.io/jobset-name": "js"}
    members = [pod_json(f"js-{i}", 4, labels=labels) for i in range(3)]
    store = store_with(*members)
    book = GangBook(store)
    p = codec.convert(members[0], Pod)
    gang = identify(p, store)
    assert gang is not None
    plan = book.plan_for(gang, p, 4)
    assert plan is not None and plan.feasible and len(plan.slots) == 3
    lone = identify(pod({"jobset.sigs.k8s.io/jobset-name": "solo"}), store)
    assert lone is not None and book.plan_for(lone, pod({"jobset.sigs.k8s.io/jobset-name": "solo"}), 4) is None


def test_a_plan_reserves_its_gpus_and_gives_them_back_when_it_times_out() -> None:
    store = store_with()
    now = [0.0]
    book = GangBook(store, settings=BookSettings(timeout_s=60.0), clock=lambda: now[0])
    p = pod({"kilter.dev/gang": "g", "kilter.dev/gang-size": "2"})
    gang = identify(p, store)
    assert gang is not None
    fleet = store.fleet()
    idle = int(fleet.bitmap.domain_free_gpus.sum())
    plan = book.plan_for(gang, p, 4)
    assert plan is not None and int(fleet.bitmap.domain_free_gpus.sum()) == idle - 8
    assert book.plan_for(gang, p, 4) is plan  # the next pod of the gang gets the same plan
    now[0] = 61.0
    book.expire()
    assert book.open_count() == 0 and int(fleet.bitmap.domain_free_gpus.sum()) == idle


def test_binding_after_a_fleet_rebuild_books_the_pod_once() -> None:
    store = store_with()
    book = GangBook(store)
    p = pod({"kilter.dev/gang": "g", "kilter.dev/gang-size": "2"})
    gang = identify(p, store)
    assert gang is not None
    plan = book.plan_for(gang, p, 4)
    assert plan is not None and plan.feasible
    node = plan.slots[0].node
    store.apply([Event(ADDED, node_dict("r9-t00", labels={CLIQUE: "r9", TIER1: "leaf-a"}))])  # rebuild pending
    book.bound("uid-p", node, 4)
    fleet = store.fleet()
    assert fleet.bitmap.node_free_gpus(fleet.node_index[node]) == 0  # the pod's 4, not 4 + a lost reservation
    again = book.plan_for(gang, p, 4)  # the next pod re-reserves the open slot on the rebuilt fleet
    assert again is plan
    other = plan.slots[1].node
    assert fleet.bitmap.node_free_gpus(fleet.node_index[other]) == 0


def test_a_plans_reservation_survives_a_fleet_rebuild_and_the_gang_keeps_its_plan() -> None:
    store = store_with()
    book = GangBook(store)
    p = pod({"kilter.dev/gang": "g", "kilter.dev/gang-size": "2"})
    gang = identify(p, store)
    assert gang is not None
    plan = book.plan_for(gang, p, 4)
    assert plan is not None and plan.feasible
    held = int(store.fleet().bitmap.domain_free_gpus.sum())
    store.apply([Event(ADDED, node_dict("r9-t00", labels={CLIQUE: "r9", TIER1: "leaf-a"}))])
    fleet = store.fleet()
    assert int(fleet.bitmap.domain_free_gpus.sum()) == held + 4  # the new tray only: the plan's 8 stay held
    assert book.plan_for(gang, p, 4) is plan and book.replanned == 0
    assert [s.node_index for s in plan.slots] == [fleet.node_index[s.node] for s in plan.slots]


@pytest.mark.parametrize("change", ["node gone", "node full"])
def test_a_plan_whose_reservation_a_rebuild_lost_is_made_again(change: str) -> None:
    store = store_with()
    book = GangBook(store)
    p = pod({"kilter.dev/gang": "g", "kilter.dev/gang-size": "2"})
    gang = identify(p, store)
    assert gang is not None
    plan = book.plan_for(gang, p, 4)
    assert plan is not None and plan.feasible
    node = plan.slots[0].node
    if change == "node gone":
        store.apply([Event(DELETED, node_dict(node))])
    else:
        store.apply([Event(ADDED, pod_json("intruder", 4, node=node))])  # another scheduler's pod
        store.apply([Event(ADDED, node_dict("r9-t00", labels={CLIQUE: "r9", TIER1: "leaf-a"}))])  # a rebuild
    again = book.plan_for(gang, p, 4)
    assert again is not None and again is not plan and again.feasible and book.replanned == 1
    assert node not in {s.node for s in again.slots}
    fleet = store.fleet()
    assert sum(s.gpus for s in again.slots) == 8  # 2 pods x 4 GPUs, reserved on whole trays
    assert all(fleet.bitmap.node_free_gpus(fleet.node_index[s.node]) == 0 for s in again.slots)
    assert (
        fleet.bitmap.node_free_gpus(fleet.node_index[node]) == 0
        if change == "node full"
        else node not in fleet.node_index
    )
