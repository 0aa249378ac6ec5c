"""The entry point of preemption: the workloads to preempt so a pending one fits, or why none can.

Mirrors Kueue's ``GetTargets`` (``pkg/scheduler/preemption/preemption.go``): find
the candidates (``scope``), order them (``common.candidates_order``), pick
targets with the fair-sharing or the classical strategy, then fill back
(``common.fill_back``). Every what-if is undone before returning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cmp_to_key

from kilter.quota.available import available
from kilter.quota.config import FairSharingConfig
from kilter.quota.preempt.classical import classical_targets
from kilter.quota.preempt.common import PreemptionTargets, candidates_order, fill_back
from kilter.quota.preempt.fairsharing.target import fair_targets
from kilter.quota.preempt.scope import find_scope
from kilter.quota.shares import Shares
from kilter.quota.tree import FR, QuotaNode, QuotaTree
from kilter.quota.usage import WorkloadInfo
from kilter.quota.whatif import Journal

__all__ = ["find_targets"]


def find_targets(
    tree: QuotaTree,
    admitted: Mapping[str, Sequence[WorkloadInfo]],
    cq: QuotaNode,
    preemptor: WorkloadInfo,
    usage: Mapping[FR, int],
    *,
    config: FairSharingConfig,
    shares: Shares,
    now: float,
    lq_usage: Mapping[tuple[str, str], float] | None = None,
    walk_all: bool = False,
) -> PreemptionTargets:
    """The workloads to preempt so ``preemptor`` (needing ``usage`` in ``cq``) fits, or why none can.

    ``walk_all`` walks every candidate of the cohort as Kueue does, without
    kilter's two shortcuts (the bound that answers requests no preemption can
    serve, and the walk under the lowest binding borrowing limit only); the
    targets are the same.
    """
    frs = {fr for fr, v in usage.items() if v > available(cq, fr)}
    if not frs:
        return PreemptionTargets((), "fits without preemption")
    scope = find_scope(tree, admitted, cq, preemptor, usage, frs, now=now, walk_all=walk_all)
    candidates = scope.candidates
    if scope.root.parent is not None:
        where = "its own workloads" if scope.root is cq else f"workloads under Cohort {scope.root.name}"
        capped = (
            f"the borrowingLimit of {scope.root.kind} {scope.root.name} caps {_names(frs)}: only {where} can make room"
        )
        if not candidates:
            return PreemptionTargets((), f"{capped}, and the preemption policy allows none of them")
        if scope.hopeless:
            return PreemptionTargets((), f"{capped}, and preempting all it allows would still not be enough")
    if scope.out_of_reach:
        return PreemptionTargets((), "preempting every workload of every borrowing queue would still not make room")
    if not candidates:
        return PreemptionTargets((), "no workload may be preempted under the ClusterQueue's preemption policy")
    # Removal never lowers ``available``: if taking every candidate is not enough, no subset is
    # (the answer Kueue reaches after trying them all, without the trying).
    if scope.hopeless:
        return PreemptionTargets((), "preempting every allowed candidate would still not make room")
    key = candidates_order(cq.name, now, lq_usage)
    journal = Journal()
    try:
        if config.enabled:
            targets = fair_targets(tree, cq, usage, scope, frs, journal, config=config, shares=shares, key=key)
            allow_borrowing = True
        else:
            flat = sorted((w for ws in candidates.values() for w in ws), key=cmp_to_key(key))
            targets, allow_borrowing = classical_targets(tree, cq, preemptor, usage, flat, frs, journal)
        if targets is None:
            return PreemptionTargets((), "preempting every allowed candidate would still not make room")
        return PreemptionTargets(tuple(fill_back(cq, usage, tree, targets, journal, allow_borrowing=allow_borrowing)))
    finally:
        journal.undo()


def _names(frs: set[FR]) -> str:
    return ", ".join(f"{flavor}/{resource}" for flavor, resource in sorted(frs))
