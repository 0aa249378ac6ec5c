"""What both preemption strategies share: results, candidate order, policy predicates, what-if steps.

Mirrors Kueue's ``pkg/scheduler/preemption/common/`` (``ordering.go``:
``CandidatesOrdering``; ``preemption_policy.go``: the ``withinClusterQueue``
and ``reclaimWithinCohort`` policies) and the helpers of ``preemption.go``
both strategies call (``workloadFits``, ``fillBackWorkloads``, the preemption
reasons). kilter adds ``kilter.dev/min-runtime``: a workload admitted less
than that long ago is never taken from another ClusterQueue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kilter.quota.available import available, fits_within_quota, is_within_nominal
from kilter.quota.tree import FR, QuotaNode, QuotaTree
from kilter.quota.usage import WorkloadInfo
from kilter.quota.whatif import Journal

__all__ = [
    "IN_CLUSTER_QUEUE",
    "IN_COHORT_FAIR_SHARING",
    "IN_COHORT_RECLAIM_WHILE_BORROWING",
    "IN_COHORT_RECLAMATION",
    "PreemptionTargets",
    "Target",
    "candidates_order",
    "fill_back",
    "fits",
    "own_candidates",
    "reclaim_candidates",
    "take",
]

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"


@dataclass(frozen=True)
class Target:
    workload: WorkloadInfo
    reason: str


@dataclass(frozen=True)
class PreemptionTargets:
    targets: tuple[Target, ...]
    reason: str = ""


def fits(cq: QuotaNode, usage: Mapping[FR, int], *, allow_borrowing: bool = True) -> bool:
    """``workloadFits``: every flavor/resource within ``available`` (and nominal when borrowing is not allowed)."""
    for fr, v in usage.items():
        if v > available(cq, fr):
            return False
    return allow_borrowing or fits_within_quota(cq, usage)


def candidates_order(
    preemptor_cq: str, now: float, lq_usage: Mapping[tuple[str, str], float] | None = None
) -> Callable[[WorkloadInfo, WorkloadInfo], int]:
    """``CandidatesOrdering`` as a comparator: evicted first, other queues before the preemptor's,
    (admission fair sharing) the heavier LocalQueue of one queue first, lower priority, most
    recently admitted, then UID."""

    def cmp(a: WorkloadInfo, b: WorkloadInfo) -> int:
        if a.evicted != b.evicted:
            return -1 if a.evicted else 1
        a_own, b_own = a.cluster_queue == preemptor_cq, b.cluster_queue == preemptor_cq
        if a_own != b_own:
            return 1 if a_own else -1
        if lq_usage and a.cluster_queue == b.cluster_queue and a.local_queue != b.local_queue:
            ua = lq_usage.get((a.namespace, a.local_queue))
            ub = lq_usage.get((b.namespace, b.local_queue))
            if ua is not None and ub is not None and ua != ub:
                return -1 if ua > ub else 1
        if a.priority != b.priority:
            return -1 if a.priority < b.priority else 1
        ra = a.reserved_s if a.reserved_s is not None else now
        rb = b.reserved_s if b.reserved_s is not None else now
        if ra != rb:
            return -1 if ra > rb else 1
        return (a.uid > b.uid) - (a.uid < b.uid)

    return cmp


def _within_policy(policy: str, w: WorkloadInfo, preemptor: WorkloadInfo) -> bool:
    if policy == "Any":
        return True
    if policy == "LowerPriority":
        return w.priority < preemptor.priority
    if policy == "LowerOrNewerEqualPriority":
        return w.priority < preemptor.priority or (
            w.priority == preemptor.priority and w.created_s > preemptor.created_s
        )
    return False


def own_candidates(
    admitted: Mapping[str, Sequence[WorkloadInfo]], cq: QuotaNode, preemptor: WorkloadInfo, frs: set[FR]
) -> list[WorkloadInfo]:
    """``withinClusterQueue`` candidates: the preemptor's own queue's workloads its policy allows."""
    within = cq.preemption.within_cluster_queue if cq.preemption else "Never"
    if within == "Never":
        return []
    return [
        w
        for w in admitted.get(cq.name, ())
        if w.uid != preemptor.uid and not frs.isdisjoint(w.usage) and _within_policy(within, w, preemptor)
    ]


def reclaim_candidates(
    admitted: Mapping[str, Sequence[WorkloadInfo]],
    cq: QuotaNode,
    other: QuotaNode,
    preemptor: WorkloadInfo,
    frs: set[FR],
    *,
    now: float,
) -> list[WorkloadInfo]:
    """``reclaimWithinCohort`` candidates in ``other``: none unless it borrows a contested flavor/resource."""
    reclaim = cq.preemption.reclaim_within_cohort if cq.preemption else "Never"
    if reclaim == "Never" or other is cq or is_within_nominal(other, frs):
        return []
    limit = other.min_runtime()
    return [
        w
        for w in admitted.get(other.name, ())
        if not frs.isdisjoint(w.usage)
        and _within_policy(reclaim, w, preemptor)
        and (limit is None or w.reserved_s is None or now - w.reserved_s >= limit)
    ]


def take(tree: QuotaTree, w: WorkloadInfo, reason: str, journal: Journal) -> Target:
    """Remove ``w``'s usage from its ClusterQueue in ``journal`` and name it a target for ``reason``."""
    journal.remove(tree.cluster_queues[w.cluster_queue], w.usage)
    return Target(w, reason)


def fill_back(
    cq: QuotaNode,
    usage: Mapping[FR, int],
    tree: QuotaTree,
    targets: list[Target],
    journal: Journal,
    *,
    allow_borrowing: bool,
) -> list[Target]:
    """Re-admit targets in reverse (all but the last) while the preemptor still fits."""
    for i in range(len(targets) - 2, -1, -1):
        w = targets[i].workload
        mark = len(journal)
        journal.add(tree.cluster_queues[w.cluster_queue], w.usage)
        if fits(cq, usage, allow_borrowing=allow_borrowing):
            del targets[i]
        else:
            journal.undo(mark)
    return targets
