"""Which admitted workloads would be preempted so a pending one fits, and why.

Fair sharing (``pkg/scheduler/preemption``, ``fair_strategy.go``,
``fairsharing/{ordering,target}.go``): candidates are the preemptor's own
ClusterQueue (``withinClusterQueue``) and every borrowing ClusterQueue of its
root cohort (``reclaimWithinCohort``); target queues are visited from the
root down the highest share; shares are compared between the two children of
the lowest common ancestor; rule S2-a ``LessThanOrEqualToFinalShare`` or S2-b
``LessThanInitialShare`` decides; a preemptor within its nominal quota
reclaims without a share test; targets are filled back in reverse.

Classical (fair sharing off): a preemptor within its nominal quota reclaims
from borrowing queues (``reclaimWithinCohort``); a borrowing preemptor may
preempt lower-priority workloads of other queues only with
``borrowWithinCohort: LowerPriority``; greedy removal, then fill-back. Kueue's
hierarchical-advantage candidates are not modelled.

kilter adds ``kilter.dev/min-runtime``: a workload admitted less than that
long ago is never taken from another ClusterQueue.
Every what-if is undone before returning.

The modules follow Kueue's ``pkg/scheduler/preemption/`` split: ``targets``
(``GetTargets``, the entry point), ``scope`` (``findCandidates``), ``common``
(results, candidate order, policy predicates, fit and fill-back),
``classical`` and ``fairsharing/{ordering,strategy,target}``.
"""

from kilter.quota.preempt import classical, common, fairsharing, scope, targets
from kilter.quota.preempt.common import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_FAIR_SHARING,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    IN_COHORT_RECLAMATION,
    PreemptionTargets,
    Target,
    candidates_order,
    fits,
)
from kilter.quota.preempt.targets import find_targets

__all__ = [
    "IN_CLUSTER_QUEUE",
    "IN_COHORT_FAIR_SHARING",
    "IN_COHORT_RECLAIM_WHILE_BORROWING",
    "IN_COHORT_RECLAMATION",
    "PreemptionTargets",
    "Target",
    "candidates_order",
    "classical",
    "common",
    "fairsharing",
    "find_targets",
    "fits",
    "scope",
    "targets",
]
