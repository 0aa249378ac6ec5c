"""Classical preemption (fair sharing off): greedy removal in candidate order until the preemptor fits.

Mirrors Kueue's ``minimalPreemptions`` with the candidate rules of ``GetTargets``
(``pkg/scheduler/preemption/preemption.go``, ``classical/``): a preemptor within
its nominal quota reclaims from borrowing queues (``reclaimWithinCohort``) and
must then fit without borrowing; a borrowing preemptor may preempt
lower-priority workloads of other queues only with ``borrowWithinCohort:
LowerPriority``. Kueue's hierarchical-advantage candidates are not modelled.
The caller fills targets back and undoes the journal.
"""

from __future__ import annotations

from collections.abc import Mapping

from kilter.model.kueue import BorrowWithinCohort
from kilter.quota.available import fits_within_quota, is_within_nominal
from kilter.quota.preempt.common import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    IN_COHORT_RECLAMATION,
    Target,
    fits,
    take,
)
from kilter.quota.tree import FR, QuotaNode, QuotaTree
from kilter.quota.usage import WorkloadInfo
from kilter.quota.whatif import Journal

__all__ = ["classical_targets"]


def _borrows_within_cohort(bwc: BorrowWithinCohort | None, w: WorkloadInfo, preemptor: WorkloadInfo) -> bool:
    """``borrowWithinCohort: LowerPriority``: ``w`` is below the preemptor and at most ``maxPriorityThreshold``."""
    return (
        bwc is not None
        and bwc.policy == "LowerPriority"
        and w.priority < preemptor.priority
        and (bwc.max_priority_threshold is None or w.priority <= bwc.max_priority_threshold)
    )


def classical_targets(
    tree: QuotaTree,
    cq: QuotaNode,
    preemptor: WorkloadInfo,
    usage: Mapping[FR, int],
    candidates: list[WorkloadInfo],
    frs: set[FR],
    journal: Journal,
) -> tuple[list[Target] | None, bool]:
    """The targets in the order taken (None if all allowed are not enough), and whether borrowing is allowed.

    The targets' removal stays in ``journal`` for the fill-back, which must use the same ``allow_borrowing``.
    """
    within_nominal = fits_within_quota(cq, {fr: usage.get(fr, 0) for fr in frs})
    bwc = cq.preemption.borrow_within_cohort if cq.preemption else None
    allowed: list[tuple[WorkloadInfo, str]] = []
    for w in candidates:
        if w.cluster_queue == cq.name:
            allowed.append((w, IN_CLUSTER_QUEUE))
        elif within_nominal:
            allowed.append((w, IN_COHORT_RECLAMATION))
        elif _borrows_within_cohort(bwc, w, preemptor):
            allowed.append((w, IN_COHORT_RECLAIM_WHILE_BORROWING))
    allow_borrowing = not within_nominal
    targets: list[Target] = []
    for w, reason in allowed:
        other = tree.cluster_queues[w.cluster_queue]
        if other is not cq and is_within_nominal(other, frs):
            continue
        targets.append(take(tree, w, reason, journal))
        if fits(cq, usage, allow_borrowing=allow_borrowing):
            return targets, allow_borrowing
    return None, allow_borrowing
