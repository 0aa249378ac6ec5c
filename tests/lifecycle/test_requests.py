"""Maintenance asked for on the nodes (``kilter.dev/maintenance: NAME``), drained by the lifecycle controller a
round at a time against the list/watch test server; a restarted controller resumes; a stop is said once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from kilter.kube.api import ApiServer
from kilter.kube.events import EventRecorder
from kilter.lifecycle.controller import LifecycleController
from kilter.lifecycle.drain import Drain
from kilter.lifecycle.plan_doc import plan_document
from kilter.lifecycle.progress import MAINTENANCE, MAINTENANCE_DONE, progress_of
from kilter.lifecycle.requests import MaintenanceRequests, RequestSettings
from kilter.lifecycle.works import fleet_work
from kilter.model.annotations import LIFECYCLE
from kilter.state.store import ClusterStore
from kilter.topology.lifecycle import QUALIFICATION, QUALIFICATION_SUITE, LifecyclePolicy
from kilter.topology.maintenance import MaintenanceAsk, plan_maintenance
from tests.extenders.conftest import pod_json
from tests.listwatch import NODES, PDBS, PODS, ListWatchServer, Resource
from tests.topology.builders import CLIQUE, node_dict

EVENTS = Resource("", "v1", "events", "Event", namespaced=True)
NOW = 1_800_000_000.0


class Cluster:
    def __init__(self, server: ListWatchServer) -> None:
        self.server = server
        self.now = NOW
        self.api = ApiServer("http", server.host, server.port)
        self.events = EventRecorder(self.api, repeat_s=0.0)  # kilter's own dedup is what is under test
        self.controller = self.fresh()

    def fresh(self) -> LifecycleController:
        """A controller as a newly started (or newly elected) kilter has it: nothing in memory."""
        store = ClusterStore()
        requests = MaintenanceRequests(
            store, self.api, RequestSettings(suite="nccl"), events=self.events, wall=lambda: self.now
        )
        policy = LifecyclePolicy(suite="nccl")
        return LifecycleController(store, self.api, policy=policy, wall=lambda: self.now, requests=requests)

    def node(self, name: str) -> dict[str, Any]:
        return self.server.get_object(NODES, None, name)

    def edit(self, name: str, *, labels: dict[str, str] | None = None, notes: dict[str, str] | None = None) -> None:
        obj = self.node(name)
        obj["metadata"].setdefault("labels", {}).update(labels or {})
        obj["metadata"].setdefault("annotations", {}).update(notes or {})
        self.server.update(obj)

    def label(self, name: str, key: str) -> str | None:
        return (self.node(name)["metadata"].get("labels") or {}).get(key)

    def round(self, advance_s: float = 10.0) -> None:
        self.now += advance_s
        store = self.controller.store
        store.replace([*self.server.list_objects(NODES), *self.server.list_objects(PODS)])
        asyncio.run(self.controller.run_once())

    @property
    def requests(self) -> MaintenanceRequests:
        assert self.controller.requests is not None
        return self.controller.requests


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with ListWatchServer([NODES, PODS, PDBS, EVENTS]) as server:
        for rack in ("r1", "r2"):
            for t in range(2):
                server.add(node_dict(f"{rack}-t{t}", labels={CLIQUE: rack}))
        for t in range(2):
            pod = pod_json(
                f"train-{t}", 4, node=f"r1-t{t}", labels={"kilter.dev/gang": "train", "kilter.dev/gang-size": "2"}
            )
            pod["metadata"]["creationTimestamp"] = "2027-01-15T00:00:00Z"
            server.add(pod)
        yield Cluster(server)
        cluster_events = server.list_objects(EVENTS)
        assert all(e["involvedObject"]["kind"] == "Node" for e in cluster_events)


def test_a_request_on_the_nodes_is_drained_maintained_and_returned(cluster: Cluster) -> None:
    for t in range(2):
        cluster.edit(f"r1-t{t}", notes={MAINTENANCE: "fw-2027-01"})
    cluster.round()
    cluster.round()
    assert all(cluster.node(f"r1-t{t}")["spec"].get("unschedulable") for t in range(2))
    assert not [p for p in cluster.server.list_objects(PODS) if p["metadata"]["name"].startswith("train")]
    assert cluster.label("r1-t0", LIFECYCLE) == "maintenance"
    assert not cluster.node("r2-t0").get("spec", {}).get("unschedulable"), "only the nodes asked for"
    assert cluster.requests.state == {"fw-2027-01": "running"}

    cluster.controller = cluster.fresh()  # a restart, or another replica elected
    for t in range(2):
        cluster.edit(f"r1-t{t}", labels={MAINTENANCE_DONE: "true"})
    cluster.round()
    assert cluster.label("r1-t0", LIFECYCLE) == "qualifying"
    for t in range(2):
        cluster.edit(f"r1-t{t}", labels={QUALIFICATION: "passed", QUALIFICATION_SUITE: "nccl"})
    cluster.round()
    cluster.round()
    assert cluster.requests.state == {"fw-2027-01": "done"}
    for t in range(2):
        assert cluster.label(f"r1-t{t}", LIFECYCLE) == "ready"
        assert not cluster.node(f"r1-t{t}")["spec"].get("unschedulable")
        progress = progress_of(cluster.node(f"r1-t{t}"))
        assert progress is not None and progress.plan == "request:fw-2027-01" and progress.phase == "done"


def test_a_stopped_request_says_why_once_and_goes_on_when_the_cause_passes(cluster: Cluster) -> None:
    cluster.edit("r2-t0", notes={MAINTENANCE: "cable"})
    cluster.round()
    cluster.edit("r2-t0", labels={MAINTENANCE_DONE: "true"})
    cluster.round()
    cluster.edit("r2-t0", labels={QUALIFICATION: "failed", QUALIFICATION_SUITE: "nccl"})
    for _ in range(3):
        cluster.round()
    assert cluster.requests.state["cable"].startswith("stopped: node r2-t0 failed qualification")
    assert cluster.requests.counts()["stopped"] == 1
    assert cluster.label("r2-t0", LIFECYCLE) == "repairing", "the lifecycle controller's move on a failed burn-in"
    cluster.events.close()  # every Event written
    reasons = [e["reason"] for e in cluster.server.list_objects(EVENTS)]
    assert reasons.count("KilterMaintenanceStopped") == 1, "said once, not every round"
    cluster.requests.events = None
    obj = cluster.node("r2-t0")
    del obj["metadata"]["labels"][QUALIFICATION]  # the repair tooling, done, clears the result it acted on
    cluster.server.update(obj)
    for _ in range(32):  # repaired: healthy for lifecycle.sustained (300 s), the controller re-qualifies it
        cluster.round()
    assert cluster.label("r2-t0", LIFECYCLE) == "qualifying" and cluster.label("r2-t0", QUALIFICATION) is None
    cluster.edit("r2-t0", labels={QUALIFICATION: "passed", QUALIFICATION_SUITE: "nccl"})  # the burn-in run again
    cluster.round()
    cluster.round()
    assert cluster.requests.state["cable"] == "done" and cluster.label("r2-t0", LIFECYCLE) == "ready"
    assert not cluster.node("r2-t0")["spec"].get("unschedulable")


def test_a_request_name_no_request_may_have_is_ignored(cluster: Cluster) -> None:
    cluster.edit("r2-t1", notes={MAINTENANCE: "x" * 64})
    cluster.round()
    assert cluster.requests.state == {} and not cluster.node("r2-t1").get("spec", {}).get("unschedulable")
    assert cluster.requests.refused and "r2-t1" in cluster.requests.refused[0]


def finish(cluster: Cluster, nodes: list[str]) -> None:
    for n in nodes:
        cluster.edit(n, labels={MAINTENANCE_DONE: "true"})
    cluster.round()
    for n in nodes:
        cluster.edit(n, labels={QUALIFICATION: "passed", QUALIFICATION_SUITE: "nccl"})
    cluster.round()
    cluster.round()


def test_a_finished_request_is_never_carried_out_again_whatever_comes_after(cluster: Cluster) -> None:
    for t in range(2):
        cluster.edit(f"r1-t{t}", notes={MAINTENANCE: "fw"})
    cluster.round()
    cluster.round()
    finish(cluster, ["r1-t0", "r1-t1"])
    assert cluster.requests.state == {"fw": "done"}
    plan = plan_by_hand(cluster, ["r1-t0", "r1-t1"])  # months later, a drain by hand of the same rack
    drain = Drain(
        cluster.api, plan, device_resources=("nvidia.com/gpu",), clock=lambda: cluster.now, say=lambda _: None
    )
    for _ in range(3):
        drain.round()
    for t in range(2):
        cluster.edit(f"r1-t{t}", labels={MAINTENANCE_DONE: "true"})
    drain.round()
    for t in range(2):
        cluster.edit(f"r1-t{t}", labels={QUALIFICATION: "passed", QUALIFICATION_SUITE: "nccl"})
    outcome = None
    for _ in range(3):
        outcome = drain.round() or outcome
    assert outcome is not None and outcome.done
    progress = progress_of(cluster.node("r1-t0"))
    assert progress is not None and progress.plan == plan.id and progress.served == ("fw",)
    pod = pod_json("new-0", 4, node="r1-t0", labels={"kilter.dev/gang": "new", "kilter.dev/gang-size": "1"})
    cluster.server.add(pod)  # new work on the rack
    cluster.edit("r1-t1", labels={LIFECYCLE: "degraded"})  # and a node failing since
    for _ in range(3):
        cluster.round()
    assert cluster.requests.state == {"fw": "done"}
    assert not cluster.node("r1-t0")["spec"].get("unschedulable") and "new-0" in [
        p["metadata"]["name"] for p in cluster.server.list_objects(PODS)
    ]


def plan_by_hand(cluster: Cluster, nodes: list[str]) -> Any:
    store = ClusterStore()
    store.replace([*cluster.server.list_objects(NODES), *cluster.server.list_objects(PODS)])
    work = fleet_work(store, now_s=cluster.now, nodes=nodes)
    ask = MaintenanceAsk(work.domain_gpus, cluster.now, 7200, 1, 0)
    return plan_document(plan_maintenance(ask, work.works), ask, work, created_s=cluster.now)


def test_a_request_restarted_while_a_budget_holds_its_gang_goes_on_when_the_budget_allows(cluster: Cluster) -> None:
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "train", "namespace": "ml", "generation": 1},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"kilter.dev/gang": "train"}}},
        "status": {"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2},
    }
    cluster.server.add(budget)
    for t in range(2):
        pod = cluster.server.get_object(PODS, "ml", f"train-{t}")
        pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        cluster.server.update(pod)
        cluster.edit(f"r1-t{t}", notes={MAINTENANCE: "fw"})
    cluster.round()
    cluster.round()
    assert cluster.node("r1-t0")["spec"].get("unschedulable") and cluster.requests.state == {"fw": "running"}
    cluster.controller = cluster.fresh()  # a new leader, the rack cordoned, the gang still on it
    cluster.round()
    assert cluster.requests.state == {"fw": "running"}, "the gang on the cordoned rack is seen and planned"
    held = cluster.server.get_object(PDBS, "ml", "train")
    held["status"]["disruptionsAllowed"] = 2
    cluster.server.update(held)
    cluster.round()
    cluster.round()
    assert cluster.label("r1-t0", LIFECYCLE) == "maintenance"


def test_requests_are_carried_out_one_at_a_time(cluster: Cluster) -> None:
    cluster.edit("r1-t0", notes={MAINTENANCE: "b-second"})
    cluster.edit("r2-t0", notes={MAINTENANCE: "a-first"})
    cluster.round()
    cluster.round()
    assert cluster.node("r2-t0")["spec"].get("unschedulable") and not cluster.node("r1-t0")["spec"].get("unschedulable")
    finish(cluster, ["r2-t0"])
    cluster.round()
    assert cluster.requests.state["a-first"] == "done" and cluster.node("r1-t0")["spec"].get("unschedulable")


def test_a_request_under_way_goes_first_whatever_its_name(cluster: Cluster) -> None:
    cluster.edit("r2-t0", notes={MAINTENANCE: "m-second"})
    cluster.round()
    assert cluster.node("r2-t0")["spec"].get("unschedulable")
    cluster.edit("r1-t0", notes={MAINTENANCE: "a-urgent"})  # asked later, named earlier
    for _ in range(3):
        cluster.round()
    assert not cluster.node("r1-t0")["spec"].get("unschedulable"), "it waits for the one under way"
    finish(cluster, ["r2-t0"])
    cluster.round()
    assert cluster.requests.state["m-second"] == "done" and cluster.node("r1-t0")["spec"].get("unschedulable")


def test_a_node_retired_out_of_a_request_is_left_out_and_the_request_finishes(cluster: Cluster) -> None:
    for name in ("r2-t0", "r2-t1"):
        cluster.edit(name, notes={MAINTENANCE: "fw"})
    cluster.round()
    cluster.edit("r2-t1", labels={LIFECYCLE: "retired"})  # taken out of the fleet meanwhile
    cluster.round()
    cluster.round()
    assert cluster.label("r2-t0", LIFECYCLE) == "maintenance"
    finish(cluster, ["r2-t0"])
    cluster.round()
    assert cluster.requests.state == {"fw": "done"}
    assert cluster.label("r2-t1", LIFECYCLE) == "retired", "a retired node is never returned to service"
