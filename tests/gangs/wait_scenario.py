"""The split-wait scenario every front door is tested on: a gang that fits one domain when idle, two domains now.

Two GB200 NVL72 racks (``r1``, ``r2``, 18 trays of 4 GPUs) under one leaf;
every tray but the first two of each rack runs a 4-GPU pod. A gang of four
4-GPU pods fits one rack when the fleet is idle (the fewest domains: 1) but
only over both racks now (``FREE``: 2 domains). With an expected runtime of
10 h and the default rule (factor 1, split slowdown 0.2, cap 24 h) it may wait
1 x 0.2 x (2 - 1) x 36,000 s = 7,200 s (2 h) from its creation.
"""

from __future__ import annotations

import time
from typing import Any

from tests.extenders.conftest import pod_json
from tests.topology.builders import CLIQUE, TIER1, node_dict

FREE = ["r1-t00", "r1-t01", "r2-t00", "r2-t01"]
NODES = [f"{rack}-t{t:02d}" for rack in ("r1", "r2") for t in range(18)]
BUDGET_S = 7200.0  # 1 x 0.2 x 1 extra domain x 10 h
GPU = "nvidia.com/gpu"


def stamp(unix_s: float) -> str:
    """RFC 3339 in UTC, whole seconds, as the API server writes ``creationTimestamp``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_s))


def fleet_objects() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    for name in NODES:
        rack = name.split("-")[0]
        objects.append(node_dict(name, labels={CLIQUE: rack, TIER1: "leaf-a"}))
        if name not in FREE:
            objects.append(pod_json(f"busy-{name}", 4, node=name))
    return objects


def gang_pods(
    name: str,
    created_s: float,
    *,
    pods: int = 4,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """A ``kilter.dev/gang`` gang of ``pods`` pending 4-GPU pods created at ``created_s`` (Unix seconds)."""
    out = []
    for i in range(pods):
        gang_labels = {"kilter.dev/gang": name, "kilter.dev/gang-size": str(pods), **(labels or {})}
        pod = pod_json(f"{name}-{i}", 4, labels=gang_labels, annotations=annotations)
        pod["metadata"]["creationTimestamp"] = stamp(created_s)
        out.append(pod)
    return out


def queue_objects(
    *, cq_notes: dict[str, str] | None = None, cohort_notes: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Cohort ``pool`` over ClusterQueue ``gpu`` (64 GPUs), LocalQueue ``ml/team`` into it."""
    api = "kueue.x-k8s.io/v1beta2"
    quota = {"name": GPU, "nominalQuota": "64"}
    return [
        {"apiVersion": api, "kind": "Cohort", "metadata": {"name": "pool", "annotations": cohort_notes or {}}},
        {"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": "gb200"}, "spec": {}},
        {
            "apiVersion": api,
            "kind": "ClusterQueue",
            "metadata": {"name": "gpu", "annotations": cq_notes or {}},
            "spec": {
                "cohortName": "pool",
                "resourceGroups": [{"coveredResources": [GPU], "flavors": [{"name": "gb200", "resources": [quota]}]}],
            },
        },
        {
            "apiVersion": api,
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": "ml"},
            "spec": {"clusterQueue": "gpu"},
        },
    ]


def finished_workload(name: str, hours: float, *, gpus: int = 16, cluster_queue: str = "gpu") -> dict[str, Any]:
    """A Workload as Kueue leaves it once its job finished: admitted at 08:00, finished ``hours`` later."""
    started = 1_780_000_000.0
    conditions = [
        {"type": kind, "status": "True", "reason": kind, "message": "", "lastTransitionTime": stamp(started)}
        for kind in ("QuotaReserved", "Admitted")
    ]
    conditions.append(
        {
            "type": "Finished",
            "status": "True",
            "reason": "Succeeded",
            "message": "Job finished successfully",
            "lastTransitionTime": stamp(started + hours * 3600),
        }
    )
    template = {"spec": {"containers": [{"name": "c", "resources": {"requests": {GPU: "4"}}}]}}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "creationTimestamp": stamp(started)},
        "spec": {"queueName": "team", "podSets": [{"name": "main", "count": gpus // 4, "template": template}]},
        "status": {
            "conditions": conditions,
            "admission": {
                "clusterQueue": cluster_queue,
                "podSetAssignments": [
                    {"name": "main", "flavors": {GPU: "gb200"}, "resourceUsage": {GPU: str(gpus)}, "count": gpus // 4}
                ],
            },
        },
    }
