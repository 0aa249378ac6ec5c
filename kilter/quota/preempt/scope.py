"""Where room can come from: the candidates of a preemption and the subtree that bounds them.

Mirrors Kueue's ``findCandidates`` in ``pkg/scheduler/preemption/preemption.go``:
the preemptor's own ClusterQueue (``withinClusterQueue``) and every borrowing
ClusterQueue of its root cohort (``reclaimWithinCohort``). kilter adds two
shortcuts that leave the targets unchanged: the walk stops at the lowest node
whose borrowing limit binds, and a bound computed without looking at single
workloads answers requests no preemption can serve.
Every what-if is undone before returning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kilter.quota import amount
from kilter.quota.available import available, is_within_nominal
from kilter.quota.preempt.common import fits, own_candidates, reclaim_candidates
from kilter.quota.tree import FR, QuotaNode, QuotaTree
from kilter.quota.usage import WorkloadInfo
from kilter.quota.whatif import Journal

__all__ = ["Scope", "find_scope", "is_beyond_reach"]


def _caps(node: QuotaNode, frs: set[FR]) -> bool:
    """The node's borrowing limit, not its parent, bounds what it can take of every contested flavor/resource."""
    if node.parent is None:
        return False
    for fr in frs:
        q = node.quotas.get(fr)
        if q is None or q.borrowing_limit is None:
            return False
        local = node.local_quota(fr)
        stored = amount.sub(node.subtree.get(fr, 0), local)
        used = max(0, node.usage.get(fr, 0) - local)
        if amount.add(amount.sub(stored, used), q.borrowing_limit) > available(node.parent, fr):
            return False
    return True


@dataclass
class Scope:
    """Where room can come from: the subtree of ``root`` and its allowed candidates, per ClusterQueue."""

    root: QuotaNode
    candidates: dict[str, list[WorkloadInfo]]
    hopeless: bool
    out_of_reach: bool = False


def find_scope(
    tree: QuotaTree,
    admitted: Mapping[str, Sequence[WorkloadInfo]],
    cq: QuotaNode,
    preemptor: WorkloadInfo,
    usage: Mapping[FR, int],
    frs: set[FR],
    *,
    now: float,
    walk_all: bool,
) -> Scope:
    """``findCandidates``, stopped at the lowest node whose borrowing limit binds.

    Removing usage anywhere never lowers ``available`` and raises a parent's
    ``available`` by at most what it frees, so once a node's cap is below its
    parent's availability with every candidate under it removed, no removal
    outside that subtree can change whether the preemptor fits. Kueue would still
    walk those outside candidates, take some, and give every one of them back in
    the fill-back; the walk inside the subtree sees only inside shares and
    usage, so it takes the same inside targets. Skipping the outside turns a
    walk over every borrower of the cohort into one over the subtree (the
    differential test runs both on random trees). The candidates are removed
    level by level, so the same pass answers whether taking all of them would
    make room at all.
    """
    journal = Journal()
    try:
        candidates: dict[str, list[WorkloadInfo]] = {}
        own = own_candidates(admitted, cq, preemptor, frs)
        if own:
            candidates[cq.name] = own
        # Only the contested flavor/resources move: the others fit already and removal keeps them fitting.
        journal.remove(cq, _total(own, frs))
        if cq.parent is not None and not walk_all and not _caps(cq, frs) and is_beyond_reach(tree, cq, usage, frs):
            return Scope(cq.root(), candidates, hopeless=True, out_of_reach=True)
        below, node = cq, cq
        while node.parent is not None and (walk_all or not _caps(node, frs)):
            below, node = node, node.parent
            for other in tree.post_order(node):
                if other.is_cohort or other is cq or _inside(other, below):
                    continue
                found = reclaim_candidates(admitted, cq, other, preemptor, frs, now=now)
                if found:
                    candidates[other.name] = found
                    journal.remove(other, _total(found, frs))
        return Scope(node, candidates, not fits(cq, usage))
    finally:
        journal.undo()


def is_beyond_reach(tree: QuotaTree, cq: QuotaNode, usage: Mapping[FR, int], frs: set[FR]) -> bool:
    """Whether the preemptor would not fit even with all usage of every other borrowing queue gone.

    That bound needs no look at single workloads, so a request no preemption can
    serve is answered without filtering every workload of the cohort. It is
    computed without touching the tree: what a queue's removal frees in its
    cohort is its usage above its local quota, and what a cohort passes on to
    its parent is what it loses, up to what it had stored there (the same
    arithmetic as ``remove_usage``, summed per cohort).
    """
    if cq.preemption is None or cq.preemption.reclaim_within_cohort == "Never":
        return False
    root = cq.root()
    cohorts = tree.cohorts_under(root)
    queues = tree.cluster_queues_under(root)
    if len(frs) > 1:
        queues = [q for q in queues if not is_within_nominal(q, frs)]
    borrowing = short = False
    for fr in frs:
        lost: dict[int, int] = {}
        for other in queues:
            used = other.usage.get(fr, 0)
            if len(frs) == 1 and used <= other.subtree.get(fr, 0):
                continue  # within nominal: not a candidate
            part = used - other.local.get(fr, 0)
            if part > 0 and other is not cq:
                borrowing = True
                key = id(other.parent)
                lost[key] = lost.get(key, 0) + part
        for cohort in cohorts:
            part = min(lost.get(id(cohort), 0), cohort.usage.get(fr, 0) - cohort.local.get(fr, 0))
            if part > 0 and cohort.parent is not None:
                key = id(cohort.parent)
                lost[key] = lost.get(key, 0) + part
        short = short or usage[fr] > available(cq, fr, less=lost)
    return borrowing and short


def _total(workloads: Sequence[WorkloadInfo], frs: set[FR]) -> dict[FR, int]:
    """Summed usage on ``frs``: removing it once moves the tree exactly as removing each workload in turn."""
    return {fr: sum(w.usage.get(fr, 0) for w in workloads) for fr in frs}


def _inside(node: QuotaNode, top: QuotaNode) -> bool:
    n: QuotaNode | None = node
    while n is not None:
        if n is top:
            return True
        n = n.parent
    return False
