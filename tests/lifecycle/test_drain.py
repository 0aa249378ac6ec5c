"""A maintenance plan run against the list/watch test server: cordon, wait, evict through the Eviction API within
PodDisruptionBudgets, hand over, re-qualify, a step at a time; stopping where the plan no longer holds, and
resuming after a restart from what it wrote on the nodes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import msgspec
import pytest

from kilter.kube.api import ApiError, ApiServer
from kilter.lifecycle.drain import Drain, DrainOutcome, DrainSettings
from kilter.lifecycle.plan_doc import PlanDoc, plan_document, read_plan
from kilter.lifecycle.progress import MAINTENANCE_DONE, progress_of
from kilter.lifecycle.replan import live_replanner
from kilter.lifecycle.works import FleetWork, fleet_work
from kilter.model.annotations import LIFECYCLE
from kilter.quota.policy import parse_time
from kilter.state.store import ClusterStore
from kilter.topology.catalog import BUILTIN, Catalog
from kilter.topology.health import DEFAULTS
from kilter.topology.lifecycle import QUALIFICATION, QUALIFICATION_SUITE
from kilter.topology.maintenance import MaintenanceAsk, Work, plan_maintenance
from tests.extenders.conftest import pod_json
from tests.listwatch import NODES, PDBS, PODS, ListWatchServer
from tests.topology.builders import CLIQUE, node_dict

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
H = 3600.0
START = "2027-01-15T00:00:00Z"  # the gangs' pods were created 8 h before NOW


def gpu_pod(
    name: str, node: str, *, gang: str | None = None, size: int = 2, notes: dict[str, str] | None = None
) -> Any:
    labels = {"kilter.dev/gang": gang, "kilter.dev/gang-size": str(size), "app": gang} if gang else {"app": name}
    pod = pod_json(name, 4, labels=labels, annotations=notes, node=node)
    pod["metadata"]["creationTimestamp"] = START
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]  # a budget spares only ready pods
    return pod


def plain_pod(name: str, node: str, *, daemon: bool = False) -> Any:
    pod = pod_json(name, 0, node=node, labels={"app": name})
    pod["metadata"]["creationTimestamp"] = START
    if daemon:
        owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "dcgm", "uid": "ds-1", "controller": True}
        pod["metadata"]["ownerReferences"] = [owner]
    return pod


def budget(app: str, allowed: int) -> dict[str, Any]:
    status = {"observedGeneration": 1, "disruptionsAllowed": allowed, "currentHealthy": 2, "desiredHealthy": 2}
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": f"{app}-pdb", "namespace": "ml", "generation": 1},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": app}}},
        "status": status,
    }


class Cluster:
    """The server with two racks of two trays, a clock the test moves, and drains the test steps."""

    def __init__(self, server: ListWatchServer) -> None:
        self.server = server
        self.now = NOW
        self.api = ApiServer("http", server.host, server.port)
        self.said: list[str] = []

    def node(self, name: str) -> dict[str, Any]:
        return self.server.get_object(NODES, None, name)

    def label(self, name: str, key: str) -> str | None:
        labels: dict[str, str] = self.node(name)["metadata"].get("labels") or {}
        return labels.get(key)

    def cordoned(self, name: str) -> bool:
        return bool(self.node(name).get("spec", {}).get("unschedulable"))

    def set_labels(self, name: str, **labels: str | None) -> None:
        obj = self.node(name)
        for key, value in labels.items():
            key = {"done": MAINTENANCE_DONE, "qualification": QUALIFICATION, "suite": QUALIFICATION_SUITE}[key]
            if value is None:
                obj["metadata"]["labels"].pop(key, None)
            else:
                obj["metadata"]["labels"][key] = value
        self.server.update(obj)

    def pods(self) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.server.list_objects(PODS))

    def plan(self, *, nodes: list[str] | None = None, k: int = 1, window_end: float | None = None) -> PlanDoc:
        store = ClusterStore()
        store.replace([*self.server.list_objects(NODES), *self.server.list_objects(PODS)])
        work = fleet_work(store, now_s=self.now, nodes=nodes)
        ask = MaintenanceAsk(work.domain_gpus, self.now, 2 * H, k, 6 * H, window_end)
        doc = plan_document(plan_maintenance(ask, work.works), ask, work, created_s=self.now)
        return read_plan(msgspec.to_builtins(doc), where="plan")  # as drain reads it from the file

    def drain(self, plan: PlanDoc, **settings: Any) -> Drain:
        return Drain(
            self.api,
            plan,
            device_resources=("nvidia.com/gpu",),
            settings=DrainSettings(poll_s=10, **settings),
            clock=lambda: self.now,
            sleep=lambda _: None,
            say=self.said.append,
        )

    def until(self, stamp: str) -> None:
        """The clock moved on to ``stamp`` (RFC 3339), if it is not there yet."""
        self.now = max(self.now, parse_time(stamp, path="test"))

    def rounds(self, drain: Drain, n: int = 1, *, advance_s: float = 10.0) -> DrainOutcome | None:
        outcome = None
        for _ in range(n):
            self.now += advance_s
            outcome = drain.round()
            if outcome is not None:
                return outcome
        return outcome


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with ListWatchServer([NODES, PODS, PDBS]) as server:
        for rack in ("r1", "r2"):
            for t in range(2):
                server.add(node_dict(f"{rack}-t{t}", labels={CLIQUE: rack}))
        server.add(gpu_pod("train-0", "r1-t0", gang="train"))
        server.add(gpu_pod("train-1", "r1-t1", gang="train"))
        server.add(plain_pod("logger", "r1-t0"))
        server.add(plain_pod("dcgm-r1-t0", "r1-t0", daemon=True))
        server.add(budget("train", 2))
        yield Cluster(server)


def finish_step(cluster: Cluster, drain: Drain, nodes: list[str]) -> None:
    """The maintenance and burn-in tooling's part, with the drain's rounds between."""
    assert cluster.rounds(drain, 3) is None
    for n in nodes:
        assert cluster.label(n, LIFECYCLE) == "maintenance"
        cluster.set_labels(n, done="true")
    assert cluster.rounds(drain) is None
    for n in nodes:
        assert cluster.label(n, LIFECYCLE) == "qualifying" and cluster.label(n, MAINTENANCE_DONE) is None
        cluster.set_labels(n, qualification="passed", suite="nccl-burn")


def test_a_domain_is_cordoned_evicted_within_its_budget_maintained_requalified_and_returned(cluster: Cluster) -> None:
    cluster.set_labels("r1-t0", qualification="passed", suite="old-suite")
    budgets = cluster.server.list_objects(PDBS)[0]
    budgets["status"]["disruptionsAllowed"] = 0
    cluster.server.update(budgets)
    plan = cluster.plan(nodes=["r1-t0", "r1-t1"])
    assert [e.job for e in plan.steps[0].domains[0].evicts] == ["ml/gang/train"]
    drain = cluster.drain(plan)

    assert cluster.rounds(drain) is None
    assert cluster.cordoned("r1-t0") and cluster.cordoned("r1-t1")
    assert not cluster.cordoned("r2-t0")
    assert "train-0" in cluster.pods() and "logger" not in cluster.pods(), "the budget holds the gang, not others"
    assert any("refused" in line and "disruption budget" in line for line in cluster.said)

    budgets = cluster.server.list_objects(PDBS)[0]
    budgets["status"]["disruptionsAllowed"] = 2  # the disruption controller's count, once the gang may go
    cluster.server.update(budgets)
    assert cluster.rounds(drain) is None
    assert cluster.pods() == ["dcgm-r1-t0"], "DaemonSet pods stay, as kubectl drain leaves them"
    assert cluster.rounds(drain) is None
    assert cluster.label("r1-t0", LIFECYCLE) == "maintenance"
    assert cluster.label("r1-t0", QUALIFICATION) == "passed", "the old result stands until re-qualification"

    for n in ("r1-t0", "r1-t1"):
        cluster.set_labels(n, done="true")
    assert cluster.rounds(drain) is None
    assert cluster.label("r1-t0", LIFECYCLE) == "qualifying"
    assert cluster.label("r1-t0", QUALIFICATION) is None and cluster.label("r1-t0", QUALIFICATION_SUITE) is None
    assert cluster.rounds(drain, 2) is None, "no result yet: it waits"
    for n in ("r1-t0", "r1-t1"):
        cluster.set_labels(n, qualification="passed", suite="nccl-burn")
    outcome = cluster.rounds(drain, 2)
    assert outcome is not None and outcome.done
    for n in ("r1-t0", "r1-t1"):
        assert cluster.label(n, LIFECYCLE) == "ready" and not cluster.cordoned(n)
        progress = progress_of(cluster.node(n))
        assert progress is not None and progress.phase == "done" and progress.plan == plan.id


def test_a_node_a_person_cordoned_stays_cordoned_after_its_maintenance(cluster: Cluster) -> None:
    node = cluster.node("r1-t1")
    node["spec"]["unschedulable"] = True
    cluster.server.update(node)
    plan = cluster.plan(nodes=["r1-t0", "r1-t1"])
    drain = cluster.drain(plan)
    finish_step(cluster, drain, ["r1-t0", "r1-t1"])
    outcome = cluster.rounds(drain, 2)
    assert outcome is not None and outcome.done
    assert not cluster.cordoned("r1-t0") and cluster.cordoned("r1-t1")
    assert cluster.label("r1-t1", LIFECYCLE) == "ready"


def test_a_drain_restarted_at_any_point_resumes_from_the_nodes(cluster: Cluster) -> None:
    plan = cluster.plan(nodes=["r1-t0", "r1-t1"])
    assert cluster.rounds(cluster.drain(plan)) is None  # cordoned and evicted, then the process dies
    assert cluster.cordoned("r1-t0") and "train-0" not in cluster.pods()
    assert cluster.label("r1-t0", LIFECYCLE) is None

    again = cluster.drain(plan)  # a new process: nothing in memory
    assert cluster.rounds(again) is None
    assert cluster.label("r1-t0", LIFECYCLE) == "maintenance", "it picks up where the nodes say"
    assert not any(line.startswith("cordon") for line in cluster.said[-3:])
    progress = progress_of(cluster.node("r1-t0"))
    assert progress is not None and progress.cordoned, "kilter's cordon is remembered across the restart"
    for n in ("r1-t0", "r1-t1"):
        cluster.set_labels(n, done="true")
    assert cluster.rounds(cluster.drain(plan)) is None  # and dies again
    assert cluster.label("r1-t0", LIFECYCLE) == "qualifying"
    for n in ("r1-t0", "r1-t1"):
        cluster.set_labels(n, qualification="passed", suite="nccl-burn")
    outcome = cluster.rounds(cluster.drain(plan), 2)
    assert outcome is not None and outcome.done and not cluster.cordoned("r1-t0")


def test_steps_go_in_order_behind_a_health_gate(cluster: Cluster) -> None:
    cluster.server.add(gpu_pod("solo", "r2-t0", gang="solo", size=1))
    plan = cluster.plan(k=1)
    first, second = ([n for d in s.domains for n in d.nodes] for s in plan.steps)
    drain = cluster.drain(plan)
    finish_step(cluster, drain, first)
    assert cluster.rounds(drain) is None
    assert all(cluster.label(n, LIFECYCLE) == "ready" for n in first)
    assert not any(cluster.cordoned(n) for n in second), "the next step waits for this one to be back"
    assert cluster.rounds(drain) is None
    assert not any(cluster.cordoned(n) for n in second), "and for its planned beginning"
    assert any(line.startswith("wait until") and "to begin step 1" in line for line in cluster.said)

    node = cluster.node(first[0])
    node["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    cluster.server.update(node)
    cluster.until(plan.steps[1].begin)
    outcome = cluster.rounds(drain)
    assert outcome is not None and not outcome.done and outcome.step == 0
    assert "unhealthy" in outcome.reason and first[0] in outcome.reason
    assert not any(cluster.cordoned(n) for n in second), "the gate holds the next step"

    node = cluster.node(first[0])
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    cluster.server.update(node)
    assert cluster.rounds(drain) is None
    assert all(cluster.cordoned(n) for n in second), "step 1 began once step 0 was back and healthy"


def test_a_failed_qualification_stops_the_drain_before_the_next_step(cluster: Cluster) -> None:
    plan = cluster.plan(k=1)
    first, second = ([n for d in s.domains for n in d.nodes] for s in plan.steps)
    drain = cluster.drain(plan)
    assert cluster.rounds(drain, 3) is None
    for n in first:
        cluster.set_labels(n, done="true")
    assert cluster.rounds(drain) is None
    cluster.set_labels(first[0], qualification="failed", suite="nccl-burn")
    outcome = cluster.rounds(drain)
    assert outcome is not None and not outcome.done and "failed qualification" in outcome.reason
    assert not any(cluster.cordoned(n) for n in second)
    assert cluster.label(first[0], LIFECYCLE) == "qualifying", "stopped is not undone"


def test_a_job_the_plan_did_not_list_stops_the_domain_before_any_eviction(cluster: Cluster) -> None:
    plan = cluster.plan(nodes=["r1-t0", "r1-t1"])
    cluster.server.add(gpu_pod("newcomer", "r1-t1", gang="newcomer", size=1))
    outcome = cluster.rounds(cluster.drain(plan))
    assert outcome is not None and not outcome.done
    assert "ml/gang/newcomer" in outcome.reason and "did not list" in outcome.reason
    assert {"train-0", "train-1", "newcomer", "logger"} <= set(cluster.pods()), "nothing was evicted"


def test_it_waits_for_a_job_about_to_end_and_stops_if_the_job_outlives_its_estimate(cluster: Cluster) -> None:
    ending = gpu_pod("ending", "r2-t0", gang="ending", size=1, notes={"kilter.dev/expected-runtime": "8h30m"})
    busy = gpu_pod("busy", "r2-t1", gang="busy", size=1, notes={"kilter.dev/expected-runtime": "8h20m"})
    cluster.server.add(busy)  # the rest of r2 busy, so that waiting idles little
    cluster.server.add(ending)
    plan = cluster.plan(nodes=["r2-t0", "r2-t1"])
    (domain,) = plan.steps[0].domains
    assert domain.waits_for == ["ml/gang/busy", "ml/gang/ending"]
    assert domain.evicts == []
    drain = cluster.drain(plan)
    assert cluster.rounds(drain) is None
    assert cluster.cordoned("r2-t0") and "ending" in cluster.pods(), "cordoned, waiting"
    assert any("wait for" in line for line in cluster.said)
    cluster.server.delete("", "pods", "ml", "busy")
    outcome = cluster.rounds(drain, 1, advance_s=31 * 60)  # past the drain moment, and "ending" still runs
    assert outcome is not None and not outcome.done
    assert "ml/gang/ending" in outcome.reason and "ending" in cluster.pods()


def test_an_eviction_refused_past_the_timeout_stops_the_drain(cluster: Cluster) -> None:
    budgets = cluster.server.list_objects(PDBS)[0]
    budgets["status"]["disruptionsAllowed"] = 0
    cluster.server.update(budgets)
    drain = cluster.drain(cluster.plan(nodes=["r1-t0", "r1-t1"]), eviction_timeout_s=300)
    assert cluster.rounds(drain, 10, advance_s=20) is None
    outcome = cluster.rounds(drain, 20, advance_s=20)
    assert outcome is not None and not outcome.done and "could not be evicted" in outcome.reason
    assert "train-0" in cluster.pods()


def test_a_step_not_begun_when_the_window_ends_is_left_for_the_next_window(cluster: Cluster) -> None:
    plan = cluster.plan(window_end=NOW + 60)
    outcome = cluster.rounds(cluster.drain(plan), advance_s=120)
    assert outcome is not None and not outcome.done and "window ended" in outcome.reason
    assert not any(cluster.cordoned(n) for n in ("r1-t0", "r1-t1", "r2-t0", "r2-t1"))


def test_a_dry_run_says_what_it_would_do_and_writes_nothing(cluster: Cluster) -> None:
    before = {n["metadata"]["name"]: n["metadata"]["resourceVersion"] for n in cluster.server.list_objects(NODES)}
    pods = cluster.pods()
    outcome = cluster.rounds(cluster.drain(cluster.plan(nodes=["r1-t0", "r1-t1"]), dry_run=True))
    assert outcome is not None and not outcome.done and outcome.reason.startswith("dry run")
    assert "cordon r1-t0 (step 0)" in outcome.actions and "evict pod ml/train-0" in outcome.actions
    assert {
        n["metadata"]["name"]: n["metadata"]["resourceVersion"] for n in cluster.server.list_objects(NODES)
    } == before
    assert cluster.pods() == pods


class Meddling(ApiServer):
    """The API server, with a person's edit of r1-t0 landing just before kilter's first patch of it."""

    server: ClassVar[ListWatchServer]

    def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        if method == "PATCH" and "/nodes/r1-t0" in path:
            node = self.server.get_object(NODES, None, "r1-t0")
            if progress_of(node) is None and "team" not in node["metadata"]["labels"]:
                node["metadata"]["labels"]["team"] = "infra"
                self.server.update(node)
        return super().call(method, path, body, content_type=content_type)


def test_a_node_changed_between_read_and_write_is_read_again_never_overwritten(cluster: Cluster) -> None:
    plan = cluster.plan(nodes=["r1-t0", "r1-t1"])
    Meddling.server = cluster.server
    cluster.api = Meddling("http", cluster.server.host, cluster.server.port)
    drain = cluster.drain(plan)
    assert cluster.rounds(drain) is None
    assert any("changed meanwhile" in line for line in cluster.said)
    assert not cluster.cordoned("r1-t0") and cluster.cordoned("r1-t1")
    assert cluster.rounds(drain) is None
    assert cluster.label("r1-t0", "team") == "infra" and cluster.cordoned("r1-t0")


def test_a_plan_naming_a_node_that_is_gone_stops_with_its_name(cluster: Cluster) -> None:
    plan = cluster.plan(nodes=["r1-t0", "r1-t1"])
    cluster.server.delete("", "nodes", None, "r1-t1")
    outcome = cluster.rounds(cluster.drain(plan))
    assert outcome is not None and not outcome.done and "r1-t1" in outcome.reason


def test_read_plan_refuses_a_hand_edited_plan_naming_the_field() -> None:
    from kilter.model.errors import InputError

    with pytest.raises(InputError, match="kind"):
        read_plan({"apiVersion": "v1"}, where="p.json")
    good = msgspec.to_builtins(cluster_free_plan())
    good["steps"][0]["domains"][0]["nodes"] = ["n1", "n1"]
    with pytest.raises(InputError, match=r"steps\[0\].domains\[0\].nodes"):
        read_plan(good, where="p.json")
    good["maxUnavailableDomains"] = "two"
    with pytest.raises(InputError, match="maxUnavailableDomains"):
        read_plan(good, where="p.json")


def cluster_free_plan() -> PlanDoc:
    from kilter.lifecycle.works import FleetWork
    from kilter.topology.maintenance import Work

    work = FleetWork([Work("ml/gang/a", 4, {"d1": 4}, NOW - H)], {"d1": ["n1"], "d2": ["n2"]}, {"d1": 4, "d2": 4})
    ask = MaintenanceAsk(work.domain_gpus, NOW, H)
    return plan_document(plan_maintenance(ask, work.works), ask, work, created_s=NOW)


@pytest.mark.parametrize("replan", [False, True])
def test_a_job_come_since_on_a_later_domain_stops_the_plan_as_written_but_not_a_replanning_drain(
    cluster: Cluster, replan: bool
) -> None:
    plan = cluster.plan(k=1)
    first, second = ([n for d in s.domains for n in d.nodes] for s in plan.steps)
    cluster.server.add(gpu_pod("newcomer", second[0], gang="newcomer", size=1))  # lands after the plan was made
    drain = cluster.drain(plan)
    if replan:
        drain.replan = live_replanner(cluster.api, plan, Catalog(BUILTIN), DEFAULTS)
    finish_step(cluster, drain, first)
    cluster.until(plan.steps[1].begin)  # re-planning begins the next step at once; as written, when planned
    outcome = cluster.rounds(drain, 3)
    if not replan:
        assert outcome is not None and not outcome.done and "ml/gang/newcomer" in outcome.reason
        assert "newcomer" in cluster.pods()
        return
    assert outcome is None and "newcomer" not in cluster.pods(), "planned again at the step: evicted as planned"
    assert all(cluster.label(n, LIFECYCLE) == "maintenance" for n in second)
    again = cluster.drain(plan)  # a restart mid-step re-plans the domain in flight
    again.replan = live_replanner(cluster.api, plan, Catalog(BUILTIN), DEFAULTS)
    finish_step(cluster, again, second)
    outcome = cluster.rounds(again, 2)
    assert outcome is not None and outcome.done
    steps = {progress.step for n in first + second if (progress := progress_of(cluster.node(n)))}
    assert steps == {0, 1}


def test_the_drain_takes_first_the_domain_the_plan_says_loses_least(cluster: Cluster) -> None:
    for name in ("train-0", "train-1", "logger", "dcgm-r1-t0"):
        cluster.server.delete("", "pods", "ml", name)
    for t in range(2):  # r1 is full of a gang that ends in 90 minutes; r2 runs a job with no known end
        notes = {"kilter.dev/expected-runtime": "9h30m"}
        cluster.server.add(gpu_pod(f"ending-{t}", f"r1-t{t}", gang="ending", notes=notes))
    cluster.server.add(gpu_pod("long", "r2-t0", gang="long", size=1))
    plan = cluster.plan(k=1)
    assert [s.domains[0].domain for s in plan.steps] == ["r2", "r1"], "name order would kill 8 h of 8 GPUs"
    assert plan.lost_gpu_hours == pytest.approx(4 * 8, abs=0.1) and plan.naive.lost_gpu_hours == pytest.approx(
        8 * 8 + 4 * 10, abs=0.1
    )
    drain = cluster.drain(plan)
    finish_step(cluster, drain, ["r2-t0", "r2-t1"])
    assert cluster.rounds(drain, 2) is None
    assert not any(cluster.cordoned(n) for n in ("r1-t0", "r1-t1")), "r1 waits its turn, planned at 2 h"
    cluster.server.delete("", "pods", "ml", "ending-0")  # the gang ends as expected, at 1.5 h
    cluster.server.delete("", "pods", "ml", "ending-1")
    cluster.until(plan.steps[1].begin)
    assert cluster.rounds(drain, 2) is None
    assert all(cluster.label(n, LIFECYCLE) == "maintenance" for n in ("r1-t0", "r1-t1"))
    assert not any("evict pod ml/ending" in line for line in cluster.said), "nothing of the gang was evicted"


def test_progress_another_plan_left_is_finished_once_under_the_new_plan(cluster: Cluster) -> None:
    abandoned = cluster.plan(nodes=["r1-t0", "r1-t1"])
    assert cluster.rounds(cluster.drain(abandoned)) is None  # cordoned and evicted, then given up
    cluster.now += H
    plan = cluster.plan(k=1)
    assert plan.id != abandoned.id
    before = len(cluster.said)
    drain = cluster.drain(plan)
    finish_step(cluster, drain, ["r1-t0", "r1-t1"])
    assert cluster.rounds(drain) is None
    for n in ("r1-t0", "r1-t1"):
        progress = progress_of(cluster.node(n))
        assert progress is not None and progress.plan == plan.id and progress.phase == "done"
    cluster.until(plan.steps[-1].begin)
    assert cluster.rounds(drain) is None
    cordons = [line for line in cluster.said[before:] if line.startswith("cordon r1")]
    assert cordons == [], "adopted, r1 is not cordoned and maintained a second time"
    assert cluster.cordoned("r2-t0")


def test_a_min_runtime_guard_holds_the_eviction_even_when_nothing_is_waited_for(cluster: Cluster) -> None:
    work = FleetWork(
        [Work("ml/gang/train", 8, {"r1": 8}, NOW - 8 * H, guarded_until_s=NOW + 3 * H, pods=2)],
        {"r1": ["r1-t0", "r1-t1"]},
        {"r1": 8},
    )
    ask = MaintenanceAsk(work.domain_gpus, NOW, 2 * H, 1, 6 * H)
    doc = plan_document(plan_maintenance(ask, work.works), ask, work, created_s=NOW)
    plan = read_plan(msgspec.to_builtins(doc), where="plan")
    (domain,) = plan.steps[0].domains
    assert domain.waits_for == [] and [e.not_before for e in domain.evicts] == ["2027-01-15T11:00:00Z"]
    drain = cluster.drain(plan)
    assert cluster.rounds(drain) is None
    assert cluster.cordoned("r1-t0") and "train-0" in cluster.pods(), "not evicted before its guard"
    assert any("min-runtime" in line for line in cluster.said)
    cluster.until("2027-01-15T11:00:00Z")
    assert cluster.rounds(drain) is None
    assert "train-0" not in cluster.pods()


def test_nothing_is_evicted_until_every_node_of_the_domain_is_cordoned(cluster: Cluster) -> None:
    plan = cluster.plan(nodes=["r1-t0", "r1-t1"])
    Meddling.server = cluster.server
    cluster.api = Meddling("http", cluster.server.host, cluster.server.port)  # r1-t0's cordon meets a 409
    drain = cluster.drain(plan)
    assert cluster.rounds(drain) is None
    assert not cluster.cordoned("r1-t0") and cluster.cordoned("r1-t1")
    assert {"train-0", "train-1"} <= set(cluster.pods()), "half a gang is never evicted"
    assert cluster.rounds(drain) is None
    assert cluster.cordoned("r1-t0") and "train-1" not in cluster.pods()


def test_a_refusal_that_retrying_cannot_change_stops_at_once(cluster: Cluster) -> None:
    broken = cluster.server.list_objects(PDBS)[0]
    broken["status"]["disruptionsAllowed"] = -1  # the apiserver's 403: a budget's count gone negative
    cluster.server.update(broken)
    outcome = cluster.rounds(cluster.drain(cluster.plan(nodes=["r1-t0", "r1-t1"])))
    assert outcome is not None and not outcome.done and "cannot be evicted" in outcome.reason
    assert outcome.node in ("r1-t0", "r1-t1")


def test_a_terminating_pod_gets_its_grace_period_and_the_timeout_after_it(cluster: Cluster) -> None:
    pod = cluster.server.get_object(PODS, "ml", "train-0")
    pod["metadata"]["deletionTimestamp"] = "2027-01-15T08:30:00Z"  # 30 minutes to write its checkpoint
    cluster.server.update(pod)
    drain = cluster.drain(cluster.plan(nodes=["r1-t0", "r1-t1"]), eviction_timeout_s=300)
    assert cluster.rounds(drain, 60, advance_s=30) is None, "35 minutes: within its grace and the timeout"
    outcome = cluster.rounds(drain, 20, advance_s=30)
    assert outcome is not None and "still terminating" in outcome.reason and outcome.node == "r1-t0"
    assert cluster.rounds(drain) is not None
    assert len([line for line in cluster.said if line.startswith("stopped")]) == 1, "a stop that stands is said once"


def test_a_node_back_before_the_rest_of_its_domain_is_never_drained_again(cluster: Cluster) -> None:
    drain = cluster.drain(cluster.plan(nodes=["r1-t0", "r1-t1"]))
    assert cluster.rounds(drain, 2) is None
    cluster.set_labels("r1-t0", done="true")  # one tray's work is quick
    assert cluster.rounds(drain) is None
    cluster.set_labels("r1-t0", qualification="passed", suite="nccl-burn")
    assert cluster.rounds(drain) is None
    assert cluster.label("r1-t0", LIFECYCLE) == "ready" and not cluster.cordoned("r1-t0")
    cluster.server.add(gpu_pod("back-0", "r1-t0", gang="back", size=1))  # work lands on it again
    assert cluster.rounds(drain, 3) is None
    assert not cluster.cordoned("r1-t0") and "back-0" in cluster.pods()
    finish_step(cluster, drain, ["r1-t1"])
    outcome = cluster.rounds(drain, 2)
    assert outcome is not None and outcome.done and "back-0" in cluster.pods()


def test_only_the_suite_asked_for_passes_a_node_even_one_made_ready_by_another(cluster: Cluster) -> None:
    drain = cluster.drain(cluster.plan(nodes=["r1-t0", "r1-t1"]), suite="nccl-burn")
    assert cluster.rounds(drain, 2) is None
    for n in ("r1-t0", "r1-t1"):
        cluster.set_labels(n, done="true")
    assert cluster.rounds(drain) is None
    for n in ("r1-t0", "r1-t1"):  # a quick smoke test passed, and a lifecycle controller took it as enough
        cluster.set_labels(n, qualification="passed", suite="smoke")
        node = cluster.node(n)
        node["metadata"]["labels"][LIFECYCLE] = "ready"
        cluster.server.update(node)
    assert cluster.rounds(drain, 2) is None
    assert cluster.cordoned("r1-t0"), "not returned: nccl-burn has not passed"
    for n in ("r1-t0", "r1-t1"):
        cluster.set_labels(n, suite="nccl-burn")
    outcome = cluster.rounds(drain, 2)
    assert outcome is not None and outcome.done


class Flaky(ApiServer):
    """The API server failing its first answer to each kind of call it is told to (503, as while it restarts)."""

    failing: ClassVar[set[str]] = set()

    def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        kind = f"{method} {path.split('?')[0].rsplit('/', 1)[0]}"
        if kind in Flaky.failing:
            Flaky.failing.discard(kind)
            raise ApiError(503, "the server is shutting down")
        return super().call(method, path, body, content_type=content_type)


@pytest.mark.parametrize(
    "failing", ["GET /api/v1/nodes", "PATCH /api/v1/nodes", "POST /api/v1/namespaces/ml/pods/train-0"]
)
def test_an_api_server_failing_for_a_moment_is_tried_again(cluster: Cluster, failing: str) -> None:
    Flaky.failing = {failing}
    cluster.api = Flaky("http", cluster.server.host, cluster.server.port)
    drain = cluster.drain(cluster.plan(nodes=["r1-t0", "r1-t1"]))
    assert cluster.rounds(drain) is None
    assert not Flaky.failing, "the failure happened"
    assert cluster.rounds(drain, 2) is None
    assert cluster.label("r1-t0", LIFECYCLE) == "maintenance" and cluster.label("r1-t1", LIFECYCLE) == "maintenance"


def test_a_crash_between_two_domains_of_a_step_does_not_split_the_step(cluster: Cluster) -> None:
    cluster.server.add(gpu_pod("solo", "r2-t0", gang="solo", size=1))
    plan = cluster.plan(k=2)
    assert len(plan.steps) == 1 and len(plan.steps[0].domains) == 2
    drain = cluster.drain(plan)
    first = plan.steps[0].domains[0]
    for name in first.nodes:  # the process dies having cordoned the first domain only
        drain._begin(0, name, cluster.node(name))
    again = cluster.drain(plan)
    assert cluster.rounds(again) is None
    assert all(cluster.cordoned(n) for d in plan.steps[0].domains for n in d.nodes), "both domains of the step"
