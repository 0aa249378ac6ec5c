"""The lifecycle controller against the list/watch test server: nodes move only on the right signals, flapping is
damped, a person's cordon and states are left alone, each move is a label and an Event on the node."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from kilter.kube.api import ApiServer
from kilter.kube.events import EventRecorder
from kilter.lifecycle.controller import LifecycleController
from kilter.model.annotations import LIFECYCLE
from kilter.state.store import ClusterStore
from kilter.topology.lifecycle import QUALIFICATION, QUALIFICATION_SUITE, LifecyclePolicy
from tests.extenders.conftest import pod_json
from tests.listwatch import NODES, PODS, ListWatchServer, Resource
from tests.topology.builders import CLIQUE, node_dict

EVENTS = Resource("", "v1", "events", "Event", namespaced=True)
POLICY = LifecyclePolicy(failures=3, window_s=600, sustained_s=300, suite="nccl-burn")


class Cluster:
    """The server, a store that reads it as the watches would, and a controller on a clock the test moves."""

    def __init__(self, server: ListWatchServer) -> None:
        self.server = server
        self.now = 1_000_000.0
        self.store = ClusterStore()
        self.api = ApiServer("http", server.host, server.port)
        self.controller = LifecycleController(self.store, self.api, policy=POLICY, wall=lambda: self.now)

    def node(self, name: str) -> dict[str, Any]:
        return self.server.get_object(NODES, None, name)

    def state_of(self, name: str) -> str | None:
        labels: dict[str, str] = self.node(name)["metadata"].get("labels") or {}
        return labels.get(LIFECYCLE)

    def set(self, name: str, *, ready: bool | None = None, labels: dict[str, str | None] | None = None) -> None:
        obj = self.node(name)
        if ready is not None:
            obj["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
        for key, value in (labels or {}).items():
            if value is None:
                obj["metadata"]["labels"].pop(key, None)
            else:
                obj["metadata"]["labels"][key] = value
        self.server.update(obj)

    def round(self, advance_s: float = 10.0) -> list[tuple[str, str]]:
        self.now += advance_s
        self.store.replace([*self.server.list_objects(NODES), *self.server.list_objects(PODS)])
        return [(m.node, m.to_state) for m in asyncio.run(self.controller.run_once())]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with ListWatchServer([NODES, PODS, EVENTS]) as server:
        for t in range(4):
            server.add(node_dict(f"r1-t{t}", labels={CLIQUE: "r1"}))
        yield Cluster(server)


def test_one_failure_or_two_are_damped_and_the_third_within_the_window_degrades(cluster: Cluster) -> None:
    for episode in range(2):
        cluster.set("r1-t0", ready=False)
        assert cluster.round() == [], f"failure {episode + 1} of 3"
        cluster.set("r1-t0", ready=True)
        assert cluster.round() == []
    cluster.set("r1-t0", ready=False)
    assert cluster.round() == [("r1-t0", "degraded")]
    assert cluster.state_of("r1-t0") == "degraded" and cluster.state_of("r1-t1") is None


def test_failures_further_apart_than_the_window_never_add_up(cluster: Cluster) -> None:
    for _ in range(5):
        cluster.set("r1-t0", ready=False)
        assert cluster.round() == []
        cluster.set("r1-t0", ready=True)
        assert cluster.round(advance_s=400) == []


def test_a_failure_that_lasts_degrades_without_flapping(cluster: Cluster) -> None:
    cluster.set("r1-t0", ready=False)
    assert cluster.round() == []
    assert cluster.round(advance_s=200) == []
    assert cluster.round(advance_s=200) == [("r1-t0", "degraded")], "failing 400 s > 300 s"


def test_a_degraded_node_is_repaired_only_once_nothing_runs_on_it(cluster: Cluster) -> None:
    cluster.server.add(pod_json("train-0", 4, node="r1-t0"))
    cluster.set("r1-t0", labels={LIFECYCLE: "degraded"})
    assert cluster.round() == [], "a gang still runs there"
    cluster.server.delete("", "pods", "ml", "train-0")
    assert cluster.round() == [("r1-t0", "repairing")]


def test_repair_ends_when_health_is_clear_and_only_a_new_qualification_passes_it(cluster: Cluster) -> None:
    stale: dict[str, str | None] = {LIFECYCLE: "repairing", QUALIFICATION: "passed", QUALIFICATION_SUITE: "nccl-burn"}
    cluster.set("r1-t0", ready=False, labels=stale)
    assert cluster.round() == [], "still failing"
    cluster.set("r1-t0", ready=True)
    assert cluster.round() == [], "healthy for a moment is not repaired: a flap looks like that"
    assert cluster.round(advance_s=300) == [("r1-t0", "qualifying")]
    labels = cluster.node("r1-t0")["metadata"]["labels"]
    assert QUALIFICATION not in labels and QUALIFICATION_SUITE not in labels, "the old result is cleared"
    assert cluster.round() == [], "no result yet"
    cluster.set("r1-t0", labels={QUALIFICATION: "passed", QUALIFICATION_SUITE: "quick-smoke"})
    assert cluster.round() == [], "another suite than the one required"
    cluster.set("r1-t0", labels={QUALIFICATION: "passed", QUALIFICATION_SUITE: "nccl-burn"})
    assert cluster.round() == [("r1-t0", "ready")]


def test_a_failed_qualification_sends_the_node_back_to_repair_until_the_repair_clears_it(cluster: Cluster) -> None:
    cluster.set("r1-t0", labels={LIFECYCLE: "qualifying", QUALIFICATION: "failed", QUALIFICATION_SUITE: "nccl-burn"})
    assert cluster.round() == [("r1-t0", "repairing")]
    assert cluster.round(advance_s=400) == [] and cluster.round(advance_s=400) == [], "no re-qualification loop"
    cluster.set("r1-t0", labels={QUALIFICATION: None})  # the repair tooling: fixed what failed
    assert cluster.round(advance_s=10) == [("r1-t0", "qualifying")], "healthy all along"


def test_a_ready_node_cordoned_as_kubectl_does_is_never_degraded(cluster: Cluster) -> None:
    obj = cluster.node("r1-t0")
    obj["spec"] = {
        "unschedulable": True,
        "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
    }
    cluster.server.update(obj)
    for _ in range(5):
        assert cluster.round(advance_s=200) == []
    assert cluster.state_of("r1-t0") is None


def test_failures_in_maintenance_are_not_held_against_the_node_once_it_is_back(cluster: Cluster) -> None:
    cluster.set("r1-t0", ready=False, labels={LIFECYCLE: "maintenance"})
    for _ in range(4):
        assert cluster.round(advance_s=200) == []
    cluster.set("r1-t0", labels={LIFECYCLE: "ready"})  # a person ends maintenance while it still reboots
    assert cluster.round() == [], "not degraded on the spot for what happened in maintenance"
    cluster.set("r1-t0", ready=True)
    assert cluster.round(advance_s=400) == []


def test_a_person_s_cordon_is_no_failure_and_stays_and_their_states_are_theirs(cluster: Cluster) -> None:
    cordoned = cluster.node("r1-t1")
    cordoned["spec"] = {"unschedulable": True}
    cordoned["metadata"]["labels"].update({LIFECYCLE: "qualifying", QUALIFICATION: "passed"})
    cordoned["metadata"]["labels"][QUALIFICATION_SUITE] = "nccl-burn"
    cluster.server.update(cordoned)
    cluster.set("r1-t2", ready=False, labels={LIFECYCLE: "maintenance"})
    cluster.set("r1-t3", labels={LIFECYCLE: "retired"})
    for _ in range(4):
        assert cluster.round(advance_s=200) in ([], [("r1-t1", "ready")])
    assert cluster.state_of("r1-t1") == "ready" and cluster.node("r1-t1")["spec"]["unschedulable"] is True
    assert (cluster.state_of("r1-t2"), cluster.state_of("r1-t3")) == ("maintenance", "retired")


def test_each_move_is_an_event_on_the_node(cluster: Cluster) -> None:
    cluster.controller.events = EventRecorder(cluster.api)
    cluster.set("r1-t0", labels={LIFECYCLE: "qualifying", QUALIFICATION: "failed", QUALIFICATION_SUITE: "nccl-burn"})
    cluster.round()
    cluster.controller.events.close()
    (event,) = cluster.server.list_objects(EVENTS)
    assert event["metadata"]["namespace"] == "default" and event["metadata"]["name"].startswith("r1-t0.")
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "r1-t0",
        "uid": cluster.node("r1-t0")["metadata"]["uid"],
    }
    assert (event["reason"], event["type"]) == ("KilterNodeRepairing", "Warning")
    assert "qualification failed (nccl-burn)" in event["message"]


@pytest.mark.parametrize("store_caught_up", [False, True])
def test_a_node_changed_since_the_decision_is_not_overwritten(cluster: Cluster, store_caught_up: bool) -> None:
    cluster.set("r1-t0", labels={LIFECYCLE: "qualifying", QUALIFICATION: "failed", QUALIFICATION_SUITE: "nccl-burn"})
    cluster.now += 10
    cluster.store.replace([*cluster.server.list_objects(NODES)])
    moves = cluster.controller.decide()
    cluster.set("r1-t0", labels={LIFECYCLE: "maintenance"})  # a person, meanwhile
    if store_caught_up:  # the watch delivered the person's change before the write went out
        cluster.store.replace([*cluster.server.list_objects(NODES)])
    assert [cluster.controller.write(m) for m in moves] == [False]
    assert cluster.state_of("r1-t0") == "maintenance" and cluster.controller.conflicts == 1
