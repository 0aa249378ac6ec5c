"""Workloads as the quota engine sees them, and their usage summed per ClusterQueue.

A workload holds quota while ``QuotaReserved`` is true and it has not
``Finished``; its usage is ``status.admission.podSetAssignments[].resourceUsage``
charged to the flavor assigned to each resource, in Kueue's canonical units.
Pending workloads (no reservation, active, not finished) carry their total
requests per resource instead. Summing 100,000 workloads is one ``np.add.at``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kilter.model.core_v1 import PodSpec, pod_request
from kilter.model.kueue import LocalQueue, Workload, WorkloadPriorityClass
from kilter.quota import amount
from kilter.quota.policy import parse_time
from kilter.quota.tree import FR, QuotaTree

__all__ = ["Ledger", "WorkloadInfo", "admitted_keys", "workload_counts", "workload_infos"]


@dataclass(frozen=True)
class WorkloadInfo:
    """One workload: where it queues, its priority and age, what it holds or asks for."""

    namespace: str
    name: str
    uid: str
    cluster_queue: str
    local_queue: str
    priority: int
    created_s: float
    reserved: bool
    reserved_s: float | None = None
    evicted: bool = False
    usage: Mapping[FR, int] = field(default_factory=dict)
    requests: Mapping[str, int] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _time(text: str, path: str) -> float:
    return parse_time(text, path=path) if text else 0.0


def _priority(wl: Workload, classes: Mapping[str, int]) -> int:
    if wl.spec.priority is not None:
        return wl.spec.priority
    ref = wl.spec.priority_class_ref
    name = ref.name if ref is not None else wl.spec.priority_class_name
    return classes.get(name, 0)


def _requests(wl: Workload, path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for i, ps in enumerate(wl.spec.pod_sets):
        spec = ps.template.spec
        names = {
            r for c in (*spec.containers, *spec.init_containers) for r in (*c.resources.requests, *c.resources.limits)
        }
        for r in sorted(names):
            per_pod = pod_amount(spec, r, f"{path}.spec.podSets[{i}].template.spec")
            out[r] = out.get(r, 0) + per_pod * ps.count
    return out


def pod_amount(spec: PodSpec, resource: str, path: str) -> int:
    """A pod's request of ``resource`` in Kueue's canonical units (milli-CPU, rounded-up units otherwise)."""
    return pod_request(
        spec, resource, path=path, convert=lambda value, where: amount.from_quantity(resource, value, path=where)
    )


def workload_infos(
    workloads: Iterable[Workload],
    local_queues: Iterable[LocalQueue] = (),
    priority_classes: Iterable[WorkloadPriorityClass] = (),
) -> list[WorkloadInfo]:
    """Every workload that holds quota or waits for it; finished and deactivated ones are skipped."""
    lq_to_cq = {(lq.metadata.namespace, lq.metadata.name): lq.spec.cluster_queue for lq in local_queues}
    classes = {pc.metadata.name: pc.value for pc in priority_classes}
    out = []
    for wl in workloads:
        meta = wl.metadata
        path = f"Workload {meta.namespace}/{meta.name}"
        status = wl.status
        if status.condition("Finished"):
            continue
        reserved = status.condition("QuotaReserved") and status.admission is not None
        if not reserved and wl.spec.active is False:
            continue
        usage: dict[FR, int] = {}
        cq = lq_to_cq.get((meta.namespace, wl.spec.queue_name), "")
        if reserved and status.admission is not None:
            cq = status.admission.cluster_queue or cq
            for i, psa in enumerate(status.admission.pod_set_assignments):
                for resource, raw in psa.resource_usage.items():
                    flavor = psa.flavors.get(resource)
                    if flavor is None:
                        continue
                    v = amount.from_quantity(
                        resource, raw, path=f"{path}: status.admission.podSetAssignments[{i}].resourceUsage"
                    )
                    usage[(flavor, resource)] = usage.get((flavor, resource), 0) + v
        out.append(
            WorkloadInfo(
                namespace=meta.namespace,
                name=meta.name,
                uid=meta.uid,
                cluster_queue=cq,
                local_queue=wl.spec.queue_name,
                priority=_priority(wl, classes),
                created_s=_time(meta.creation_timestamp or "", f"{path}: metadata.creationTimestamp"),
                reserved=reserved,
                reserved_s=_time(status.since("QuotaReserved"), f"{path}: status.conditions") if reserved else None,
                evicted=status.condition("Evicted"),
                usage=usage,
                requests={} if reserved else _requests(wl, path),
            )
        )
    return out


class Ledger:
    """Admitted usage as flat arrays (workload × flavor/resource), summed per ClusterQueue on demand."""

    def __init__(self, infos: Sequence[WorkloadInfo], cluster_queues: Sequence[str]) -> None:
        self.cluster_queues = list(cluster_queues)
        cq_index = {name: i for i, name in enumerate(self.cluster_queues)}
        frs: dict[FR, int] = {}
        rows_cq: list[int] = []
        rows_fr: list[int] = []
        rows_v: list[int] = []
        for info in infos:
            i = cq_index.get(info.cluster_queue)
            if i is None or not info.reserved:
                continue
            for fr, v in info.usage.items():
                rows_cq.append(i)
                rows_fr.append(frs.setdefault(fr, len(frs)))
                rows_v.append(v)
        self.frs: list[FR] = list(frs)
        self.row_cq: npt.NDArray[np.int64] = np.asarray(rows_cq, dtype=np.int64)
        self.row_fr: npt.NDArray[np.int64] = np.asarray(rows_fr, dtype=np.int64)
        self.row_value: npt.NDArray[np.int64] = np.asarray(rows_v, dtype=np.int64)

    def per_cluster_queue(self) -> dict[str, dict[FR, int]]:
        """Usage of every ClusterQueue (exact int64 sums)."""
        n_fr = max(1, len(self.frs))
        totals = np.zeros(len(self.cluster_queues) * n_fr, dtype=np.int64)
        np.add.at(totals, self.row_cq * n_fr + self.row_fr, self.row_value)
        table = totals.reshape(len(self.cluster_queues), n_fr)
        out: dict[str, dict[FR, int]] = {}
        for i, name in enumerate(self.cluster_queues):
            row = table[i]
            nz = np.flatnonzero(row)
            out[name] = {self.frs[j]: int(row[j]) for j in nz.tolist()}
        return out


def admitted_keys(workloads: Iterable[Workload]) -> set[str]:
    """``namespace/name`` of every Workload whose ``Admitted`` condition is true (quota and every check)."""
    return {f"{w.metadata.namespace}/{w.metadata.name}" for w in workloads if w.status.condition("Admitted")}


def workload_counts(
    tree: QuotaTree, infos: Iterable[WorkloadInfo], admitted: set[str]
) -> dict[tuple[str, str], dict[str, int]]:
    """Per ClusterQueue and Cohort, Kueue's status counts: ``pendingWorkloads`` (no reservation yet),
    ``reservingWorkloads`` (holding quota) and ``admittedWorkloads`` (of those, admitted); a Cohort's are its
    subtree's sums; keyed by (kind, name), as a Cohort may share a ClusterQueue's name."""
    nodes = [*tree.cluster_queues.values(), *tree.cohorts.values()]
    out: dict[tuple[str, str], dict[str, int]] = {
        (n.kind, n.name): {"pendingWorkloads": 0, "reservingWorkloads": 0, "admittedWorkloads": 0} for n in nodes
    }
    for info in infos:
        node = tree.cluster_queues.get(info.cluster_queue)
        if node is None:
            continue
        fields = ["reservingWorkloads"] if info.reserved else ["pendingWorkloads"]
        if info.reserved and info.key in admitted:
            fields.append("admittedWorkloads")
        for n in (node, *node.ancestors()):
            for f in fields:
                out[(n.kind, n.name)][f] += 1
    return out
