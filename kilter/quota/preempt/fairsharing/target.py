"""Fair-sharing preemption: which workloads to take, visiting target ClusterQueues in tournament order.

Mirrors Kueue's ``fairPreemptions`` (``pkg/scheduler/preemption/fair_strategy.go``)
with ``fairsharing/target.go`` and ``fairsharing/least_common_ancestor.go``:
shares are compared between the two children of the lowest common ancestor of
the preemptor's and the target's queue; the first strategy decides, and
candidates it rejects are retried under ``LessThanInitialShare`` when a second
strategy is configured. A preemptor within its nominal quota reclaims without a
share test (``preemptWithinNominal``). The caller fills targets back and undoes
the journal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cmp_to_key

from kilter.quota.available import is_within_nominal
from kilter.quota.config import FairSharingConfig
from kilter.quota.drs import DRS
from kilter.quota.preempt.common import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_FAIR_SHARING,
    IN_COHORT_RECLAMATION,
    Target,
    fits,
    take,
)
from kilter.quota.preempt.fairsharing.ordering import Ordering
from kilter.quota.preempt.fairsharing.strategy import is_satisfied, is_unsatisfiable, less_than_initial_share
from kilter.quota.preempt.scope import Scope
from kilter.quota.shares import Shares
from kilter.quota.tree import FR, QuotaNode, QuotaTree
from kilter.quota.usage import WorkloadInfo
from kilter.quota.whatif import Journal

__all__ = ["fair_targets"]


def _almost_lcas(p: QuotaNode, t: QuotaNode) -> tuple[QuotaNode, QuotaNode]:
    """The children of the lowest common ancestor on the preemptor's and the target's paths."""
    t_path = [t, *t.ancestors()]
    t_ids = {id(n): i for i, n in enumerate(t_path)}
    p_path = [p, *p.ancestors()]
    for i, n in enumerate(p_path):
        j = t_ids.get(id(n))
        if j is not None:
            return p_path[i - 1], t_path[j - 1]
    return p_path[-1], t_path[-1]


def fair_targets(
    tree: QuotaTree,
    cq: QuotaNode,
    usage: Mapping[FR, int],
    scope: Scope,
    frs: set[FR],
    journal: Journal,
    *,
    config: FairSharingConfig,
    shares: Shares,
    key: Callable[[WorkloadInfo, WorkloadInfo], int],
) -> list[Target] | None:
    """The targets in the order taken, or None if taking every candidate the walk allows leaves no room.

    The targets' removal stays in ``journal`` for the fill-back; the incoming usage added for the share
    comparisons does not.
    """
    targets: list[Target] = []
    if scope.root is cq:
        # Only the own queue can make room: the walk takes its workloads in order, no share test.
        for w in sorted(scope.candidates.get(cq.name, ()), key=cmp_to_key(key)):
            targets.append(take(tree, w, IN_CLUSTER_QUEUE, journal))
            if fits(cq, usage):
                return targets
        return None

    def fits_now() -> bool:
        mark = len(journal)
        journal.remove(cq, usage)
        try:
            return fits(cq, usage)
        finally:
            journal.undo(mark)

    journal.add(cq, usage)
    try:
        within_nominal = config.preempt_within_nominal and is_within_nominal(cq, frs)
        retry: list[WorkloadInfo] = []
        ordering = Ordering(cq, scope.root, scope.candidates, shares, key)
        for target_cq in ordering.targets():
            if target_cq is cq:
                targets.append(take(tree, ordering.pop(target_cq), IN_CLUSTER_QUEUE, journal))
                ordering.changed(target_cq)
            elif within_nominal:
                targets.append(take(tree, ordering.pop(target_cq), IN_COHORT_RECLAMATION, journal))
                ordering.changed(target_cq)
            else:
                p_side, t_side = _almost_lcas(cq, target_cq)
                p_new, t_old = ordering.share(p_side), ordering.share(t_side)
                if is_unsatisfiable(config.strategies[0], p_new, t_old):
                    while ordering.has(target_cq):
                        retry.append(ordering.pop(target_cq))
                    continue
                after_removal: dict[tuple[tuple[FR, int], ...], DRS] = {}
                while ordering.has(target_cq):
                    w = ordering.pop(target_cq)
                    shape = tuple(sorted(w.usage.items()))
                    t_new = after_removal.get(shape)
                    if t_new is None:
                        mark = len(journal)
                        journal.remove(tree.cluster_queues[w.cluster_queue], w.usage)
                        t_new = after_removal[shape] = shares.of(t_side)
                        journal.undo(mark)
                    if is_satisfied(config.strategies[0], p_new, t_old, t_new):
                        targets.append(take(tree, w, IN_COHORT_FAIR_SHARING, journal))
                        ordering.changed(target_cq)
                        break
                    retry.append(w)
            if fits_now():
                return targets
        if len(config.strategies) > 1:
            regrouped: dict[str, list[WorkloadInfo]] = {}
            for w in retry:
                regrouped.setdefault(w.cluster_queue, []).append(w)
            ordering = Ordering(cq, scope.root, regrouped, shares, key)
            for target_cq in ordering.targets():
                p_side, t_side = _almost_lcas(cq, target_cq)
                p_new, t_old = shares.of(p_side), shares.of(t_side)
                w = ordering.pop(target_cq)
                if less_than_initial_share(p_new, t_old):
                    targets.append(take(tree, w, IN_COHORT_FAIR_SHARING, journal))
                    ordering.changed(target_cq)
                    if fits_now():
                        return targets
                ordering.drop(target_cq)
        return None
    finally:
        # Take the incoming usage back out, keeping the targets' removal for the fill-back.
        journal.remove(cq, usage)
