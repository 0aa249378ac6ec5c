"""The expected-starts scenario: two GB200 NVL72 racks, both nearly full, and gangs queued for a whole rack.

``r1`` and ``r2`` (18 trays of 4 GPUs each, under one leaf). Trays 2-17 of
``r1`` run JobSet ``ml/short`` (16 pods, ``kilter.dev/expected-runtime: 2h``,
admitted by Kueue one hour before ``NOW``: it is expected to end at
``NOW + 1h``); trays 2-17 of ``r2`` run the ``kilter.dev/gang`` gang
``ml/long`` (``5h``, its pods started one hour before ``NOW``: ends at
``NOW + 4h``). Trays 0-1 of each rack are free (8 GPUs a rack).

Queued (Workloads as Kueue writes them, pending pods as kube-apiserver
returns them): ``rack-a`` (18 pods of 4 GPUs, a whole rack, 3 h, created
``NOW - 30m``) and ``rack-b`` (the same, 1 h, created ``NOW - 20m``), then
``small`` (a bare gang of 2 pods of 4 GPUs, 30 m, created ``NOW - 10m``).
Expected: ``rack-a`` at ``NOW + 1h`` on ``r1``; ``rack-b`` at ``NOW + 4h``
(``r2`` frees then, ``r1`` is ``rack-a``'s until then too); ``small`` now,
beside ``rack-a``'s reservation, which it ends before.
"""

from __future__ import annotations

from typing import Any

from tests.extenders.conftest import pod_json
from tests.gangs.wait_scenario import stamp
from tests.topology.builders import CLIQUE, TIER1, node_dict

NOW = 1_780_000_000.0
HOUR = 3600.0
GPU = "nvidia.com/gpu"
RUNTIME = "kilter.dev/expected-runtime"
KUEUE = "kueue.x-k8s.io/v1beta2"


def nodes() -> list[dict[str, Any]]:
    return [
        node_dict(f"{rack}-t{t:02d}", labels={CLIQUE: rack, TIER1: "leaf-a"})
        for rack in ("r1", "r2")
        for t in range(18)
    ]


def running_pod(name: str, node: str, *, labels: dict[str, str], runtime: str | None, started_s: float) -> Any:
    """A bound pod as the API server returns it once the kubelet started it."""
    pod = pod_json(name, 4, labels=labels, annotations={RUNTIME: runtime} if runtime else None, node=node)
    pod["metadata"]["creationTimestamp"] = stamp(started_s - 60)
    pod["status"]["startTime"] = stamp(started_s)
    return pod


def jobset_short(runtime: str | None = "2h") -> list[dict[str, Any]]:
    """JobSet ``ml/short`` on r1 trays 2-17 and its admitted Workload (admitted at ``NOW - 1h``)."""
    labels = {"jobset.sigs.k8s.io/jobset-name": "short"}
    pods = [
        running_pod(f"short-{t}", f"r1-t{t:02d}", labels=labels, runtime=runtime, started_s=NOW - HOUR + 30)
        for t in range(2, 18)
    ]
    wl = workload("jobset-short-1a2b3", 16, runtime=runtime, created_s=NOW - HOUR - 30)
    wl["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "name": "short",
            "uid": "uid-jobset-short",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    admitted = stamp(NOW - HOUR)
    wl["status"] = {
        "conditions": [
            {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": admitted}
            for t in ("QuotaReserved", "Admitted")
        ],
        "admission": {
            "clusterQueue": "gpu",
            "podSetAssignments": [{"name": "main", "flavors": {GPU: "gb200"}, "resourceUsage": {GPU: "64"}}],
        },
    }
    return [wl, *pods]


def gang_long(runtime: str | None = "5h") -> list[dict[str, Any]]:
    """The ``kilter.dev/gang`` gang ``ml/long`` on r2 trays 2-17, started at ``NOW - 1h``."""
    labels = {"kilter.dev/gang": "long", "kilter.dev/gang-size": "16"}
    return [
        running_pod(f"long-{t}", f"r2-t{t:02d}", labels=labels, runtime=runtime, started_s=NOW - HOUR)
        for t in range(2, 18)
    ]


def workload(
    name: str,
    pods: int,
    *,
    runtime: str | None,
    created_s: float,
    priority: int | None = None,
    gpus_per_pod: int = 4,
) -> dict[str, Any]:
    """A pending Workload as Kueue's job reconciler creates it (no quota reserved yet)."""
    template: dict[str, Any] = {
        "metadata": {"annotations": {RUNTIME: runtime}} if runtime else {},
        "spec": {
            "containers": [
                {"name": "trainer", "image": "trainer:1", "resources": {"requests": {GPU: str(gpus_per_pod)}}}
            ],
            "restartPolicy": "Never",
        },
    }
    spec: dict[str, Any] = {
        "active": True,
        "queueName": "team",
        "podSets": [
            {
                "name": "main",
                "count": pods,
                "template": template,
                "topologyRequest": {"preferred": CLIQUE},
            }
        ],
    }
    if priority is not None:
        spec["priority"] = priority
        spec["priorityClassName"] = f"p{priority}"
        spec["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "resourceVersion": "100",
            "generation": 1,
            "creationTimestamp": stamp(created_s),
            "labels": {"kueue.x-k8s.io/queue-name": "team"},
        },
        "spec": spec,
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": "couldn't assign flavors to pod set main: insufficient unused quota",
                    "lastTransitionTime": stamp(created_s + 1),
                }
            ]
        },
    }


def small_gang(created_s: float, runtime: str | None = "30m") -> list[dict[str, Any]]:
    """A bare ``kilter.dev/gang`` gang of 2 pending 4-GPU pods."""
    out = []
    for i in range(2):
        labels = {"kilter.dev/gang": "small", "kilter.dev/gang-size": "2"}
        pod = pod_json(f"small-{i}", 4, labels=labels, annotations={RUNTIME: runtime} if runtime else None)
        pod["metadata"]["creationTimestamp"] = stamp(created_s)
        out.append(pod)
    return out


def queues() -> list[dict[str, Any]]:
    """ClusterQueue ``gpu`` (144 GPUs) and LocalQueue ``ml/team``."""
    quota = {"name": GPU, "nominalQuota": "144"}
    return [
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "gb200"}, "spec": {}},
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": "gpu"},
            "spec": {
                "resourceGroups": [{"coveredResources": [GPU], "flavors": [{"name": "gb200", "resources": [quota]}]}]
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": "ml"},
            "spec": {"clusterQueue": "gpu"},
        },
    ]


def objects(
    *, short: str | None = "2h", long: str | None = "5h", a: str | None = "3h", b: str | None = "1h"
) -> list[dict[str, Any]]:
    return [
        *nodes(),
        *queues(),
        *jobset_short(short),
        *gang_long(long),
        workload("rack-a", 18, runtime=a, created_s=NOW - 1800),
        workload("rack-b", 18, runtime=b, created_s=NOW - 1200),
        *small_gang(NOW - 600),
    ]
