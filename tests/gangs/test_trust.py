"""The queue a gang's pod names bounds what the gang may ask: a Volcano Queue's capability, a ClusterQueue's quota."""

from __future__ import annotations

from typing import Any

from kilter.gangs import trust
from kilter.model import codec
from kilter.model.core_v1 import Pod
from kilter.quota.tree import build_tree
from kilter.state.store import ClusterStore
from tests.extenders.conftest import cluster_objects, pod_json

GPU = "nvidia.com/gpu"


def volcano_objects(capability: dict[str, str]) -> list[dict[str, Any]]:
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "capped"},
        "spec": {"weight": 1, "capability": capability},
    }
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"minMember": 4, "queue": "capped"},
    }
    return [queue, group]


def limit_of(objects: list[dict[str, Any]]) -> tuple[str, int] | None:
    store = ClusterStore()
    store.replace([*cluster_objects(), *objects])
    pod = codec.convert(pod_json("train-0", 4, annotations={"scheduling.k8s.io/group-name": "train"}), Pod)
    state = store.state()
    return trust.queue_limit(store, pod, GPU, lambda: build_tree(state.cluster_queues, state.cohorts))


def test_a_volcano_queues_capability_is_the_most_its_gangs_may_ask() -> None:
    assert limit_of(volcano_objects({GPU: "8", "cpu": "64"})) == ("Queue capped", 8)


def test_a_volcano_queue_without_a_capability_for_the_gpus_sets_no_limit() -> None:
    assert limit_of(volcano_objects({"cpu": "64"})) is None
    assert limit_of([]) is None  # no PodGroup, no Queue: nothing known
