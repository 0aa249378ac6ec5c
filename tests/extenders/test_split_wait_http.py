"""kube-scheduler's extender over loopback: a preferred gang waiting for fewer domains fails every node with why.

The scenario (``tests.gangs.wait_scenario``): the gang fits one NVL72 rack
when idle, only two now; declared 10 h, so it may wait 2 h from its creation
(a Workload's: from when Kueue reserved its quota).
Created 10 min 30 s ago, 1 h 49 min 30 s are left: "1h50m" rounded up.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from kilter.cli.serve import build_app
from tests.extenders.conftest import Served, _Server, names_args, serve_config, serve_snapshot
from tests.gangs.wait_scenario import (
    BUDGET_S,
    FREE,
    NODES,
    finished_workload,
    fleet_objects,
    gang_pods,
    queue_objects,
    stamp,
)
from tests.live_mode import live_cluster, wait_ready

RUNTIME = {"kilter.dev/expected-runtime": "10h"}
REASON = "waiting up to 1h50m for room in 1 domain; 2 available now"


def created(ago_s: float) -> float:
    return math.floor(time.time()) - ago_s


def filter_pod(served: Served, pods: list[dict[str, Any]], i: int = 0) -> dict[str, Any]:
    status, result = served.post("filter", names_args(pods[i], NODES))
    assert status == 200
    assert isinstance(result, dict)
    return result


def metric(served: Served, name: str) -> float:
    status, body, _ = served.call("GET", "/metrics")
    assert status == 200
    line = next(line for line in body.decode().splitlines() if line.startswith(f"{name} "))
    return float(line.split()[1])


def test_every_node_fails_with_the_wait_and_explain_and_metrics_show_it(tmp_path: Path) -> None:
    pods = gang_pods("train", created(630), annotations=RUNTIME)
    with serve_snapshot(tmp_path, [*fleet_objects(), *pods]) as served:
        result = filter_pod(served, pods)
        assert result["NodeNames"] == [] and result["Error"] == ""
        assert result["FailedNodes"] == {node: REASON for node in NODES}  # resolvable: time will change the answer
        assert result["FailedAndUnresolvableNodes"] == {}
        assert filter_pod(served, pods, 3)["FailedNodes"]["r1-t00"] == REASON  # the gang's other pods alike
        assert served.store.reservation("ml/gang/train") == ()  # it holds no nodes meanwhile
        status, data, _ = served.call("GET", "/debug/explain?namespace=ml&pod=train-0")
        assert status == 200
        decision = json.loads(data)["decisions"][-1]
        assert REASON in decision["summary"]
        assert {(n["verdict"], n["reason"]) for n in decision["nodes"]} == {("failed", REASON)}
        assert metric(served, "kilter_gangs_waiting_for_domains") == 1.0
        # Preemption would make room it chose to wait for rather than take: no node is kept.
        meta = {"r1-t05": {"Pods": [{"UID": "uid-busy-r1-t05"}], "NumPDBViolations": 0}}
        status, answer = served.post(
            "preempt", {"Pod": pods[0], "NodeNameToVictims": None, "NodeNameToMetaVictims": meta}
        )
        assert status == 200 and answer == {"NodeNameToMetaVictims": {}}


def kueue_gang(name: str, created_s: float, *, reserved_s: float | None) -> list[dict[str, Any]]:
    """A Kueue Workload of four 4-GPU pods created at ``created_s``, its quota reserved at ``reserved_s`` (None:
    ``QuotaReserved`` is False), and its Job's pods, created with the Workload and declaring 10 h."""
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": f"uid-job-{name}", "controller": True}
    pods = gang_pods(name, created_s, annotations=RUNTIME)
    for pod in pods:
        del pod["metadata"]["labels"]["kilter.dev/gang"], pod["metadata"]["labels"]["kilter.dev/gang-size"]
        pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"] = name
        pod["metadata"]["ownerReferences"] = [job]
    reserved = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": ""}
    reserved["lastTransitionTime"] = stamp(created_s)
    if reserved_s is not None:
        reserved.update(status="True", reason="QuotaReserved", lastTransitionTime=stamp(reserved_s))
    template = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "4"}}}]}}
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-wl-{name}",
            "creationTimestamp": stamp(created_s),
            "ownerReferences": [job],
        },
        "spec": {"queueName": "team", "podSets": [{"name": "main", "count": 4, "template": template}]},
        "status": {"conditions": [reserved]},
    }
    return [workload, *pods]


def test_a_workloads_clock_starts_when_kueue_reserved_its_quota_not_when_it_was_created(tmp_path: Path) -> None:
    # Created 5 h ago, long past its 2 h budget counted from creation; its quota was reserved 10 min 30 s ago.
    held = kueue_gang("held", created(5 * 3600), reserved_s=created(630))
    with serve_snapshot(tmp_path, [*fleet_objects(), *held]) as served:
        result = filter_pod(served, held[1:])
        assert result["FailedNodes"] == {node: REASON for node in NODES}  # 1h50m of 2 h from the reservation
        assert (
            p := served.app.extender.gangs.plan_of("ml/workload/held")
        ) is not None and p.waiting  # the Workload's gang, holding no nodes
        assert served.store.reservation("ml/workload/held") == ()
    # The same Workload without a reservation (its QuotaReserved False): the clock runs from its creation.
    unreserved = kueue_gang("held", created(5 * 3600), reserved_s=None)
    with serve_snapshot(tmp_path / "unreserved", [*fleet_objects(), *unreserved]) as served:
        assert sorted(filter_pod(served, unreserved[1:])["NodeNames"]) == FREE


def test_once_its_budget_is_spent_the_gang_is_placed_split(tmp_path: Path) -> None:
    pods = gang_pods("late", created(BUDGET_S + 5), annotations=RUNTIME)
    with serve_snapshot(tmp_path, [*fleet_objects(), *pods]) as served:
        result = filter_pod(served, pods)
        assert sorted(result["NodeNames"]) == FREE  # its plan's four trays, two in each rack
        assert metric(served, "kilter_gangs_waiting_for_domains") == 0.0


def test_factor_zero_on_the_cluster_queue_places_at_once_and_the_job_may_override_it(tmp_path: Path) -> None:
    queue = {"kueue.x-k8s.io/queue-name": "team"}
    off = gang_pods("off", created(630), annotations=RUNTIME, labels=queue)
    mine = gang_pods("mine", created(630), annotations={**RUNTIME, "kilter.dev/split-wait": "1"}, labels=queue)
    objects = [*fleet_objects(), *queue_objects(cq_notes={"kilter.dev/split-wait": "0"}), *off, *mine]
    with serve_snapshot(tmp_path, objects) as served:
        assert filter_pod(served, mine)["FailedNodes"]["r2-t01"] == REASON
        assert sorted(filter_pod(served, off)["NodeNames"]) == FREE


def test_a_required_gang_and_a_gang_without_an_estimate_never_wait(tmp_path: Path) -> None:
    required = {**RUNTIME, "kueue.x-k8s.io/podset-required-topology": "fabric.topograph.run/tier-1"}
    strict = gang_pods("strict", created(630), annotations=required)
    unknown = gang_pods("unknown", created(630))
    with serve_snapshot(tmp_path, [*fleet_objects(), *strict]) as served:
        assert sorted(filter_pod(served, strict)["NodeNames"]) == FREE
    with serve_snapshot(tmp_path / "unknown", [*fleet_objects(), *unknown]) as served:
        assert sorted(filter_pod(served, unknown)["NodeNames"]) == FREE


def test_the_runtime_learned_from_finished_workloads_makes_the_gang_wait(tmp_path: Path) -> None:
    history = [finished_workload(f"done-{h}", h) for h in (8, 10, 12)]
    pods = gang_pods("train", created(630), labels={"kueue.x-k8s.io/queue-name": "team"})
    with serve_snapshot(tmp_path, [*fleet_objects(), *queue_objects(), *history, *pods]) as served:
        assert filter_pod(served, pods)["FailedNodes"]["r1-t00"] == REASON


def test_a_live_feed_learns_from_the_workloads_listed_and_from_each_that_finishes_after(tmp_path: Path) -> None:
    queue = {"kueue.x-k8s.io/queue-name": "team"}
    first, second = gang_pods("a", created(630), labels=queue), gang_pods("b", created(630), labels=queue)
    running = finished_workload("later", 15)
    running["status"]["conditions"] = running["status"]["conditions"][:2]  # admitted, not finished yet
    objects = [*fleet_objects(), *queue_objects(), finished_workload("done", 5), running, *first, *second]
    with live_cluster(tmp_path, objects) as cluster:
        app, store = build_app(serve_config(None, kubeconfig=cluster.kubeconfig))
        with _Server(app, None) as port:
            wait_ready(store)
            served = Served(app, store, None, port, cluster=cluster)
            # Listed at start: one run of 5 h, so a 1 h budget, 10 min 30 s of it gone.
            assert filter_pod(served, first)["FailedNodes"]["r1-t00"].startswith("waiting up to 49m")
            # The other Workload finishes after 15 h: the median of 5 h and 15 h is 10 h, a 2 h budget.
            served.replace([o for o in objects if o is not running] + [finished_workload("later", 15)])
            assert filter_pod(served, second)["FailedNodes"]["r1-t00"] == REASON


def test_a_bad_annotation_on_the_job_is_the_filter_error_and_on_a_queue_a_readyz_line(tmp_path: Path) -> None:
    bad_job = gang_pods("bad", created(630), annotations={**RUNTIME, "kilter.dev/split-wait": "always"})
    queue = {"kueue.x-k8s.io/queue-name": "team"}
    good = gang_pods("train", created(630), annotations=RUNTIME, labels=queue)
    queues = queue_objects(cq_notes={"kilter.dev/split-wait-max": "soon"})
    with serve_snapshot(tmp_path, [*fleet_objects(), *queues, *bad_job, *good]) as served:
        result = filter_pod(served, bad_job)
        assert result["NodeNames"] is None and "kilter.dev/split-wait: 'always' is not a number" in result["Error"]
        assert filter_pod(served, good)["FailedNodes"]["r1-t00"] == REASON  # the queue's bad cap is skipped
        status, body, _ = served.call("GET", "/readyz")
        assert status == 200
        lines = body.decode().splitlines()
        assert lines[0] == "ok"
        assert any(line.startswith("ClusterQueue gpu: 'soon' is not a duration") for line in lines[1:]), lines
