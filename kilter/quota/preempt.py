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
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cmp_to_key

from kilter.quota import amount
from kilter.quota.available import available, fits_within_quota, is_within_nominal
from kilter.quota.config import LESS_THAN_INITIAL_SHARE, FairSharingConfig
from kilter.quota.drs import DRS, compare
from kilter.quota.shares import Shares
from kilter.quota.tree import FR, Node, QuotaTree
from kilter.quota.usage import WorkloadInfo
from kilter.quota.whatif import Journal

__all__ = [
    "IN_CLUSTER_QUEUE",
    "IN_COHORT_FAIR_SHARING",
    "IN_COHORT_RECLAIM_WHILE_BORROWING",
    "IN_COHORT_RECLAMATION",
    "PreemptionResult",
    "Target",
    "candidates_order",
    "find_targets",
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
class PreemptionResult:
    targets: tuple[Target, ...]
    reason: str = ""


def fits(cq: Node, usage: Mapping[FR, int], *, allow_borrowing: bool = True) -> bool:
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


def _min_runtime(node: Node) -> float | None:
    for n in (node, *node.ancestors()):
        if n.policy.min_runtime_s is not None:
            return n.policy.min_runtime_s
    return None


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


def _own_candidates(
    admitted: Mapping[str, Sequence[WorkloadInfo]], cq: Node, preemptor: WorkloadInfo, frs: set[FR]
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


def _reclaim_candidates(
    admitted: Mapping[str, Sequence[WorkloadInfo]],
    cq: Node,
    other: Node,
    preemptor: WorkloadInfo,
    frs: set[FR],
    *,
    now: float,
) -> list[WorkloadInfo]:
    """``reclaimWithinCohort`` candidates in ``other``: none unless it borrows a contested flavor/resource."""
    reclaim = cq.preemption.reclaim_within_cohort if cq.preemption else "Never"
    if reclaim == "Never" or other is cq or is_within_nominal(other, frs):
        return []
    limit = _min_runtime(other)
    return [
        w
        for w in admitted.get(other.name, ())
        if not frs.isdisjoint(w.usage)
        and _within_policy(reclaim, w, preemptor)
        and (limit is None or w.reserved_s is None or now - w.reserved_s >= limit)
    ]


def _caps(node: Node, frs: set[FR]) -> bool:
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
class _Scope:
    """Where room can come from: the subtree of ``root`` and its allowed candidates, per ClusterQueue."""

    root: Node
    candidates: dict[str, list[WorkloadInfo]]
    hopeless: bool
    out_of_reach: bool = False


def _scope(
    tree: QuotaTree,
    admitted: Mapping[str, Sequence[WorkloadInfo]],
    cq: Node,
    preemptor: WorkloadInfo,
    usage: Mapping[FR, int],
    frs: set[FR],
    *,
    now: float,
    walk_all: bool,
) -> _Scope:
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
        own = _own_candidates(admitted, cq, preemptor, frs)
        if own:
            candidates[cq.name] = own
        # Only the contested flavor/resources move: the others fit already and removal keeps them fitting.
        journal.remove(cq, _total(own, frs))
        if cq.parent is not None and not walk_all and not _caps(cq, frs) and _beyond_reach(tree, cq, usage, frs):
            return _Scope(cq.root(), candidates, hopeless=True, out_of_reach=True)
        below, node = cq, cq
        while node.parent is not None and (walk_all or not _caps(node, frs)):
            below, node = node, node.parent
            for other in tree.post_order(node):
                if other.is_cohort or other is cq or _inside(other, below):
                    continue
                found = _reclaim_candidates(admitted, cq, other, preemptor, frs, now=now)
                if found:
                    candidates[other.name] = found
                    journal.remove(other, _total(found, frs))
        return _Scope(node, candidates, not fits(cq, usage))
    finally:
        journal.undo()


def _beyond_reach(tree: QuotaTree, cq: Node, usage: Mapping[FR, int], frs: set[FR]) -> bool:
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


def _inside(node: Node, top: Node) -> bool:
    n: Node | None = node
    while n is not None:
        if n is top:
            return True
        n = n.parent
    return False


class _Ordering:
    """``TargetClusterQueueOrdering``: from the root, repeatedly descend to the highest share.

    Each queue's candidates are sorted only when that queue is first looked
    at; restricted to one queue, ``CandidatesOrdering`` is the same order.
    """

    def __init__(
        self,
        preemptor_cq: Node,
        root: Node,
        by_cq: Mapping[str, list[WorkloadInfo]],
        shares: Shares,
        order: Callable[[WorkloadInfo, WorkloadInfo], int],
    ) -> None:
        self.preemptor = preemptor_cq
        self.root = root
        self.ancestors = {id(a) for a in preemptor_cq.ancestors()}
        self.by_cq = {name: list(ws) for name, ws in by_cq.items() if ws}
        self.sorted: set[str] = set()
        self.pos: dict[str, int] = {}
        self.pruned: set[int] = set()
        self.shares = shares
        self.cmp = order
        self._drs: dict[int, DRS] = {}

    def share(self, node: Node) -> DRS:
        """A node's share, kept until the next preemption changes usage (``changed``)."""
        drs = self._drs.get(id(node))
        if drs is None:
            drs = self._drs[id(node)] = self.shares.of(node)
        return drs

    def changed(self, cq: Node) -> None:
        """Usage moved in ``cq``: only it and its ancestors can have new shares."""
        for node in (cq, *cq.ancestors()):
            self._drs.pop(id(node), None)

    def _list(self, name: str) -> list[WorkloadInfo]:
        ws = self.by_cq[name]
        if name not in self.sorted:
            ws.sort(key=cmp_to_key(self.cmp))
            self.sorted.add(name)
        return ws

    def has(self, cq: Node) -> bool:
        return cq.name in self.by_cq and self.pos.get(cq.name, 0) < len(self.by_cq[cq.name])

    def head(self, cq: Node) -> WorkloadInfo:
        return self._list(cq.name)[self.pos.get(cq.name, 0)]

    def pop(self, cq: Node) -> WorkloadInfo:
        w = self.head(cq)
        self.pos[cq.name] = self.pos.get(cq.name, 0) + 1
        return w

    def drop(self, cq: Node) -> None:
        self.pruned.add(id(cq))

    def targets(self) -> Iterator[Node]:
        if self.root is self.preemptor:
            while self.has(self.preemptor):
                yield self.preemptor
            return
        while id(self.root) not in self.pruned:
            t = self._next(self.root)
            if t is not None:
                yield t

    def _next(self, cohort: Node) -> Node | None:
        best_cq: tuple[Node, DRS] | None = None
        for cq in cohort.child_cqs:
            if id(cq) in self.pruned:
                continue
            if not self.has(cq):
                self.pruned.add(id(cq))
                continue
            drs = self.share(cq)
            if not drs.borrowing and cq is not self.preemptor:
                self.pruned.add(id(cq))
                continue
            if best_cq is None:
                best_cq = (cq, drs)
                continue
            c = compare(drs, best_cq[1])
            if c > 0 or (c == 0 and self.cmp(self.head(cq), self.head(best_cq[0])) < 0):
                best_cq = (cq, drs)
        best_co: tuple[Node, DRS] | None = None
        for co in cohort.child_cohorts:
            if id(co) in self.pruned:
                continue
            drs = self.share(co)
            if not drs.borrowing and id(co) not in self.ancestors:
                self.pruned.add(id(co))
                continue
            if best_co is None or compare(drs, best_co[1]) > 0:
                best_co = (co, drs)
        if best_cq is None and best_co is None:
            self.pruned.add(id(cohort))
            return None
        if best_co is not None and (best_cq is None or compare(best_co[1], best_cq[1]) >= 0):
            return self._next(best_co[0])
        assert best_cq is not None
        return best_cq[0]


def _almost_lcas(p: Node, t: Node) -> tuple[Node, Node]:
    """The children of the lowest common ancestor on the preemptor's and the target's paths."""
    t_path = [t, *t.ancestors()]
    t_ids = {id(n): i for i, n in enumerate(t_path)}
    p_path = [p, *p.ancestors()]
    for i, n in enumerate(p_path):
        j = t_ids.get(id(n))
        if j is not None:
            return p_path[i - 1], t_path[j - 1]
    return p_path[-1], t_path[-1]


def _unsatisfiable(name: str, preemptor_new: DRS, target_old: DRS) -> bool:
    """No candidate of the queue can pass (``fsStrategyUnsatisfiable``): removal never raises the target's share."""
    c = compare(preemptor_new, target_old)
    return c >= 0 if name == LESS_THAN_INITIAL_SHARE else c > 0


def _strategy(name: str, preemptor_new: DRS, target_old: DRS, target_new: DRS) -> bool:
    if name == LESS_THAN_INITIAL_SHARE:
        return compare(preemptor_new, target_old) < 0
    return compare(preemptor_new, target_new) <= 0


def _fill_back(
    cq: Node,
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


def find_targets(
    tree: QuotaTree,
    admitted: Mapping[str, Sequence[WorkloadInfo]],
    cq: Node,
    preemptor: WorkloadInfo,
    usage: Mapping[FR, int],
    *,
    config: FairSharingConfig,
    shares: Shares,
    now: float,
    lq_usage: Mapping[tuple[str, str], float] | None = None,
    walk_all: bool = False,
) -> PreemptionResult:
    """The workloads to preempt so ``preemptor`` (needing ``usage`` in ``cq``) fits, or why none can.

    ``walk_all`` walks every candidate of the cohort as Kueue does, without
    kilter's two shortcuts (the bound that answers requests no preemption can
    serve, and the walk under the lowest binding borrowing limit only); the
    targets are the same.
    """
    frs = {fr for fr, v in usage.items() if v > available(cq, fr)}
    if not frs:
        return PreemptionResult((), "fits without preemption")
    scope = _scope(tree, admitted, cq, preemptor, usage, frs, now=now, walk_all=walk_all)
    candidates = scope.candidates
    if scope.root.parent is not None:
        where = "its own workloads" if scope.root is cq else f"workloads under Cohort {scope.root.name}"
        capped = (
            f"the borrowingLimit of {scope.root.kind} {scope.root.name} caps {_names(frs)}: only {where} can make room"
        )
        if not candidates:
            return PreemptionResult((), f"{capped}, and the preemption policy allows none of them")
        if scope.hopeless:
            return PreemptionResult((), f"{capped}, and preempting all it allows would still not be enough")
    if scope.out_of_reach:
        return PreemptionResult((), "preempting every workload of every borrowing queue would still not make room")
    if not candidates:
        return PreemptionResult((), "no workload may be preempted under the ClusterQueue's preemption policy")
    # Removal never lowers ``available``: if taking every candidate is not enough, no subset is
    # (the answer Kueue reaches after trying them all, without the trying).
    if scope.hopeless:
        return PreemptionResult((), "preempting every allowed candidate would still not make room")
    key = candidates_order(cq.name, now, lq_usage)
    journal = Journal()
    try:
        if config.enabled:
            targets = _fair(tree, cq, usage, scope, frs, journal, config=config, shares=shares, key=key)
            allow_borrowing = True
        else:
            flat = sorted((w for ws in candidates.values() for w in ws), key=cmp_to_key(key))
            targets, allow_borrowing = _classical(tree, cq, preemptor, usage, flat, frs, journal)
        if targets is None:
            return PreemptionResult((), "preempting every allowed candidate would still not make room")
        return PreemptionResult(tuple(_fill_back(cq, usage, tree, targets, journal, allow_borrowing=allow_borrowing)))
    finally:
        journal.undo()


def _names(frs: set[FR]) -> str:
    return ", ".join(f"{flavor}/{resource}" for flavor, resource in sorted(frs))


def _take(tree: QuotaTree, w: WorkloadInfo, reason: str, journal: Journal) -> Target:
    journal.remove(tree.cluster_queues[w.cluster_queue], w.usage)
    return Target(w, reason)


def _fair(
    tree: QuotaTree,
    cq: Node,
    usage: Mapping[FR, int],
    scope: _Scope,
    frs: set[FR],
    journal: Journal,
    *,
    config: FairSharingConfig,
    shares: Shares,
    key: Callable[[WorkloadInfo, WorkloadInfo], int],
) -> list[Target] | None:
    targets: list[Target] = []
    if scope.root is cq:
        # Only the own queue can make room: the walk takes its workloads in order, no share test.
        for w in sorted(scope.candidates.get(cq.name, ()), key=cmp_to_key(key)):
            targets.append(_take(tree, w, IN_CLUSTER_QUEUE, journal))
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
        ordering = _Ordering(cq, scope.root, scope.candidates, shares, key)
        for target_cq in ordering.targets():
            if target_cq is cq:
                targets.append(_take(tree, ordering.pop(target_cq), IN_CLUSTER_QUEUE, journal))
                ordering.changed(target_cq)
            elif within_nominal:
                targets.append(_take(tree, ordering.pop(target_cq), IN_COHORT_RECLAMATION, journal))
                ordering.changed(target_cq)
            else:
                p_side, t_side = _almost_lcas(cq, target_cq)
                p_new, t_old = ordering.share(p_side), ordering.share(t_side)
                if _unsatisfiable(config.strategies[0], p_new, t_old):
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
                    if _strategy(config.strategies[0], p_new, t_old, t_new):
                        targets.append(_take(tree, w, IN_COHORT_FAIR_SHARING, journal))
                        ordering.changed(target_cq)
                        break
                    retry.append(w)
            if fits_now():
                return targets
        if len(config.strategies) > 1:
            regrouped: dict[str, list[WorkloadInfo]] = {}
            for w in retry:
                regrouped.setdefault(w.cluster_queue, []).append(w)
            ordering = _Ordering(cq, scope.root, regrouped, shares, key)
            for target_cq in ordering.targets():
                p_side, t_side = _almost_lcas(cq, target_cq)
                p_new, t_old = shares.of(p_side), shares.of(t_side)
                w = ordering.pop(target_cq)
                if compare(p_new, t_old) < 0:
                    targets.append(_take(tree, w, IN_COHORT_FAIR_SHARING, journal))
                    ordering.changed(target_cq)
                    if fits_now():
                        return targets
                ordering.drop(target_cq)
        return None
    finally:
        # Take the incoming usage back out, keeping the targets' removal for the fill-back.
        journal.remove(cq, usage)


def _classical(
    tree: QuotaTree,
    cq: Node,
    preemptor: WorkloadInfo,
    usage: Mapping[FR, int],
    candidates: list[WorkloadInfo],
    frs: set[FR],
    journal: Journal,
) -> tuple[list[Target] | None, bool]:
    within_nominal = fits_within_quota(cq, {fr: usage.get(fr, 0) for fr in frs})
    bwc = cq.preemption.borrow_within_cohort if cq.preemption else None
    allowed: list[tuple[WorkloadInfo, str]] = []
    for w in candidates:
        if w.cluster_queue == cq.name:
            allowed.append((w, IN_CLUSTER_QUEUE))
        elif within_nominal:
            allowed.append((w, IN_COHORT_RECLAMATION))
        elif (
            bwc is not None
            and bwc.policy == "LowerPriority"
            and w.priority < preemptor.priority
            and (bwc.max_priority_threshold is None or w.priority <= bwc.max_priority_threshold)
        ):
            allowed.append((w, IN_COHORT_RECLAIM_WHILE_BORROWING))
    allow_borrowing = not within_nominal
    targets: list[Target] = []
    for w, reason in allowed:
        other = tree.cluster_queues[w.cluster_queue]
        if other is not cq and is_within_nominal(other, frs):
            continue
        targets.append(_take(tree, w, reason, journal))
        if fits(cq, usage, allow_borrowing=allow_borrowing):
            return targets, allow_borrowing
    return None, allow_borrowing
