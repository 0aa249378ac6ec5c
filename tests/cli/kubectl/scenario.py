"""A cluster for the plugin's tests: the demo fleet and queues, plus a running gang and two more pending workloads.

* ``llm/gang/llama``: 8 pods x 4 GPUs bound 6 + 2 across two wholly idle GB200 domains (one domain of 18 trays x
  4 GPUs = 72 would hold its 32 GPUs: domains used 2, minimum 1);
* ``tas/huge``: 36 pods x 4 GPUs = 144 GPUs required in one domain (``nvidia.com/gpu.clique``), in a ClusterQueue
  of its own with room: its quota fits, no domain holds 144 GPUs, so it waits on topology;
* ``tas/checked``: holds quota in that queue, its admission check ``kilter-topology`` still Pending.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kilter.cli.sources import demo_objects, demo_state

NOW = "2026-12-01T12:00:00Z"
GANG_DOMAINS: list[str] = []


def _gpu_pod(ns: str, name: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"uid-{ns}-{name}",
            "labels": labels,
            "creationTimestamp": "2026-12-01T09:00:00Z",
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}}
            ],
        },
        "status": {"phase": "Running"},
    }


def _idle_domains() -> list[tuple[str, list[str]]]:
    """The GB200 domains with every GPU free, and their nodes, in domain order (set-up only)."""
    fleet = demo_state().fleet()
    out = []
    for d, domain in enumerate(fleet.domain_ids):
        nodes = [fleet.node_names[i] for i in range(fleet.n_nodes) if fleet.node_domain[i] == d]
        free = sum(fleet.bitmap.node_free_gpus(fleet.node_index[n]) for n in nodes)
        if len(nodes) == 18 and free == 72:
            out.append((domain, nodes))
    return out


def _template(gpus: int) -> dict[str, Any]:
    return {
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "resources": {
                        "requests": {"nvidia.com/gpu": str(gpus), "cpu": "1"},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ]
        }
    }


def objects() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = list(demo_objects())
    (a, nodes_a), (b, nodes_b) = _idle_domains()[:2]
    GANG_DOMAINS[:] = sorted([a, b])
    labels = {"kilter.dev/gang": "llama", "kilter.dev/gang-size": "8"}
    for i, node in enumerate([*nodes_a[:6], *nodes_b[:2]]):
        out.append(_gpu_pod("llm", f"llama-{i}", node, labels))
    out.append(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "tas-test"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "gb200",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "1000"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": "2000"},
                                ],
                            }
                        ],
                    }
                ],
            },
        }
    )
    out.append(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": "tas"},
            "spec": {"clusterQueue": "tas-test"},
        }
    )
    out.append(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": "huge",
                "namespace": "tas",
                "uid": "uid-huge",
                "creationTimestamp": "2026-12-01T11:00:00Z",
            },
            "spec": {
                "queueName": "default",
                "podSets": [
                    {
                        "name": "main",
                        "count": 36,
                        "template": _template(4),
                        "topologyRequest": {"required": "nvidia.com/gpu.clique"},
                    }
                ],
            },
        }
    )
    out.append(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": "checked",
                "namespace": "tas",
                "uid": "uid-checked",
                "creationTimestamp": "2026-12-01T11:30:00Z",
            },
            "spec": {"queueName": "default", "podSets": [{"name": "main", "count": 2, "template": _template(4)}]},
            "status": {
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "True",
                        "reason": "QuotaReserved",
                        "message": "",
                        "lastTransitionTime": "2026-12-01T11:31:00Z",
                    }
                ],
                "admission": {
                    "clusterQueue": "tas-test",
                    "podSetAssignments": [
                        {
                            "name": "main",
                            "count": 2,
                            "flavors": {"nvidia.com/gpu": "gb200", "cpu": "gb200"},
                            "resourceUsage": {"nvidia.com/gpu": "8", "cpu": "2"},
                        }
                    ],
                },
                "admissionChecks": [
                    {
                        "name": "kilter-topology",
                        "state": "Pending",
                        "message": "waiting for room",
                        "lastTransitionTime": "2026-12-01T11:31:00Z",
                    }
                ],
            },
        }
    )
    return out


def write(path: Path) -> Path:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects()}))
    return path
