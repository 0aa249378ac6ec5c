"""Tiny builders of Kueue objects, shaped as the API server returns them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kilter.model import codec
from kilter.model.kueue import ClusterQueue, Cohort, Workload
from kilter.quota.status import apply_usage
from kilter.quota.tree import FR, QuotaTree, build_tree

Limits = int | str | tuple[Any, ...]  # nominal, or (nominal, borrowingLimit, lendingLimit) with None for unset


def _groups(quotas: Mapping[FR, Limits]) -> list[dict[str, Any]]:
    """One resource group per set of flavors sharing the same resources."""
    by_flavor: dict[str, dict[str, Limits]] = {}
    for (flavor, resource), limits in quotas.items():
        by_flavor.setdefault(flavor, {})[resource] = limits
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for flavor, resources in by_flavor.items():
        entries = []
        for resource, limits in resources.items():
            nominal, bl, ll = (limits, None, None) if not isinstance(limits, tuple) else (*limits, None, None)[:3]
            entry: dict[str, Any] = {"name": resource, "nominalQuota": str(nominal)}
            if bl is not None:
                entry["borrowingLimit"] = str(bl)
            if ll is not None:
                entry["lendingLimit"] = str(ll)
            entries.append(entry)
        groups.setdefault(tuple(resources), []).append({"name": flavor, "resources": entries})
    return [{"coveredResources": list(k), "flavors": v} for k, v in groups.items()]


def cq(
    name: str,
    quotas: Mapping[FR, Limits] | None = None,
    *,
    cohort: str = "",
    weight: str | None = None,
    annotations: dict[str, str] | None = None,
    preemption: dict[str, Any] | None = None,
    v1beta1: bool = False,
) -> ClusterQueue:
    spec: dict[str, Any] = {"resourceGroups": _groups(quotas or {})}
    if cohort:
        spec["cohort" if v1beta1 else "cohortName"] = cohort
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    if preemption:
        spec["preemption"] = preemption
    return codec.convert(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1" if v1beta1 else "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": spec,
        },
        ClusterQueue,
    )


def cohort(
    name: str,
    quotas: Mapping[FR, Limits] | None = None,
    *,
    parent: str = "",
    weight: str | None = None,
    annotations: dict[str, str] | None = None,
) -> Cohort:
    spec: dict[str, Any] = {"resourceGroups": _groups(quotas or {})}
    if parent:
        spec["parentName"] = parent
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    return codec.convert(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Cohort",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": spec,
        },
        Cohort,
    )


def tree(
    cqs: list[ClusterQueue], cohorts: list[Cohort] | None = None, usage: dict[str, dict[FR, int]] | None = None
) -> QuotaTree:
    t = build_tree(cqs, cohorts or [])
    apply_usage(t, usage or {})
    return t


def workload(
    name: str,
    *,
    queue: str = "lq",
    namespace: str = "team",
    priority: int | None = 0,
    created: str = "2026-12-01T10:00:00Z",
    requests: dict[str, str] | None = None,
    count: int = 1,
    admitted_to: str | None = None,
    flavors: dict[str, str] | None = None,
    reserved_at: str = "2026-12-01T10:05:00Z",
    finished: bool = False,
    uid: str = "",
) -> Workload:
    obj: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}", "creationTimestamp": created},
        "spec": {
            "queueName": queue,
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": requests or {}}}]}},
                }
            ],
        },
        "status": {"conditions": []},
    }
    if priority is not None:
        obj["spec"]["priority"] = priority
    if admitted_to:
        usage = {r: str(int(q) * count) if q.isdigit() else q for r, q in (requests or {}).items()}
        obj["status"]["admission"] = {
            "clusterQueue": admitted_to,
            "podSetAssignments": [{"name": "main", "flavors": flavors or {}, "resourceUsage": usage, "count": count}],
        }
        obj["status"]["conditions"].append(
            {"type": "QuotaReserved", "status": "True", "lastTransitionTime": reserved_at, "reason": "QuotaReserved"}
        )
    if finished:
        obj["status"]["conditions"].append({"type": "Finished", "status": "True", "lastTransitionTime": reserved_at})
    return codec.convert(obj, Workload)
