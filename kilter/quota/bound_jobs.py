"""A job of a queue bound to a Kueue ClusterQueue, and the rules for what it is charged.

This is how a Volcano job (a PodGroup) holds Kueue quota, as a plain record
so that the Volcano verbs and the simulator read the same rules; the adapters
from Volcano's wire and from the cluster state live in ``extenders``.

A job holds quota as Kueue's workloads do once admitted: what its tasks on
nodes hold, and, from the moment it is enqueued (phase Inqueue or later), at
least its ``minimum`` when it ``reserves`` it (its PodGroup sets
``minResources``, which Volcano reserves for an enqueued job, so two jobs
permitted in one session cannot both count on the same quota). A job kilter
has just permitted counts the same way, until the session shows it enqueued.
Its requests, for enqueueing, are its ``minimum`` (its ``minResources``, or,
without them, everything its tasks ask for).

Usage is charged per resource to the first flavor of the ClusterQueue's
resource group that the job's node matches (a ResourceFlavor's
``nodeLabels``; ``FlavorMatch`` says which), and to the group's first flavor
when none does or the job holds nothing on a node yet. Amounts are Kueue's
canonical units: milli-CPU, bytes, counts.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kilter.quota.tree import FR, QuotaNode
from kilter.quota.usage import WorkloadInfo

__all__ = [
    "ENQUEUED_PHASES",
    "BoundJob",
    "FlavorLabels",
    "FlavorMatch",
    "held",
    "plus",
    "requests",
    "usage_of",
    "workload_info",
]

ENQUEUED_PHASES = frozenset({"Inqueue", "Running", "Unknown"})  # PodGroup phases past Volcano's enqueue


@dataclass(frozen=True)
class BoundJob:
    """One job as the quota rules see it (amounts in Kueue's canonical units)."""

    key: str  # "namespace/name", unique among the jobs of one view (Volcano's JobID)
    uid: str
    queue: str  # the queue it was submitted to; bound to a ClusterQueue or to nothing
    priority: int
    created_s: float  # creation time, seconds since the epoch: Kueue's FIFO tie-break
    phase: str  # PodGroup phase: Pending, Inqueue, Running, ...
    holding: Mapping[str, int]  # what its tasks on nodes hold now
    minimum: Mapping[str, int]  # what it asks for to be enqueued (its minResources, or all its tasks ask)
    node: str = ""  # a node it runs on, for the flavor its usage is charged to
    reserves: bool = False  # ``minimum`` is a minResources, which Volcano reserves once the job is enqueued

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def name(self) -> str:
        return self.key.partition("/")[2]


class FlavorMatch(Protocol):
    """Whether a node is one of a flavor's nodes.

    A seam, because the quota layer knows neither Nodes nor the fleet: the
    servers answer from ResourceFlavor ``nodeLabels`` and node labels
    (``FlavorLabels``), the simulator from which platform a flavor stands for.
    """

    def node_matches(self, node: str, flavor: str) -> bool: ...


@dataclass(frozen=True)
class FlavorLabels:
    """``FlavorMatch`` by labels: a node matches a flavor whose every ``nodeLabels`` entry it carries.

    A flavor without a ResourceFlavor object, or without ``nodeLabels``,
    matches every node; an unknown node carries no labels.
    """

    flavor_labels: Mapping[str, Mapping[str, str]]  # flavor -> its nodeLabels
    node_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # node name -> its labels

    def node_matches(self, node: str, flavor: str) -> bool:
        labels = self.node_labels.get(node, {})
        return all(labels.get(k) == v for k, v in self.flavor_labels.get(flavor, {}).items())


def plus(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    """``a + b`` per resource."""
    out = dict(a)
    for r, v in b.items():
        out[r] = out.get(r, 0) + v
    return out


def held(job: BoundJob, *, permitted: Collection[str]) -> dict[str, int]:
    """What the job holds, or what Volcano reserved for it at enqueue (its minimum) if that is more.

    ``permitted`` are the keys of jobs kilter let Volcano enqueue that the
    session may not show enqueued yet.
    """
    if job.reserves and (job.phase in ENQUEUED_PHASES or job.key in permitted):
        return {r: max(job.holding.get(r, 0), job.minimum.get(r, 0)) for r in {*job.holding, *job.minimum}}
    return dict(job.holding)


def requests(job: BoundJob) -> dict[str, int]:
    """What the job asks its ClusterQueue for to be enqueued: its positive minimum."""
    return {r: v for r, v in job.minimum.items() if v > 0}


def usage_of(job: BoundJob, cq: QuotaNode, *, amounts: Mapping[str, int], flavors: FlavorMatch) -> dict[FR, int]:
    """``amounts`` of the job charged per (flavor, resource) of ``cq``.

    Each resource goes to the first flavor of its group that the job's node
    matches, else to the group's first flavor; a resource no group covers,
    and amounts of 0 or less, are not charged.
    """
    out: dict[FR, int] = {}
    for resource, value in amounts.items():
        group = next((names for covered, names in cq.groups if resource in covered), None)
        if not group or value <= 0:
            continue
        chosen = group[0]
        if job.node:
            chosen = next((name for name in group if flavors.node_matches(job.node, name)), group[0])
        out[(chosen, resource)] = out.get((chosen, resource), 0) + value
    return out


def workload_info(job: BoundJob, cq: str, *, reserved: bool, usage: Mapping[FR, int]) -> WorkloadInfo:
    """The job as a Kueue workload of ``cq``: admitted (``reserved``, holding ``usage``) or a preemptor."""
    return WorkloadInfo(
        namespace=job.namespace,
        name=job.name,
        uid=job.uid or job.key,
        cluster_queue=cq,
        local_queue=job.queue,
        priority=job.priority,
        created_s=job.created_s,
        reserved=reserved,
        reserved_s=job.created_s if reserved else None,
        usage=usage,
        requests=job.minimum,
    )
