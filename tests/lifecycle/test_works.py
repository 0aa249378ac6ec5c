"""What a maintenance plan knows of the jobs on the fleet: read from the cluster as a real one shows them, never
their true durations; a bad annotation costs the job its estimate, not the plan."""

from __future__ import annotations

from typing import Any

import pytest

from kilter.lifecycle.works import CHECKPOINT_INTERVAL, fleet_work
from kilter.model.annotations import MIN_RUNTIME
from kilter.state.store import ClusterStore
from tests.extenders.conftest import pod_json
from tests.topology.builders import CLIQUE, node_dict

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
H = 3600.0
START = "2027-01-15T00:00:00Z"


def pod(name: str, node: str, gang: str, *, notes: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    labels = {"kilter.dev/gang": gang, "kilter.dev/gang-size": "1", **extra.pop("labels", {})}
    obj = pod_json(name, 4, node=node, labels=labels, annotations=notes)
    obj["metadata"]["creationTimestamp"] = START
    obj["spec"].update(extra)
    return obj


def queues() -> list[dict[str, Any]]:
    kueue = "kueue.x-k8s.io/v1beta2"
    return [
        {"apiVersion": kueue, "kind": "Cohort", "metadata": {"name": "org", "annotations": {MIN_RUNTIME: "12h"}}},
        {"apiVersion": kueue, "kind": "ClusterQueue", "metadata": {"name": "research"}, "spec": {"cohortName": "org"}},
        {
            "apiVersion": kueue,
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "ml"},
            "spec": {"clusterQueue": "research"},
        },
    ]


def store_of(*pods: dict[str, Any], retired: tuple[str, ...] = ()) -> ClusterStore:
    store = ClusterStore()
    nodes = [
        node_dict(name, labels={CLIQUE: f"r{r}", **({"kilter.dev/lifecycle": "retired"} if name in retired else {})})
        for r in (1, 2)
        for t in range(2)
        if (name := f"r{r}-t{t}")
    ]
    store.replace([*nodes, *pods, *queues()])
    return store


def test_a_declared_runtime_a_checkpoint_and_a_queue_guard_are_read_from_the_job() -> None:
    store = store_of(
        pod(
            "a",
            "r1-t0",
            "a",
            notes={"kilter.dev/expected-runtime": "10h", CHECKPOINT_INTERVAL: "30m"},
            labels={"kueue.x-k8s.io/queue-name": "lq"},
        )
    )
    (work,) = fleet_work(store, now_s=NOW).works
    assert work.key == "ml/gang/a" and work.gpus == 4 and dict(work.placement) == {"r1": 4}
    assert work.started_s == NOW - 8 * H and work.expected_end_s == NOW + 2 * H
    assert work.checkpoint_s == 1800.0
    assert work.guarded_until_s == NOW + 4 * H, "the Cohort's min-runtime reaches the queue below it"


def test_a_job_past_its_estimate_or_without_one_has_no_known_end() -> None:
    store = store_of(pod("late", "r1-t0", "late", notes={"kilter.dev/expected-runtime": "2h"}), pod("x", "r1-t1", "x"))
    assert [w.expected_end_s for w in fleet_work(store, now_s=NOW).works] == [None, None]


def test_a_bad_annotation_costs_the_job_its_estimate_and_is_reported() -> None:
    store = store_of(
        pod("bad", "r1-t0", "bad", notes={"kilter.dev/expected-runtime": "soon", CHECKPOINT_INTERVAL: "1h"})
    )
    found = fleet_work(store, now_s=NOW)
    (work,) = found.works
    assert work.expected_end_s is None and work.checkpoint_s is None
    assert len(found.problems) == 1 and "ml/gang/bad" in found.problems[0] and "soon" in found.problems[0]


def test_preemptible_by_priority_and_placement_only_on_the_chosen_nodes() -> None:
    store = store_of(
        pod("low-0", "r1-t0", "low", priority=-10, labels={"kilter.dev/gang-size": "2"}),
        pod("low-1", "r2-t0", "low", priority=-10, labels={"kilter.dev/gang-size": "2"}),
        pod("high", "r2-t1", "high", priority=100),
    )
    found = fleet_work(store, now_s=NOW, nodes=["r2-t0", "r2-t1"])
    assert found.domain_nodes == {"r2": ["r2-t0", "r2-t1"]} and found.domain_gpus == {"r2": 8}
    low, high = found.works[1], found.works[0]
    assert low.key == "ml/gang/low" and low.preemptible and dict(low.placement) == {"r2": 4}
    assert low.gpus == 8, "a kill loses its work on every GPU, the ones outside the chosen nodes too"
    assert not high.preemptible


@pytest.mark.parametrize("selection", [None, ["r1-t0", "r1-t1", "r2-t0", "r2-t1"]])
def test_the_whole_fleet_and_all_its_nodes_read_the_same(selection: list[str] | None) -> None:
    found = fleet_work(store_of(pod("a", "r1-t0", "a")), now_s=NOW, nodes=selection)
    assert found.domain_gpus == {"r1": 8, "r2": 8} and [w.key for w in found.works] == ["ml/gang/a"]


def test_a_retired_node_is_never_planned_for() -> None:
    store = store_of(pod("a", "r1-t0", "a"), retired=("r1-t1",))
    found = fleet_work(store, now_s=NOW)
    assert found.domain_nodes == {"r1": ["r1-t0"], "r2": ["r2-t0", "r2-t1"]}
    assert fleet_work(store, now_s=NOW, nodes=["r1-t1"]).domain_nodes == {}


def test_jobs_on_nodes_out_of_service_are_seen_and_only_kilters_own_cordon_idles_gpus() -> None:
    daemon = pod("dcgm", "r2-t0", "dcgm")
    daemon["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "controller": True}
    ]
    store = store_of(pod("a", "r1-t0", "a"), pod("b", "r2-t1", "b"), daemon)
    cordoned = {"r1-t0": "kilter", "r1-t1": "person"}
    nodes = []
    for r in (1, 2):
        for t in range(2):
            name = f"r{r}-t{t}"
            obj = node_dict(name, labels={CLIQUE: f"r{r}"}, cordoned=name in cordoned)
            if cordoned.get(name) == "kilter":
                note = '{"plan":"p","step":0,"phase":"draining","cordoned":true}'
                obj["metadata"]["annotations"] = {"kilter.dev/maintenance-progress": note}
            nodes.append(obj)
    store.replace([*nodes, pod("a", "r1-t0", "a"), pod("b", "r2-t1", "b"), daemon, *queues()])
    found = fleet_work(store, now_s=NOW)
    assert [w.key for w in found.works] == ["ml/gang/a", "ml/gang/b"], "the cordoned node's job seen, no DaemonSet"
    assert found.domain_gpus == {"r1": 4, "r2": 8}, "a person's cordon idles its GPUs whatever the plan does"
