"""The plugin bench's cluster: 5,004 GB200 Nodes, 150,000 Pods and Kueue queues, as ``kubectl get -o json`` prints them.

Nodes and Pods are bench/coldstart.py's (kubelet, NFD and GFD labels, 50
images per node; DaemonSet pods on every node, GPU pods bound up to 97 % of
the healthy GPUs, the rest pending), with ``managedFields`` stripped as
kubectl has done by default since 1.21 (``--show-managed-fields=false``).
The Kueue side has work for ``queues``, ``pending`` and ``top``: a cohort
over the three ClusterQueues the pods name (``training``, ``inference``,
``research``), their LocalQueues, and a few hundred Workloads, some admitted
(quota reserved on the GB200 flavor) and some pending.

kubectl prints a ``v1 List`` with four-space indentation and, for a list of
several kinds (unstructured objects), keys in sorted order; so does this.
"""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path
from typing import Any

from bench.coldstart import POD_COUNT, SEED, Cluster, nodes_with_managed_fields
from kilter.topology import fleetgen

__all__ = ["ADMITTED", "PENDING", "QUEUES", "build", "kueue_objects", "write"]

Json = dict[str, Any]
KUEUE = "kueue.x-k8s.io/v1beta2"
FLAVOR = "gb200"
GPU = "nvidia.com/gpu"
# ClusterQueue (= the pods' namespace and LocalQueue) -> nominal GPUs; 20,016 GPUs in the fleet
QUEUES = {"training": 12_000, "inference": 5_000, "research": 3_016}
ADMITTED, PENDING = 240, 160  # Workloads per state; gangs of 8 pods of 1, 2 or 4 GPUs, as the pods are


def _meta(name: str, namespace: str = "", **extra: Any) -> Json:
    meta: Json = {"name": name, "uid": f"00000000-0000-4000-8000-{zlib.crc32(f'{namespace}/{name}'.encode()):012d}"}
    if namespace:
        meta["namespace"] = namespace
    meta["creationTimestamp"] = "2026-12-01T08:00:00Z"
    meta["resourceVersion"] = "1"
    return meta | extra


def _cluster_queue(name: str, gpus: int) -> Json:
    cpu = str(72 * gpus // 4)
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": _meta(name),
        "spec": {
            "cohortName": "ai-platform",
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", GPU],
                    "flavors": [
                        {
                            "name": FLAVOR,
                            "resources": [{"name": "cpu", "nominalQuota": cpu}, {"name": GPU, "nominalQuota": gpus}],
                        }
                    ],
                }
            ],
        },
    }


def _workload(i: int, queue: str, rng: random.Random, *, admitted: bool) -> Json:
    gpus = rng.choice((1, 2, 4, 4))
    count = 8
    name = f"job-{queue}-{i:04d}"
    requests = {"cpu": str(32 * gpus), GPU: str(gpus)}
    pod_set = {
        "name": "main",
        "count": count,
        "template": {"spec": {"containers": [{"name": "main", "resources": {"requests": requests}}]}},
    }
    created = f"2026-12-01T{8 + i % 10:02d}:{i % 60:02d}:00Z"
    status: Json = {"conditions": []}
    if admitted:
        status["conditions"] = [
            {"type": t, "status": "True", "lastTransitionTime": created, "reason": t, "message": "admitted"}
            for t in ("QuotaReserved", "Admitted")
        ]
        status["admission"] = {
            "clusterQueue": queue,
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"cpu": FLAVOR, GPU: FLAVOR},
                    "resourceUsage": {"cpu": str(32 * gpus * count), GPU: str(gpus * count)},
                    "count": count,
                }
            ],
        }
    else:
        status["conditions"] = [
            {
                "type": "QuotaReserved",
                "status": "False",
                "lastTransitionTime": created,
                "reason": "Pending",
                "message": f"couldn't assign flavors to pod set main: insufficient unused quota for {GPU}",
            }
        ]
    return {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": _meta(name, queue, labels={"kueue.x-k8s.io/job-uid": f"uid-{name}"}),
        "spec": {"queueName": queue, "priority": rng.choice((0, 100, 1000)), "podSets": [pod_set], "active": True},
        "status": status,
    }


def kueue_objects(rng: random.Random) -> list[Json]:
    """The ResourceFlavor, Cohort, ClusterQueues, LocalQueues and Workloads of the bench cluster."""
    flavor = {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": _meta(FLAVOR),
        "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-GB200"}, "topologyName": "gpu-fabric"},
    }
    out = [flavor, {"apiVersion": KUEUE, "kind": "Cohort", "metadata": _meta("ai-platform"), "spec": {}}]
    out += [_cluster_queue(name, gpus) for name, gpus in QUEUES.items()]
    out += [
        {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": _meta(q, q), "spec": {"clusterQueue": q}}
        for q in QUEUES
    ]
    queues = list(QUEUES)
    out += [_workload(i, queues[i % 3], rng, admitted=True) for i in range(ADMITTED)]
    out += [_workload(ADMITTED + i, queues[i % 3], rng, admitted=False) for i in range(PENDING)]
    return out


def _strip(obj: Json) -> Json:
    obj["metadata"].pop("managedFields", None)
    return obj


def build(pods: int = POD_COUNT) -> list[Json]:
    """Every object of the bench cluster, in the order ``kubectl get nodes,pods,topologies,...`` lists them."""
    rng = random.Random(SEED)
    nodes = [_strip(n) for n in nodes_with_managed_fields(rng)]
    cluster = Cluster(nodes, pods, rng)
    return [*nodes, *(_strip(p) for p in cluster.pods), fleetgen.topology_object(), *kueue_objects(rng)]


def write(path: Path, objects: list[Json], *, indent: int | None = 4) -> int:
    """Write ``objects`` as kubectl's ``v1 List`` (``indent=None``: compact, as ``jq -c`` prints it); returns the
    file's size in bytes."""
    doc = {"apiVersion": "v1", "items": objects, "kind": "List", "metadata": {"resourceVersion": ""}}
    with path.open("w", encoding="utf-8") as f:
        json.dump(doc, f, indent=indent, sort_keys=True, separators=None if indent else (",", ":"))
        f.write("\n")
    return path.stat().st_size
